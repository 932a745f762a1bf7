package main

// A job at scale with real bridges (issue 39, "Must be shown"): many real
// bridges of one job at the default 10 s interval and 1-minute run tick,
// node ids from the launcher's variables, against a real MLflow server on
// PostgreSQL behind a proxy that fails 20% of calls; one job clean, one
// with a node OOM-killed. docs/multinode.md, "The job's end, simulated at
// 1,024 nodes".
//
// Knobs, for bench/job_scale.sh (CI: the defaults):
//   BRIDGE_TEST_SCALE_NODES  nodes a job (8)
//   BRIDGE_TEST_SCALE_JOBS   which jobs, run side by side ("clean oom")
//   BRIDGE_TEST_SCALE_SEED   the fault draws' seed (a new one each run)
//   BRIDGE_TEST_SCALE_PACE   "default": bridge's interval and run tick
//                            (10 s, 1 minute); else (CI) 2 s and 10 s,
//                            so that CI waits seconds, not a minute, for
//                            the first tick

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/mocks/faultproxy"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker/mlflow"
)

// scaleLiveChild writes what it was given (as mnChild does, for checkJob),
// then runs until $SHARED/go appears (15 minutes at most, so that a child
// of a failed test ends; looked for every 3 s, which hundreds of children
// can afford), and exits with $CHILD_EXIT.
const scaleLiveChild = `printf '%s %s %s\n' "${MLFLOW_RUN_ID:--}" "${MLFLOW_SYSTEM_METRICS_NODE_ID:--}" "$(date +%s%N)" > seen
i=0; while [ ! -e "$SHARED/go" ] && [ $i -lt 300 ]; do sleep 3; i=$((i+1)); done
exit "${CHILD_EXIT:-0}"`

// scaleOOMChild writes what it was given, waits for $SHARED/oom and then
// allocates past its memory cgroup's limit: the kernel kills it.
const scaleOOMChild = `printf '%s %s %s\n' "${MLFLOW_RUN_ID:--}" "${MLFLOW_SYSTEM_METRICS_NODE_ID:--}" "$(date +%s%N)" > seen
i=0; while [ ! -e "$SHARED/oom" ] && [ $i -lt 300 ]; do sleep 3; i=$((i+1)); done
exec python3 -c 'import time
b = []
while True:
    b.append(b"x" * 5_000_000)
    time.sleep(0.01)'`

// liveNode is one node's bridge of a test job, started as startMNIn starts
// one (its own TMPDIR, working directory and spool) around child. enter
// (a shell prefix, "" for none) runs before the bridge is exec'd: a
// cgroup's ShellEnter.
type liveNode struct {
	bridge, uri, exp, shared string
	enter, child             string
	env                      []string // the launcher's, BRIDGE_SCOPES...
	flags                    []string
}

func (l liveNode) start(t *testing.T, id string) *mnNode {
	t.Helper()
	n := &mnNode{id: id, dir: t.TempDir()}
	args := append([]string{"-c", l.enter + `exec "$0" "$@"`, l.bridge, "--start-timeout", "3m", "--flush-timeout", "1m",
		"--spool", filepath.Join(n.dir, "spool.jsonl")}, l.flags...)
	n.cmd = exec.Command("/bin/sh", append(args, "--", "/bin/sh", "-c", l.child)...)
	n.cmd.Dir = n.dir
	n.cmd.Env = cleanEnv(append([]string{"MLFLOW_TRACKING_URI=" + l.uri, "MLFLOW_EXPERIMENT_NAME=" + l.exp, "TMPDIR=" + n.dir,
		"SHARED=" + l.shared}, l.env...)...)
	n.cmd.Stderr = &n.stderr
	n.cmd.WaitDelay = 10 * time.Second
	n.began = time.Now()
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.cmd.Process.Kill() // a test that failed early; no-op once waited for
		if t.Failed() {
			t.Logf("node %s (%s): bridge's stderr:\n%s", n.id, n.dir, n.stderr.String())
		}
	})
	return n
}

// release writes $SHARED/go: the children end. Also at the test's end,
// so that a failed test leaves no child behind.
func release(t *testing.T, shared string) {
	if err := os.WriteFile(filepath.Join(shared, "go"), nil, 0o644); err != nil {
		t.Error(err)
	}
}

