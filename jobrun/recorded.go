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

// recordedEnd reads run id's end since then: a single run's (its
// bridge.exit_code tag, for a run that was not ended before since), or,
// on a job's run, node's (its end tags under its scope, recorded at or
// after since: an earlier attempt's end is not this one's).
func recordedEnd(ctx context.Context, st tracker.RunStore, id string, node *Node, since time.Time) (tracker.EndInfo, bool, error) {
	if id == "" {
		return tracker.EndInfo{}, false, errNoRun
	}
	run, err := st.GetRun(ctx, id)
	if err != nil {
		return tracker.EndInfo{}, false, err
	}
	tags := run.Tags
	if node != nil {
		ended, err := strconv.ParseInt(tags[node.Scope+".ended"], 10, 64)
		code, cerr := strconv.Atoi(tags[node.Scope+".exit_code"])
		if err != nil || cerr != nil || ended < since.UnixMilli() {
			return tracker.EndInfo{}, false, nil
		}
		return tracker.EndInfo{ExitCode: code, Status: tags[node.Scope+".status"], Time: time.UnixMilli(ended)}, true, nil
	}
	code, err := strconv.Atoi(tags["bridge.exit_code"])
	if err != nil || (!run.End.IsZero() && run.End.UnixMilli() < since.UnixMilli()) {
		return tracker.EndInfo{}, false, nil
	}
	return tracker.EndInfo{ExitCode: code, Status: run.Status, Time: run.End}, true, nil
}
