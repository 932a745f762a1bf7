package pipeline

import (
	"context"
	"errors"
	"log/slog"
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

// StartTimeout bounds each sink's Start: the child waits on it.
const StartTimeout = 15 * time.Second

// StartSinks starts every sink (finding or creating its run) on the calling
// goroutine, before the child starts. A sink that cannot start is dropped
// with a clear message; its samples stay in the spool.
func StartSinks(ctx context.Context, sinks []tracker.Sink, info tracker.StartInfo, log *slog.Logger) Started {
	var st Started
	for _, s := range sinks {
		sctx, cancel := context.WithTimeout(ctx, StartTimeout)
		e, err := s.Start(sctx, info)
		cancel()
		st.Env = append(st.Env, e...)
		id := s.RunID()
		switch {
		case err == nil:
		case errors.Is(err, tracker.ErrPermanent) || id == "":
			log.Error("tracker refused or unreachable at start; nothing is sent to it, samples stay in the spool (upload later with `bridge sync`)",
				"tracker", s.Name(), "err", err)
			st.Failed = append(st.Failed, summary.Row{What: s.Name(), Value: "not used: " + err.Error()})
			continue
		default:
			// The run is known (given, or generated for the child): keep
			// the sink, and let the forwarder retry until the tracker is up.
			log.Warn("tracker not reachable at start; samples are spooled and sent when it is",
				"tracker", s.Name(), "run", id, "err", err)
		}
		c, ok := s.(RunCreator)
		st.Runs = append(st.Runs, SinkRun{Sink: s, RunID: id, Created: ok && c.Created()})
	}
	return st
}
