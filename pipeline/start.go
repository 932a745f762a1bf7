package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"runtime/debug"
	"time"

	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
)

// SinkRun is a started sink: the run it writes to and, once the session is
// open, its forwarder.
type SinkRun struct {
	Sink tracker.Sink
	// RunID is the run known at start. Once the session is open, read
	// run(): a late start (Late) writes to a run RunID never holds.
	RunID   string
	Created bool // bridge created the run (it may set its terminal status)
	// Late is set when the tracker was not reachable within the start
	// timeout and no run is known yet: the forwarder starts the sink in the
	// background (tracker.Forwarder.Start) and RunID stays empty here.
	Late   *tracker.StartInfo
	fwd    *tracker.Forwarder
	done   chan struct{}      // closed when fwd has returned
	cancel context.CancelFunc // ends this forwarder alone (see Session.Stop)
}

// reached reports whether the sink's tracker ever answered; a sink that
// cannot tell counts as reached (it gets the whole flush timeout).
func (r SinkRun) reached() bool {
	rc, ok := r.Sink.(tracker.Reacher)
	return !ok || rc.Reached()
}

// run is the run the sink writes to now: RunID, or the run a late start
// created ("" while it has not).
func (r SinkRun) run() string {
	if r.fwd != nil {
		return r.fwd.CurrentRun()
	}
	return r.RunID
}

// CreatedTag is the start-record tag saying bridge created sink's run (so a
// restart or `bridge sync` may end it).
func CreatedTag(sink string) string { return createdTagPrefix + sink }

// Started is what StartSinksWith returns: the sinks that will get samples, the
// environment the child needs, and the sinks that could not start (rows for
// the end-of-run table).
type Started struct {
	Runs   []SinkRun
	Env    []string
	Failed []summary.Row
	// Offline are the runs of trackers the job turned off whose client
	// keeps the run on disk (WithOff), by tracker.
	Offline map[string]string
}

// RunIDs maps tracker name to run id, as the spool's start record keeps it:
// the runs of the started sinks, and those of trackers the job turned off
// whose client keeps the run for an upload later (WithOff).
func (st Started) RunIDs() map[string]string {
	ids := map[string]string{}
	for t, id := range st.Offline {
		ids[t] = id
	}
	for _, r := range st.Runs {
		ids[r.Sink.Name()] = r.RunID
	}
	return ids
}

// WithOff adds to st the trackers the job turned off whose own client
// keeps the run for an upload later (W&B offline): the child gets the
// run's variables, and the spool records the run, so that `bridge sync`
// of the spool writes into the run the child's client uploads.
func (st Started) WithOff(off []TrackerOff) Started {
	for _, o := range off {
		if o.Mode == nil || o.Mode.RunID == "" {
			continue
		}
		if st.Offline == nil {
			st.Offline = map[string]string{}
		}
		st.Offline[o.Tracker] = o.Mode.RunID
		st.Env = append(st.Env, o.Mode.Env...)
	}
	return st
}

// StartPolicy says how long the child waits for each sink's Start and what
// happens to a sink whose tracker did not answer in time.
type StartPolicy struct {
	Timeout time.Duration // each sink's Start is retried within it
	// Background keeps a sink that could not reach its tracker in time and
	// has no run yet: its forwarder starts it later and sends what was
	// spooled meanwhile. Without it (bridge sync), such a sink is dropped.
	Background bool
}

// StartSinksWith starts every sink (finding or creating its run) at once,
// before the child starts, and returns within pol.Timeout whatever the
// trackers do: a sink whose Start has not returned a moment after it (one
// that ignores its context) is left behind, dropped and never called again.
// A sink that refuses (a permanent error, an invalid answer) is dropped with
// a clear message; its samples stay in the spool. What a tracker returns for
// the child is checked (tracker.ValidEnv): it never keeps the child from
// starting.
func StartSinksWith(ctx context.Context, sinks []tracker.Sink, info tracker.StartInfo, pol StartPolicy, log *slog.Logger) Started {
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
			r.env, r.err = startWithin(ctx, s, info, pol.Timeout)
			r.id = s.Run().ID
		}()
	}
	wait := pol.Timeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	grace := time.NewTimer(wait + 200*time.Millisecond)
	defer grace.Stop()
	answered := make([]bool, len(sinks))
