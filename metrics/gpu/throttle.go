package gpu

import "github.com/bridge-dev/bridge/metrics"

// throttleReason is one bit of NVML's clocks event (formerly "throttle")
// reasons bitmask, nvmlClocksEventReason* in nvml.h.
type throttleReason struct {
	bit  uint64
	desc *metrics.Desc // its 0/1 flag, gpu_N_throttle_<reason>
	slow bool          // counted in gpu_N_throttle_reasons_count
}

// throttleReasons is the readable set bridge reports. GPU idle is not a
// slowdown (clocks drop because there is no work), so it has a flag but is
// not counted. Display clock, board limit and reliability bits exist only on
// newer drivers and are left out: they are rare and often unsupported.
var throttleReasons = []throttleReason{
	{1, metrics.GPUThrottleGPUIdle, false},
	{2, metrics.GPUThrottleApplicationsClocks, true}, // clocks capped by an applications-clocks setting
	{4, metrics.GPUThrottleSWPowerCap, true},         // power above the software power limit
	{8, metrics.GPUThrottleHWSlowdown, true},         // hardware slowdown: thermal or power brake, factor 2 or more
	{16, metrics.GPUThrottleSyncBoost, true},         // held to the clocks of other GPUs in a sync-boost group
	{32, metrics.GPUThrottleSWThermal, true},         // software thermal slowdown (memory or GPU temperature)
	{64, metrics.GPUThrottleHWThermal, true},         // hardware thermal slowdown
	{128, metrics.GPUThrottleHWPowerBrake, true},     // external power brake assertion (the power supply)
}

// decodeThrottle returns one 0/1 flag per reason, in throttleReasons order,
// and how many slowdown reasons are active.
func decodeThrottle(mask uint64) (flags []float64, active int) {
	flags = make([]float64, len(throttleReasons))
	for i, r := range throttleReasons {
		if mask&r.bit == 0 {
			continue
		}
		flags[i] = 1
		if r.slow {
			active++
		}
	}
	return flags, active
}
