package amdgpu

import "github.com/bridge-dev/bridge/metrics"

// maxGTTMegabytes bounds the GTT series: GTT is system memory the GPU
// maps, never more than the node's RAM, and a petabyte is past any node.
const maxGTTMegabytes = 1e9

// An AMD GPU's GTT (graphics translation table): system memory the GPU
// maps. An APU keeps most of its GPU memory there, its VRAM a small
// carve-out; a discrete GPU stages transfers in it. Per-GPU templates of
// this collector only.
var (
	GTTTotal = &metrics.Desc{Name: "memory_gtt_total_megabytes", Unit: metrics.UnitMegabytes, Scope: metrics.ScopeGPU, Steady: true, PerGPU: true,
		Valid: metrics.Range{Min: 0, Max: maxGTTMegabytes}, Prom: "memory_gtt_total_bytes",
		Help: "System memory the AMD GPU can map through its GTT, in bytes."}
	GTTUsed = &metrics.Desc{Name: "memory_gtt_used_megabytes", Unit: metrics.UnitMegabytes, Scope: metrics.ScopeGPU, PerGPU: true, Total: GTTTotal,
		Valid: metrics.Range{Min: 0, Max: maxGTTMegabytes}, Prom: "memory_gtt_used_bytes",
		Help: "System memory the AMD GPU has mapped through its GTT, in bytes (most of an APU's GPU memory)."}
)

// Series are every series the collector may add, as its registration
// declares them: the per-GPU templates that mean what NVIDIA's do, the
// GTT, and the child's GPU memory (declared in package metrics, shared
// with the NVML collector).
var Series = []*metrics.Desc{
	metrics.GPUUtilization, metrics.GPUMemoryControllerUtilization, metrics.GPUPowerUsage, metrics.GPUPowerLimit,
	metrics.GPUPowerUsagePercent, metrics.GPUTemperature, metrics.GPUSMClock, metrics.GPUMemoryClock,
	metrics.GPUMemoryUsed, metrics.GPUMemoryTotal, metrics.GPUMemoryUsagePercent, GTTUsed, GTTTotal,
	metrics.ProcessGPUProcesses, metrics.ProcessGPUUnmatchedProcesses, metrics.ProcessGPUMemory,
}