// waitLive waits until the job's one active run (read through srv) holds
// a line of every node written by a run tick (RUNNING, with its samples
// so far: at least min), and returns it.
func waitLive(t *testing.T, srv *mlflowtest.Server, exp, key string, nodes []*mnNode, min int, within time.Duration) mlflowtest.Run {
	t.Helper()
	var run mlflowtest.Run
	var last time.Time
	missing, expID := "", ""
	defer func() {
		if t.Failed() { // also when Cond gave up
			t.Logf("last seen: %s", missing)
		}
	}()
	waitfor.Cond(t, within, "a live line of every node on the job's one run", func() bool {
		// A search returns every node's line: at most one a second, so
		// that the test does not load the server the bridges share.
		if time.Since(last) < time.Second {
			return false
		}
		last = time.Now()
		if expID == "" {
			if expID = srv.ExperimentID(t, exp); expID == "" {
				return false
			}
		}
		runs, ok := srv.PollRuns(t, expID, fmt.Sprintf("tags.`%s` = '%s'", mlflow.TagJobKey, key), "ACTIVE_ONLY")
		if !ok {
			missing = "no answer from the server"
			return false
		}
		if len(runs) != 1 {
			missing = fmt.Sprintf("%d active runs of the job", len(runs))
			return false
		}
		run = runs[0]
		for _, n := range nodes {
			l := line(run, n.id)
			if s, _ := strconv.Atoi(l["samples"]); l["status"] != "RUNNING" || s < min || l["at"] == "" {
				missing = fmt.Sprintf("%s's line %v", n.id, l)
				return false
			}
		}
		return true
	})
	return run
}

// failFifth makes p fail about 20% of all calls, from a seed: 503s, and
// connections reset before and after the server applied the request.
func failFifth(p *faultproxy.Proxy, seed uint64) {
	p.Seed(seed)
	p.Schedule(
		faultproxy.Fault{Kind: faultproxy.Status, Code: http.StatusServiceUnavailable, Share: 0.1},
		faultproxy.Fault{Kind: faultproxy.Reset, Share: 0.05 / 0.9},
		faultproxy.Fault{Kind: faultproxy.AppliedThenReset, Share: 0.05 / 0.85},
	)
}

// TestJobScaleUnderFailures: BRIDGE_TEST_SCALE_NODES real bridges (8) of a
// job (at the default interval and run tick with BRIDGE_TEST_SCALE_PACE=
// default, as bench/job_scale.sh runs it), node ids from Slurm's
// variables, behind a proxy that fails about 20% of calls; two jobs side
// by side.
//   - clean: every child lives until every node's line on the job's one
//     run was written by a run tick with several samples, then exits 0:
//     the job FINISHED, every node's end recorded (its table says so, its
//     line and its run hold it), `bridge report` a FINISHED row a node.
//   - oom: the same, but once the lines are live the child of node N/2,
//     in a memory cgroup of its own (200 MiB), allocates past it and the
//     kernel kills it; the others then exit 0. The job FAILED, its first
//     failure names that node's OOM kill, every other node's end is
//     recorded, and `bridge report` lists every node, that one
//     cgroup_oom_kill.
//
// Figures (calls, faults, runs/get size, report time) are logged for
// bench/job_scale.sh; nothing is asserted about time.
func TestJobScaleUnderFailures(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	n := envInt("BRIDGE_TEST_SCALE_NODES", 8)
	bridge := testbin.BridgePlain(t) // the race detector's memory, times hundreds of bridges, is more than this machine has
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("BRIDGE_TEST_SCALE_SEED"), 10, 64); err == nil {
		seed = v
	}
	jobs := strings.Fields(os.Getenv("BRIDGE_TEST_SCALE_JOBS"))
	if len(jobs) == 0 {
		jobs = []string{"clean", "oom"}
	}
	for i, kind := range jobs {
		if kind != "clean" && kind != "oom" {
			t.Fatalf("BRIDGE_TEST_SCALE_JOBS=%q: want clean and/or oom", os.Getenv("BRIDGE_TEST_SCALE_JOBS"))
		}
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			scaleJob(t, srv, bridge, n, kind == "oom", seed+uint64(i))
		})
	}
}