collect:
	for range sinks {
		select {
		case i := <-done:
			answered[i] = true
		case <-grace.C:
			break collect
		}
	}
	var st Started
	if ctx.Err() != nil {
		// The caller called the start off (a signal): it says why, and the
		// sinks' failures that follow from it are no news.
		log = slog.New(slog.DiscardHandler)
	}
	for i, s := range sinks {
		if !answered[i] {
			log.Error("tracker did not answer within --start-timeout; the child starts without it, samples wait in the spool (within --spool-max-size) for `bridge sync`",
				"tracker", s.Name(), "waited", pol.Timeout)
			st.Failed = append(st.Failed, summary.Row{What: s.Name(), Value: "not used: no answer within --start-timeout"})
			continue
		}
		e, err, id := results[i].env, results[i].err, results[i].id
		if verr := tracker.ValidEnv(e); verr != nil {
			e, err = nil, tracker.Permanent(verr)
		}
		// Variables the child can use even when the tracker failed (a
		// generated W&B run id) go along.
		st.Env = append(st.Env, e...)
		switch {
		case err == nil:
		case errors.Is(err, tracker.ErrPermanent) || (id == "" && !pol.Background):
			// Says which: the tracker's answer refused bridge, or no run was
			// had in time (and there is no background start).
			what := "tracker refused bridge at start"
			if !errors.Is(err, tracker.ErrPermanent) {
				what = "tracker gave no run within --start-timeout"
			}
			log.Error(what+"; nothing is sent to it, samples wait in the spool (within --spool-max-size) for `bridge sync`",
				"tracker", s.Name(), "err", err)
			st.Failed = append(st.Failed, summary.Row{What: s.Name(), Value: "not used: " + err.Error()})
			continue
		case id == "":
			log.Warn(noRunYet(s, err)+"; the job starts without its run, bridge keeps trying in the background and sends the spooled samples to the run it finds or creates then. A server just started, or busy, answers in seconds: raise --start-timeout (the child starts as soon as the run is had)",
				"tracker", s.Name(), "waited", pol.Timeout, "err", err)
			li := info
			st.Runs = append(st.Runs, SinkRun{Sink: s, Late: &li})
			continue
		default:
			// The run is known (given, or generated for the child): keep
			// the sink, and let the forwarder retry until the tracker is up.
			log.Warn("tracker not reachable at start; samples are spooled and sent when it is",
				"tracker", s.Name(), "run", id, "err", err)
		}
		st.Runs = append(st.Runs, SinkRun{Sink: s, RunID: id, Created: s.Run().Created})
	}
	return st
}

// noRunYet says why s gave no run within --start-timeout: it answered,
// and was slow; nothing answered at its address (refused: not running, or
// still starting); a request was still waiting for its answer (slow); or
// none of these is known (a node of a job still waiting for the run its
// first node creates).
func noRunYet(s tracker.Sink, err error) string {
	r, ok := s.(tracker.Reacher)
	var ue *url.Error
	switch {
	case ok && r.Reached():
		return "tracker slow at start: it answered, but gave no run within --start-timeout"
	case tracker.Refused(err):
		return "tracker not reachable at start: nothing answered at its address within --start-timeout (connection refused: the server is not running, or still starting)"
	case errors.As(err, &ue) && ue.Timeout():
		return "tracker slow at start: a request had no answer within --start-timeout"
	}
	return "tracker gave no run within --start-timeout"
}

// startWithin calls s.Start until it succeeds, fails for good, or timeout
// (which the child waits on) has passed: a tracker that blinks for a second
// still gives the child its run.
func startWithin(ctx context.Context, s tracker.Sink, info tracker.StartInfo, timeout time.Duration) ([]string, error) {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	gap := 250 * time.Millisecond
	for {
		e, err := s.Start(sctx, info)
		if err == nil || errors.Is(err, tracker.ErrPermanent) || s.Run().ID != "" {
			return e, err
		}
		t := time.NewTimer(gap)
		select {
		case <-sctx.Done():
			t.Stop()
			return e, err
		case <-t.C:
		}
		gap = min(2*gap, 2*time.Second)
	}
}
