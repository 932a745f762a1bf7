package mlflow

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/tracker"
)

// A job's run already known (Config.JobRun: what `bridge sync` read from
// the spool) is joined without an election and wherever the sink's own
// experiment settings point; its experiment is the sink's place. A known
// run that is gone (deleted) is not used: the job's run is elected again by
// its key.
func TestKnownJobRun(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := fmt.Sprintf("known-job-run-%d", time.Now().UnixNano())
	key := fmt.Sprintf("test:known:%d", time.Now().UnixNano())
	job := func() *tracker.Job {
		return &tracker.Job{Key: key, KeyFrom: "test", Attempt: -1, Nodes: 1, Settle: 200 * time.Millisecond}
	}
	info := tracker.StartInfo{NodeID: "n0", RunName: "job"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	first := serverSink(t, srv.URL, Config{ExperimentName: exp, Job: job()})
	if _, err := first.Start(ctx, info); err != nil {
		t.Fatal(err)
	}
	run := first.Run().ID
	expID := srv.ExperimentID(t, exp)

	known := serverSink(t, srv.URL, Config{Job: job(), JobRun: run}) // the Default experiment, if it looked
	if _, err := known.Start(ctx, info); err != nil {
		t.Fatal(err)
	}
	if known.Run().ID != run || known.Run().Place[TagExperimentID] != expID {
		t.Errorf("joined run %s, place %v; want the known run %s in experiment %s", known.Run().ID, known.Run().Place, run, expID)
	}
	if runs := srv.RunIDs(t, exp); len(runs) != 1 {
		t.Errorf("runs %v: a known run made a candidate", runs)
	}

	srv.DeleteRun(t, run)
	again := serverSink(t, srv.URL, Config{ExperimentName: exp, Job: job(), JobRun: run})
	if _, err := again.Start(ctx, info); err != nil {
		t.Fatal(err)
	}
	if again.Run().ID == run || again.Run().ID == "" {
		t.Errorf("joined %q with the known run deleted, want a run elected anew", again.Run().ID)
	}
}
