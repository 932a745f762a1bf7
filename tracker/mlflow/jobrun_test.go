package mlflow

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/tracker"
)

// A job's run already known (Config.JobRun: what `bridge sync` read from
// the spool) is joined without an election and wherever the sink's own
// experiment settings point; its experiment is the sink's place. The
// spool records the node's own run (its parent is the job's run: one
// read finds both), or, written by a bridge before the node runs, the
// job's run (the node's run is then looked up). A known run that is gone
// (deleted) is not used: the job's run is elected again by its key.
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
	own, jobRun := first.Run().ID, first.Run().Job
	expID := srv.ExperimentID(t, exp)

	for _, recorded := range []string{own, jobRun} {
		known := serverSink(t, srv.URL, Config{Job: job(), JobRun: recorded}) // the Default experiment, if it looked
		if _, err := known.Start(ctx, info); err != nil {
			t.Fatal(err)
		}
		if ri := known.Run(); ri.ID != own || ri.Job != jobRun || ri.Place[TagExperimentID] != expID {
			t.Errorf("recorded %s: joined %+v; want the node's run %s of job run %s in experiment %s", recorded, ri, own, jobRun, expID)
		}
		if runs := srv.RunIDs(t, exp); len(runs) != 2 {
			t.Errorf("recorded %s: runs %v: a known run made a candidate, or the node a second run", recorded, runs)
		}
	}

	srv.DeleteRun(t, own)
	again := serverSink(t, srv.URL, Config{ExperimentName: exp, Job: job(), JobRun: own})
	if _, err := again.Start(ctx, info); err != nil {
		t.Fatal(err)
	}
	if ri := again.Run(); ri.ID == own || ri.ID == "" || ri.Job != jobRun {
		t.Errorf("joined %+v with the recorded node's run deleted, want the job's run %s found by its key and a new run of the node", ri, jobRun)
	}
}

// A node's run never carries the job's key, though the start tags the
// pipeline gives every bridge of a job hold it: the election finds the
// job's run by the key and sweeps every other active run that has it, so
// a node's run with it would be deleted at the job's end. Ended by the
// node that sweeps (the first tier), the node's run stays active, tagged
// with the job (TagJob) and its parent.
func TestNodeRunKeepsOffTheJobKey(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := fmt.Sprintf("node-run-key-%d", time.Now().UnixNano())
	key := fmt.Sprintf("test:node-run-key:%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := serverSink(t, srv.URL, Config{ExperimentName: exp, Job: &tracker.Job{Key: key, KeyFrom: "test", Node: "n0", Attempt: 0, Nodes: 1, Settle: 200 * time.Millisecond}})
	info := tracker.StartInfo{NodeID: "n0", RunName: "job", Tags: map[string]string{TagJobKey: key, "bridge.job_key_from": "test", TagNodeID: "n0"}}
	if _, err := s.Start(ctx, info); err != nil {
		t.Fatal(err)
	}
	ri := s.Run()
	// The end table's link is the node's run, by the name MLflow shows.
	if lines, ok := s.Link(); !ok || !strings.HasPrefix(lines[0], "🏃 View run n0 at: ") || !strings.HasSuffix(lines[0], "/runs/"+ri.ID) {
		t.Errorf("Link = %q, %v; want the node's run named n0", lines, ok)
	}
	if err := s.Finish(ctx, tracker.EndInfo{ExitCode: 0, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	own := srv.GetRun(t, ri.ID)
	if own.Info.LifecycleStage != "active" || own.Tags[TagJobKey] != "" || own.Tags[TagJob] != key || own.Tags[TagParentRun] != ri.Job {
		t.Errorf("the node's run: %s, tags %v; want active, no %s, %s=%s, %s=%s", own.Info.LifecycleStage, own.Tags, TagJobKey, TagJob, key, TagParentRun, ri.Job)
	}
	if job := srv.GetRun(t, ri.Job); job.Tags[TagJobKey] != key || job.Info.LifecycleStage != "active" {
		t.Errorf("the job's run: %s, tags %v; want active with the key", job.Info.LifecycleStage, job.Tags)
	}
}
