package mlflow

import "math"

// steadyEveryMS is the longest a steady series goes unsent while its value
// holds (sample time, ms): its chart reaches at most this far behind the
// run's newest point, and a bridge killed before the end loses at most this
// much of its line.
const steadyEveryMS = 60_000

// steady picks the points of steady series (metrics.Desc.Steady: limits,
// capacities, counts of rare events) that a log-batch carries. MLflow's
// server pays for every point it stores (bench/logbatch_cost.sh), and a line
// chart draws a flat stretch from its two ends, so a steady series is sent
//   - at its first sample;
//   - when its value changes: the newest point of the old value first (the
//     end of the flat stretch), so that the chart keeps the step;
//   - at least every steadyEveryMS while its value holds;
//   - at the end of the run (held, by Finish): the end of the last stretch.
//
// A point read back from the spool has no descriptor: its key counts as
// steady once a point of it with one was seen, else it is sent. State is
// per key and belongs to the sink's goroutine (tracker.Sink's contract).
//
// A Send that fails part-way leaves the samples from the first one not
// acknowledged to be sent again: the state goes back to what it was before
// that sample (an undo log), so the retry sends what the failed request
// held, the ends of stretches included.
type steady struct {
	keys map[string]*steadyKey
	log  []steadyUndo // this Send's changes of samples not yet acknowledged
}

type steadyKey struct {
	value  float64 // the value last sent
	sentTS int64   // its sample time, ms
	// held: the newest point of the same value was not sent; it ends the
	// flat stretch, and is sent when the value changes or at the end.
	held     bool
	ts, step int64
}

// steadyUndo is a key's state before sample (the Send's index) changed it.
type steadyUndo struct {
	key    string
	sample int
	old    steadyKey
	absent bool
}

// point is one metric to encode.
type point struct {
	value    float64
	ts, step int64
}

// begin is called as a Send starts.
func (st *steady) begin() {
	if st.keys == nil {
		st.keys = map[string]*steadyKey{}
	}
	st.log = st.log[:0]
}

// acked is called when the samples before index n of the Send are
// acknowledged: their changes stay.
func (st *steady) acked(n int) {
	i := 0
	for i < len(st.log) && st.log[i].sample < n {
		i++
	}
	st.log = append(st.log[:0], st.log[i:]...)
}

// failed is called when a request of the Send fails: the changes of the
// samples not acknowledged are undone, newest first.
func (st *steady) failed() {
	for i := len(st.log) - 1; i >= 0; i-- {
		u := st.log[i]
		if u.absent {
			delete(st.keys, u.key)
		} else {
			*st.keys[u.key] = u.old
		}
	}
	st.log = st.log[:0]
}

// known reports whether key is a steady series' key (a point of it with
// its descriptor was seen).
func (st *steady) known(key string) bool {
	_, ok := st.keys[key]
	return ok
}

// pick returns, appended to out, the points of key to send for its value v
// in the Send's sample (index sample, time ts, step): none (held back), the
// point, or the end of the old stretch and the point.
func (st *steady) pick(key string, sample int, v float64, ts, step int64, out []point) []point {
	k, ok := st.keys[key]
	if !ok {
		st.log = append(st.log, steadyUndo{key: key, sample: sample, absent: true})
		st.keys[key] = &steadyKey{value: v, sentTS: ts}
		return append(out, point{v, ts, step})
	}
	st.log = append(st.log, steadyUndo{key: key, sample: sample, old: *k})
	changed := math.Float64bits(v) != math.Float64bits(k.value)
	if !changed && ts-k.sentTS < steadyEveryMS {
		k.held, k.ts, k.step = true, ts, step
		return out
	}
	if changed && k.held {
		out = append(out, point{k.value, k.ts, k.step})
	}
	*k = steadyKey{value: v, sentTS: ts}
	return append(out, point{v, ts, step})
}

// held returns the points held back at the ends of the flat stretches, by
// key, for the run's end; sent marks them sent.
func (st *steady) held() map[string]point {
	out := map[string]point{}
	for key, k := range st.keys {
		if k.held {
			out[key] = point{k.value, k.ts, k.step}
		}
	}
	return out
}

func (st *steady) sent(keys map[string]point) {
	for key, p := range keys {
		if k, ok := st.keys[key]; ok {
			k.held, k.sentTS = false, p.ts
		}
	}
}
