package upload

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"syscall"
	"time"

	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/tracker"
)

// trackerEnd looks at what the tracker holds before sync records an attempt
// the spool shows without an end (lost) as lost. An end its bridge recorded
// on the run since the attempt started is kept as it is (only sync's own
// tags are added); one that cannot be read leaves the run as it is too,
// and fails the sync. Otherwise the attempt was lost: end, how stand.
func trackerEnd(ctx context.Context, sink tracker.Sink, lost *spool.Attempt, end tracker.EndInfo, how string, stderr io.Writer) (tracker.EndInfo, string, int) {
	rec, found, err := jobrun.RecordedEnd(ctx, sink, time.UnixMilli(lost.Start.Time))
	keep := tracker.EndInfo{KeepStatus: true, Time: end.Time, Tags: map[string]string{}}
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "bridge: %s run %s: the spool has no end for attempt %d and the run's cannot be read, so it is not recorded as lost; run bridge sync again: %v\n",
			sink.Name(), sink.Run().ID, lost.Start.Attempt, err)
		return keep, "status left as it is: the end recorded on the run could not be read", 1
	case found:
		return keep, fmt.Sprintf("kept the end its bridge recorded on the run: exit code %d, %s; the spool lacked it", rec.ExitCode, cmp.Or(rec.Status, "status not recorded")), 0
	}
	return end, how, 0
}

// endOfJob is how the job that wrote to the run ended, from the spool: the
// last training attempt (not a sync) that wrote to it, or the last one at all
// for an offline spool. Its end record gives the end its bridge told the
// trackers (pipeline.RecordedEnd); an attempt without one was lost (its
// bridge killed with it), which is KILLED, and is returned.
func endOfJob(attempts []spool.Attempt, sink, id string) (tracker.EndInfo, string, *spool.Attempt) {
	var last, wrote *spool.Attempt
	for i := range attempts {
		a := &attempts[i]
		if isSync(a) {
			continue
		}
		last = a
		if a.Start.Runs[sink] == id {
			wrote = a
		}
	}
	if wrote != nil {
		last = wrote
	}
	tags := map[string]string{"bridge.end_recorded_by": "sync"}
	switch {
	case last == nil:
		return tracker.EndInfo{Time: time.Now(), Tags: tags}, "no training attempt in the spool", nil
	case last.End == nil || last.End.ExitCode == nil:
		t := time.Now()
		if last.LastSample != nil {
			t = last.LastSample.Time
		}
		tags["bridge.exit_status"] = "lost: bridge stopped without recording the end (killed with the job, or its node failed)"
		return tracker.EndInfo{ExitCode: 128 + int(syscall.SIGKILL), Signal: int(syscall.SIGKILL), Time: t, Tags: tags}, "the attempt was lost: KILLED", last
	default:
		// The end its bridge told the trackers: tags, status, figures.
		end := pipeline.RecordedEnd(last.End)
		maps.Copy(end.Tags, tags)
		return end, fmt.Sprintf("exit code %d, %s", end.ExitCode, tracker.TerminalStatus(end)), nil
	}
}
