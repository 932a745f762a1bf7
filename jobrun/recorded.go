package jobrun

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/bridge-dev/bridge/tracker"
)

// errNoRun: the sink has no run to read yet.
var errNoRun = errors.New("no run yet (the tracker's start has not succeeded)")

// recordedEnd reads the end recorded since then: a single run's (its
// bridge.exit_code tag, for a run that was not ended before since), or a
// job's node's (its end tags recorded at or after since: an earlier
// attempt's end is not this one's), on its own run (MLflow's node run),
// else under its scope on the job's run (W&B's shared run).
func recordedEnd(ctx context.Context, st tracker.RunStore, runs Runs, node *Node, since time.Time) (tracker.EndInfo, bool, error) {
	id := runs.Job
	if runs.Node != "" {
		id = runs.Node
	}
	if id == "" {
		return tracker.EndInfo{}, false, errNoRun
	}
	run, err := st.GetRun(ctx, id)
	if err != nil {
		return tracker.EndInfo{}, false, err
	}
	tags := run.Tags
	if node != nil {
		scope := node.Scope + "."
		if runs.Node != "" {
			scope = node.ownScope()
		}
		ended, err := strconv.ParseInt(tags[scope+"ended"], 10, 64)
		code, cerr := strconv.Atoi(tags[scope+"exit_code"])
		if err != nil || cerr != nil || ended < since.UnixMilli() {
			return tracker.EndInfo{}, false, nil
		}
		return tracker.EndInfo{ExitCode: code, Status: tags[scope+"status"], Time: time.UnixMilli(ended)}, true, nil
	}
	code, err := strconv.Atoi(tags["bridge.exit_code"])
	if err != nil || (!run.End.IsZero() && run.End.UnixMilli() < since.UnixMilli()) {
		return tracker.EndInfo{}, false, nil
	}
	return tracker.EndInfo{ExitCode: code, Status: run.Status, Time: run.End}, true, nil
}