func scaleJob(t *testing.T, srv *mlflowtest.Server, bridge string, n int, oom bool, seed uint64) {
	p := newProxy(t, srv)
	failFifth(p, seed)
	id := fmt.Sprintf("%d%d", time.Now().UnixNano(), mnJobs.Add(1))
	exp, key := fmt.Sprintf("scale-%d-%s", n, id), "slurm:e2e:"+id+".0"
	shared := t.TempDir()
	env := slurmJob(id, time.Now().Unix(), n, 0)
	victim := -1
	var g *cgrouptest.Group
	if oom {
		victim = n / 2
		g = cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 200 * mib})
	}
	t.Cleanup(func() { release(t, shared) })
	began := time.Now()
	nodes := make([]*mnNode, n)
	var pace []string // bridge's defaults
	if os.Getenv("BRIDGE_TEST_SCALE_PACE") != "default" {
		pace = []string{"--interval", "2s", "--run-tick", "10s"}
	}
	for i := range nodes {
		l := liveNode{bridge: bridge, uri: p.URL(), exp: exp, shared: shared, child: scaleLiveChild, env: append(env(i), "BRIDGE_SCOPES=node"), flags: pace}
		if i == victim {
			// bridge in the cgroup too, as in a pod; every scope, so that
			// it sees the cgroup's OOM kill.
			l.enter, l.child, l.env = g.ShellEnter(), scaleOOMChild, env(i)
		}
		nodes[i] = l.start(t, fmt.Sprintf("node-%d", i))
	}
	// The children live past the first run tick and several samples; a
	// node whose tick's write failed every try has its line at the next
	// tick.
	waitLive(t, srv, exp, key, nodes, 3, 10*time.Minute)
	if t.Failed() {
		return
	}
	live := time.Since(began)
	if oom {
		if err := os.WriteFile(filepath.Join(shared, "oom"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		wait(t, nodes[victim])
		if nodes[victim].code != 137 {
			t.Fatalf("node-%d exited %d, want 137 (OOM-killed)", victim, nodes[victim].code)
		}
	}
	release(t, shared)
	wait(t, slices.DeleteFunc(slices.Clone(nodes), func(x *mnNode) bool { return victim >= 0 && x == nodes[victim] })...)
	ended := time.Since(began)
	faults := p.Hits(faultproxy.Status) + p.Hits(faultproxy.Reset) + p.Hits(faultproxy.AppliedThenReset)
	recorded := 0
	for i, nd := range nodes {
		want := 0
		if i == victim {
			want = 137
		}
		if nd.code != want {
			t.Errorf("%s's bridge exited %d, want %d", nd.id, nd.code, want)
		}
		if endRecorded.MatchString(nd.stderr.String()) {
			recorded++
		} else {
			t.Errorf("%s: the table does not say its end was recorded", nd.id)
		}
	}
	if t.Failed() {
		return
	}
	run := checkJob(t, srv, exp, key, nodes)
	for i, nd := range nodes {
		want := mlflow.StatusFinished
		if i == victim {
			want = mlflow.StatusFailed
		}
		if l := line(run, nd.id); l["ended"] == "" || l["status"] != want {
			t.Errorf("%s's end is not on the job's run: its line %v, want %s", nd.id, l, want)
		}
		if own := nodeRun(t, srv, run.Info.ExperimentID, run.Info.RunID, nd.id); own.Info.Status != want {
			t.Errorf("%s's run is %s, want %s", nd.id, own.Info.Status, want)
		}
	}
	ff := run.Tags[report.TagFirstFailure]
	if oom {
		if want := fmt.Sprintf("node-%d: cgroup_oom_kill at ", victim); run.Info.Status != mlflow.StatusFailed || !strings.HasPrefix(ff, want) {
			t.Errorf("the job's run is %s, %s=%q; want FAILED, %q...", run.Info.Status, report.TagFirstFailure, ff, want)
		}
	} else if run.Info.Status != mlflow.StatusFinished || ff != "" {
		t.Errorf("the job's run is %s, %s=%q; want FINISHED, none", run.Info.Status, report.TagFirstFailure, ff)
	}

	began = time.Now()
	rep := (&rjob{bridge: bridge, srv: srv}).report(t, run.Info.RunID)
	took := time.Since(began)
	rows := rowsByNode(rep)
	for i, nd := range nodes {
		r, ok := rows[nd.id]
		switch {
		case !ok:
			t.Errorf("bridge report has no row of %s", nd.id)
		case i == victim && (r.Status != mlflow.StatusFailed || r.Reason != "cgroup_oom_kill"):
			t.Errorf("%s's row: %s %s, want FAILED cgroup_oom_kill", nd.id, r.Status, r.Reason)
		case i != victim && r.Status != mlflow.StatusFinished:
			t.Errorf("%s's row: %s, want FINISHED", nd.id, r.Status)
		}
	}
	if oom && (rep.FirstFailure == nil || rep.FirstFailure.Node != nodes[victim].id) {
		t.Errorf("the report's first failure %+v, want %s", rep.FirstFailure, nodes[victim].id)
	}
	if faults == 0 {
		t.Error("no fault was applied")
	}
	// Figures, for bench/job_scale.sh.
	t.Logf("figure: nodes=%d status=%s first_failure=%q", n, run.Info.Status, ff)
	t.Logf("figure: every line live %v after the start; the job ended %v after it", live.Round(time.Second), ended.Round(time.Second))
	t.Logf("figure: proxy (seed %d): %d calls, %d faults (%d 503, %d resets, %d applied then reset); job runs/get %d bytes",
		seed, p.Count(""), faults, p.Hits(faultproxy.Status), p.Hits(faultproxy.Reset), p.Hits(faultproxy.AppliedThenReset), runsGetSize(t, srv.URL, run.Info.RunID))
	t.Logf("figure: ends recorded %d of %d; bridge report %d rows in %v", recorded, n, len(rep.Nodes), took.Round(time.Millisecond))
}
