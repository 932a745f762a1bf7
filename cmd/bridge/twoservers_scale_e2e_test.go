package main

// A job split across two MLflow server processes on one PostgreSQL
// database, as a site runs MLflow behind a load balancer (issue 39, item
// 5). Knob: BRIDGE_TEST_TWOSERVERS_NODES, the nodes a job (32).

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker/mlflow"
)

// TestMultinodeTwoServersScale: BRIDGE_TEST_TWOSERVERS_NODES real bridges
// (32) of one job, the even nodes talking to one server and the odd to the
// other, both on one database, --run-tick=2s.
//   - Every child runs until the job's one run, read through either
//     server, holds a live line of every node (written by a run tick) and
//     the first node's bridge.job.differs; then all exit 0. Every child
//     saw that run, every node's samples are in its own run, every end is
//     recorded, the job FINISHED, and `bridge report` through either
//     server has a FINISHED row a node.
//   - A second job the same, where one node of the second server (node-3)
//     exits 1: the job FAILED, its first failure names node-3, read
//     through the first server.
func TestMultinodeTwoServersScale(t *testing.T) {
	one := mlflowtest.SharedPostgres(t)
	two := one.StartAnother(t)
	n := envInt("BRIDGE_TEST_TWOSERVERS_NODES", 32)
	servers := []*mlflowtest.Server{one, two}
	bridge := testbin.Bridge(t)
	for _, fail := range []bool{false, true} {
		began := time.Now()
		id := fmt.Sprintf("%d%d", time.Now().UnixNano(), mnJobs.Add(1))
		exp, key := fmt.Sprintf("twoservers-%d-%s", n, id), "slurm:e2e:"+id+".0"
		env := slurmJob(id, time.Now().Unix(), n, 0)
		shared := t.TempDir()
		t.Cleanup(func() { release(t, shared) })
		nodes := make([]*mnNode, n)
		for i := range nodes {
			l := liveNode{bridge: bridge, uri: servers[i%2].URL, exp: exp, shared: shared, child: scaleLiveChild,
				env: append(env(i), "BRIDGE_SCOPES=node"), flags: []string{"--interval", "1s", "--run-tick", "2s"}}
			if fail && i == 3 {
				l.env = append(l.env, "CHILD_EXIT=1")
			}
			nodes[i] = l.start(t, fmt.Sprintf("node-%d", i))
		}
		var run mlflowtest.Run
		for _, srv := range servers {
			run = waitLive(t, srv, exp, key, nodes, 1, 5*time.Minute)
			if t.Failed() {
				return
			}
		}
		if run.Tags[jobrun.TagDiffers] == "" {
			// Written on the tick after the lead's first read: wait for it.
			run = waitDiffers(t, two, run.Info.RunID)
		}
		release(t, shared)
		wait(t, nodes...)
		for i, nd := range nodes {
			want := 0
			if fail && i == 3 {
				want = 1
			}
			if nd.code != want {
				t.Errorf("%s's bridge exited %d, want %d", nd.id, nd.code, want)
			}
			if !endRecorded.MatchString(nd.stderr.String()) {
				t.Errorf("%s: the table does not say its end was recorded", nd.id)
			}
		}
		if t.Failed() {
			return
		}
		run = checkJob(t, one, exp, key, nodes)
		if fail {
			ff := run.Tags[report.TagFirstFailure]
			if run.Info.Status != mlflow.StatusFailed || !strings.HasPrefix(ff, "node-3: ") {
				t.Errorf("the job's run %s, %s=%q; want FAILED, node-3's exit", run.Info.Status, report.TagFirstFailure, ff)
			}
			t.Logf("%d nodes, node-3 exits 1: %s=%q, %v after the start", n, report.TagFirstFailure, ff, time.Since(began).Round(time.Second))
			continue
		}
		for _, nd := range nodes {
			if l := line(run, nd.id); l["ended"] == "" || l["status"] != mlflow.StatusFinished {
				t.Errorf("%s's end is not on the job's run: its line %v", nd.id, l)
			}
		}
		if run.Info.Status != mlflow.StatusFinished {
			t.Errorf("the job's run is %s, want FINISHED", run.Info.Status)
		}
		for _, srv := range servers {
			rep := (&rjob{bridge: bridge, srv: srv}).report(t, run.Info.RunID)
			rows := rowsByNode(rep)
			for _, nd := range nodes {
				if r, ok := rows[nd.id]; !ok || r.Status != mlflow.StatusFinished {
					t.Errorf("bridge report through %s: %s's row %+v, want FINISHED", srv.URL, nd.id, r)
				}
			}
			if len(rep.Nodes) != n {
				t.Errorf("bridge report through %s: %d rows, want %d", srv.URL, len(rep.Nodes), n)
			}
		}
		t.Logf("%d nodes on two servers: FINISHED %v after the start", n, time.Since(began).Round(time.Second))
	}
}

// waitDiffers waits for the first node's bridge.job.differs on run.
func waitDiffers(t *testing.T, srv *mlflowtest.Server, id string) mlflowtest.Run {
	t.Helper()
	var run mlflowtest.Run
	waitfor.Cond(t, 3*time.Minute, jobrun.TagDiffers+" on the job's run", func() bool {
		run = srv.GetRun(t, id)
		return run.Tags[jobrun.TagDiffers] != ""
	})
	return run
}
