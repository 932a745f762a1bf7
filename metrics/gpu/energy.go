package gpu

import (
	"time"

	"github.com/bridge-dev/bridge/metrics/internal/counter"
)

// MaxGPUWatts is the stated physical bound of one GPU's power: about twice
// the largest board's today (1,400 W). An energy counter growing faster
// than this over an interval is a glitch: that interval is not counted.
const MaxGPUWatts = 3000

// energy turns a GPU's total energy counter (NVML: millijoules since the
// driver was loaded) into the energy used since bridge started: the first
// reading is the baseline, and each interval is counted by the one counter
// rule (metrics/internal/counter): the counter does not wrap, so a reading
// below the previous one (the driver reloaded, the GPU reset, a glitch) is
// an interval not counted, as is one faster than MaxGPUWatts; the count
// goes on from the new reading. It is not safe for concurrent use
// (Collect's).
type energy struct {
	c counter.Counter // mJ
}

// add takes a reading v (mJ) at now and returns the joules used since the
// baseline, and what the interval gave. ok is false for the baseline
// itself and while nothing has been counted: a counter that never moves is
// broken or unsupported, and 0 J would be a false figure.
func (e *energy) add(v uint64, now time.Time) (joules float64, st counter.Step, ok bool) {
	e.c.MaxRate = MaxGPUWatts * 1000 // mJ a second
	st = e.c.Update(v, now)
	if st.Skip == counter.Baseline || e.c.Total <= 0 {
		return 0, st, false
	}
	return e.c.Total / 1000, st, true
}
