package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
)

// SinkRun is a started sink: the run it writes to and, once the session is
// open, its forwarder.
type SinkRun struct {
	Sink    tracker.Sink
	RunID   string
	Created bool // bridge created the run (it may set its terminal status)
	fwd     *tracker.Forwarder
}

// RunCreator is implemented by sinks that can create their run (MLflow's):
// a restarted attempt resumes a run only bridge created as its own.
type RunCreator interface {
	Created() bool
}

// Started is what StartSinks returns: the sinks that will get samples, the
// environment the child needs, and the sinks that could not start (rows for
// the end-of-run table).
type Started struct {
	Runs   []SinkRun
	Env    []string
	Failed []summary.Row
}

// RunIDs maps tracker name to run id, as the spool's start record keeps it.
func (st Started) RunIDs() map[string]string {
	ids := map[string]string{}
	for _, r := range st.Runs {
		ids[r.Sink.Name()] = r.RunID
	}
	return ids
}

// StartSinks starts every sink (finding or creating its run) at once, before
// the child starts, and returns by ctx's deadline (--start-timeout) whatever
// the trackers do: a sink whose Start has not returned a moment after it (one
// that ignores ctx) is left behind. A sink that cannot start, or is left
// behind, is dropped with a clear message; its samples stay in the spool.
// Without a deadline StartSinks waits for every sink.
func StartSinks(ctx context.Context, sinks []tracker.Sink, info tracker.StartInfo, log *slog.Logger) Started {
	type result struct {
		env []string
		err error
		id  string
	}
	results := make([]*result, len(sinks))
	done := make(chan int, len(sinks))
	for i, s := range sinks {
		go func() {
			r := &result{err: errors.New("internal error while starting")}
			defer func() {
				if p := recover(); p != nil {
					log.Error("internal error starting a tracker; the job goes on", "tracker", s.Name(), "panic", p, "stack", string(debug.Stack()))
				}
				results[i] = r
				done <- i
			}()
			r.env, r.err = s.Start(ctx, info)
			r.id = s.RunID()
		}()
	}
	var grace <-chan time.Time
	if dl, ok := ctx.Deadline(); ok {
		t := time.NewTimer(time.Until(dl) + 200*time.Millisecond)
		defer t.Stop()
		grace = t.C
	}
	answered := make([]bool, len(sinks))
wait:
	for range sinks {
		select {
		case i := <-done:
			answered[i] = true
		case <-grace:
			break wait
		}
	}
	var st Started
	for i, s := range sinks {
		if !answered[i] {
			log.Error("tracker did not answer within --start-timeout; the child starts without it, samples stay in the spool (upload later with `bridge sync`)",
				"tracker", s.Name())
			st.Failed = append(st.Failed, summary.Row{What: s.Name(), Value: "not used: no answer within --start-timeout"})
			continue
		}
		r := results[i]
		st.Env = append(st.Env, r.env...)
		switch {
		case r.err == nil:
		case errors.Is(r.err, tracker.ErrPermanent) || r.id == "":
			log.Error("tracker refused or unreachable at start; nothing is sent to it, samples stay in the spool (upload later with `bridge sync`)",
				"tracker", s.Name(), "err", r.err)
			st.Failed = append(st.Failed, summary.Row{What: s.Name(), Value: "not used: " + r.err.Error()})
			continue
		default:
			// The run is known (given, or generated for the child): keep
			// the sink, and let the forwarder retry until the tracker is up.
			log.Warn("tracker not reachable at start; samples are spooled and sent when it is",
				"tracker", s.Name(), "run", r.id, "err", r.err)
		}
		c, ok := s.(RunCreator)
		st.Runs = append(st.Runs, SinkRun{Sink: s, RunID: r.id, Created: ok && c.Created()})
	}
	return st
}
