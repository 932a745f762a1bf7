package gpu

// throttleReason is one bit of NVML's clocks event (formerly "throttle")
// reasons bitmask, nvmlClocksEventReason* in nvml.h.
type throttleReason struct {
	bit  uint64
	name string // suffix of gpu_N_throttle_<name>
	slow bool   // counted in gpu_N_throttle_reasons_count
}

// throttleReasons is the readable set bridge reports. GPU idle is not a
// slowdown (clocks drop because there is no work), so it has a flag but is
// not counted. Display clock, board limit and reliability bits exist only on
// newer drivers and are left out: they are rare and often unsupported.
var throttleReasons = []throttleReason{
	{1, "gpu_idle", false},
	{2, "applications_clocks", true}, // clocks capped by an applications-clocks setting
	{4, "sw_power_cap", true},        // power above the software power limit
	{8, "hw_slowdown", true},         // hardware slowdown: thermal or power brake, factor 2 or more
	{16, "sync_boost", true},         // held to the clocks of other GPUs in a sync-boost group
	{32, "sw_thermal", true},         // software thermal slowdown (memory or GPU temperature)
	{64, "hw_thermal", true},         // hardware thermal slowdown
	{128, "hw_power_brake", true},    // external power brake assertion (the power supply)
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
