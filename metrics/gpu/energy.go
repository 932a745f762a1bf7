package gpu

// energy turns a GPU's total energy counter (NVML: millijoules since the
// driver was loaded) into the energy used since bridge started: the first
// reading is the baseline. It is not safe for concurrent use (Collect's).
type energy struct {
	started bool    // the baseline is taken
	start   uint64  // mJ: the baseline, or 0 after a reset
	last    uint64  // mJ: the previous reading
	before  float64 // mJ counted before the last reset
}

// add takes a reading v (mJ) and returns the joules used since the
// baseline. ok is false for the baseline itself and while the counter has
// not moved from it: a counter that never moves is broken or unsupported,
// and 0 J would be a false figure. A reading below the previous one is a
// reset (the driver reloaded, the GPU reset): the counter counts again from
// 0, so all of the new reading is energy used since.
func (e *energy) add(v uint64) (joules float64, ok bool) {
	if !e.started {
		e.started, e.start, e.last = true, v, v
		return 0, false
	}
	if v < e.last {
		e.before += float64(e.last - e.start)
		e.start = 0
	}
	e.last = v
	total := e.before + float64(v-e.start)
	if total <= 0 {
		return 0, false
	}
	return total / 1000, true
}
