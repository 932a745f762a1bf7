package jobrun

// A multi-node job's end on a real MLflow server (PostgreSQL: its row
// locks and isolation are what concurrent bridges meet in production):
// the job's status from every node's record, through each node's MLflow
// sink wrapped as pipeline.BuildSinks wraps it. The election that finds
// the job's run is tested in tracker/mlflow.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
)

var nameSeq atomic.Int64

// unique is a name no other test uses on the shared server.
func unique(t *testing.T) string {
	return fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano(), nameSeq.Add(1))
}

func quiet(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

// node is one bridge's sink in a test job: the MLflow sink, and the sink
// this package wraps it in.
type node struct {
	id   string
	raw  *mlflow.Sink
	sink tracker.Sink
	env  []string
	err  error
}

// jobNodes makes n sinks of one job (key) in experiment exp, each talking
// to url(i) (the server, or a fault proxy in front of it).
func jobNodes(t *testing.T, url func(i int) string, exp, key string, n int, job func(i int) tracker.Job) []*node {
	t.Helper()
	nodes := make([]*node, n)
	for i := range nodes {
		j := tracker.Job{Key: key, KeyFrom: "test", Attempt: -1, Nodes: n, Settle: time.Second}
		if job != nil {
			j = job(i)
		}
		id := fmt.Sprintf("node-%d", i)
		s, err := mlflow.New(mlflow.Config{TrackingURI: url(i), ExperimentName: exp, Job: &j}, quiet(t))
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = &node{id: id, raw: s, sink: Wrap(s, NodeOf(&tracker.Job{Node: id, Nodes: j.Nodes, Attempt: j.Attempt}), quiet(t))}
	}
	return nodes
}

// startTogether starts every node's sink at the same moment and waits for
// all of them (each within a generous deadline).
func startTogether(t *testing.T, nodes []*node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			<-gate
			n.env, n.err = n.sink.Start(ctx, tracker.StartInfo{NodeID: n.id, Command: []string{"train.py"}, RunName: "job"})
		})
	}
	close(gate)
	wg.Wait()
}

// oneRun checks that every node got the same job's run, the only active
// run of the key, and a run of its own under it (the run its samples go
// to), and returns the job's run.
func oneRun(t *testing.T, srv *mlflowtest.Server, exp, key string, nodes []*node) string {
	t.Helper()
	win := ""
	own := map[string]bool{}
	for _, n := range nodes {
		if n.err != nil {
			t.Fatalf("%s: Start: %v", n.id, n.err)
		}
		ri := n.sink.Run()
		if win == "" {
			win = ri.Job
		}
		if ri.Job != win || !slices.Contains(n.env, mlflow.EnvRunID+"="+win) || ri.ID == "" || ri.ID == win || own[ri.ID] {
			t.Errorf("%s: runs %+v, env %v; want job's run %s and a run of its own", n.id, ri, n.env, win)
		}
		own[ri.ID] = true
		if r := srv.GetRun(t, ri.ID); r.Tags[mlflow.TagParentRun] != win || r.Tags[mlflow.TagNodeID] != n.id || r.Tags[mlflow.TagJob] != key {
			t.Errorf("%s's run %s: tags %v; want it under %s, its node and the job's key", n.id, ri.ID, r.Tags, win)
		}
	}
	active := srv.SearchRuns(t, srv.ExperimentID(t, exp), fmt.Sprintf("tags.`%s` = '%s'", mlflow.TagJobKey, key), "ACTIVE_ONLY")
	if len(active) != 1 || active[0].Info.RunID != win {
		t.Fatalf("active runs of key %s: %d, want only %s", key, len(active), win)
	}
	return win
}

// line is node's state line on the job's run, read back.
func line(t *testing.T, srv *mlflowtest.Server, run, node string) map[string]string {
	t.Helper()
	return tracker.ParseLine(srv.GetRun(t, run).Tags[tracker.StateTag(node, "")])
}

// endNode records one node's end on the job's run.
func endNode(t *testing.T, n *node, code int) {
	t.Helper()
	end := tracker.EndInfo{ExitCode: code, Time: time.Now(), Tags: map[string]string{"bridge.exit_code": fmt.Sprint(code)}}
	if err := n.sink.Finish(context.Background(), end); err != nil {
		t.Fatalf("%s: Finish: %v", n.id, err)
	}
}

var systemNames = []string{
	"container_memory_working_set_megabytes",
	"container_cpu_utilization_percentage",
	"node_memory_usage_megabytes",
}

// systemSamples returns n samples, one second apart from start, of
// systemNames; values differ per sample and per metric.
func systemSamples(n int, start time.Time) []metrics.Sample {
	out := make([]metrics.Sample, n)
	for i := range out {
		out[i] = metrics.Sample{Seq: int64(i), Time: start.Add(time.Duration(i) * time.Second)}
		for j, name := range systemNames {
			out[i].Points = append(out[i].Points, metrics.Named(name, float64(100*j+i)))
		}
	}
	return out
}

// store is the run store `bridge report` opens on srv.
func store(t *testing.T, url string) tracker.RunOwner {
	t.Helper()
	env := map[string]string{mlflow.EnvTrackingURI: url}
	o, err := mlflow.Registration().Store(tracker.Build{Getenv: func(k string) string { return env[k] }, Home: t.TempDir(), Log: quiet(t)})
	if err != nil {
		t.Fatal(err)
	}
	return o
}
