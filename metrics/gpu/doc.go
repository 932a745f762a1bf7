// Package gpu samples NVIDIA GPUs through NVML (github.com/NVIDIA/go-nvml):
// per device utilization, memory, power, energy since start, temperature,
// clocks, throttle reasons, ECC and remapped-row counters, activity from GPM
// (GPU Performance Monitoring, Hopper and later: SM active, tensor pipes,
// DRAM, PCIe, NVLink), per MIG GPU instance memory and activity, the GPU
// memory of the child's process tree, and Xid critical error events.
//
// Safety comes first, because NVML is a C library loaded with dlopen:
//   - Without libnvidia-ml.so.1 Init fails; the collector is then off and
//     makes no further NVML call (a call after a failed Init kills the
//     process with a symbol lookup error).
//   - Symbols newer than the oldest supported driver are looked up with
//     Extensions().LookupSymbol before they are used.
//   - Every call runs under a timeout, and at most one call is in flight: a
//     call that hangs pauses GPU readings until it returns, it never piles up
//     goroutines or stalls the Sampler.
//   - A device that answers ERROR_NO_PERMISSION is skipped; a reading a
//     device does not support is dropped and not asked for again.
//   - GPM sample buffers are allocated at start, two per target, and freed
//     when GPM turns off for it or as part of the final call before
//     nvmlShutdown, never under a call still in flight.
//
// The collector needs cgo (go-nvml does). Built with CGO_ENABLED=0, or for a
// system other than Linux, a stub takes its place whose Detect says the GPU
// collector is compiled out.
//
// Metric names, units and the NVML call behind each are listed in
// docs/metrics.md; selection, MIG, PIDs and safety in docs/gpu.md.
package gpu
