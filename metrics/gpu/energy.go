package gpu

import "github.com/bridge-dev/bridge/metrics/internal/counter"

// energy turns a GPU's total energy counter (NVML: millijoules since the
// driver was loaded) into the energy used since bridge started: the first
// reading is the baseline. It is not safe for concurrent use (Collect's).
type energy struct {
	c counter.Counter // mJ; a reading below the previous one is a reset
}

// add takes a reading v (mJ) and returns the joules used since the
// baseline. ok is false for the baseline itself and while the counter has
// not moved from it: a counter that never moves is broken or unsupported,
// and 0 J would be a false figure. A reading below the previous one is a
// reset (the driver reloaded, the GPU reset): the counter counts again from
// 0, so all of the new reading is energy used since.
func (e *energy) add(v uint64) (joules float64, ok bool) {
	if _, ok := e.c.Update(v); !ok || e.c.Total <= 0 {
		return 0, false
	}
	return e.c.Total / 1000, true
}
