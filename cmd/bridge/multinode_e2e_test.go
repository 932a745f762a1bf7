package main

// Multi-node jobs end to end: N real bridge processes of one job, started
// together, each with a launcher's environment (Slurm's, as srun gives it
// to each node's task) and its own node id, against a real MLflow server
// on PostgreSQL behind a counting proxy. docs/multinode.md.
//
// Knobs for bench/multinode.sh (CI runs one round each, defaults):
//   BRIDGE_TEST_MULTINODE_ROUNDS  rounds per N (1)
//   BRIDGE_TEST_MULTINODE_NS      the job sizes ("2 8 32")
//   BRIDGE_TEST_MULTINODE_LATE    how late the late node starts (10s; the bench: 2m)
//   BRIDGE_TEST_MULTINODE_REPORT  a file to append each node's child-start delay to (JSON lines)

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/mocks/faultproxy"
	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
	wbsink "github.com/bridge-dev/bridge/tracker/wandb"
)

// mnNode is one node's bridge of a test job.
type mnNode struct {
	id     string
	dir    string // working directory: the spool and what the child saw
	cmd    *exec.Cmd
	stderr syncbuf.Buffer
	began  time.Time // just before the bridge was started
	code   int
}

// mnChild is the job's command: it writes the run and node id it was
// given and its own start time, lives a while, and exits with $CHILD_EXIT.
// "-" stands for a variable that is not set.
const mnChild = `printf '%s %s %s\n' "${MLFLOW_RUN_ID:--}" "${MLFLOW_SYSTEM_METRICS_NODE_ID:--}" "$(date +%s%N)" > seen; sleep 2; exit "${CHILD_EXIT:-0}"`

var mnJobs atomic.Int64

// slurmJob is the environment srun gives the task on node i of an n-node
// step of job id (cluster e2e), started at start; restarts is
// SLURM_RESTART_COUNT (0: never requeued).
func slurmJob(id string, start int64, n, restarts int) func(i int) []string {
	return func(i int) []string {
		env := []string{"SLURM_CLUSTER_NAME=e2e", "SLURM_JOB_ID=" + id, "SLURM_STEP_ID=0", "SLURM_NODEID=" + strconv.Itoa(i),
			"SLURM_PROCID=" + strconv.Itoa(i), "SLURM_LOCALID=0", "SLURM_JOB_NUM_NODES=" + strconv.Itoa(n),
			"SLURM_STEP_NUM_NODES=" + strconv.Itoa(n), "SLURM_JOB_START_TIME=" + strconv.FormatInt(start, 10)}
		if restarts > 0 {
			env = append(env, "SLURM_RESTART_COUNT="+strconv.Itoa(restarts))
		}
		return env
	}
}

// startMN starts one node's bridge around mnChild. Each node has its own
// TMPDIR (its node lock) and working directory, as separate machines.
func startMN(t *testing.T, uri, exp string, env []string) *mnNode {
	t.Helper()
	return startMNIn(t, uri, exp, t.TempDir(), env)
}

// startMNIn is startMN with the node's directory given: a restarted node
// keeps its spool, as on an emptyDir. flags come after the defaults, so
// that theirs win (bridge keeps an option's last value).
func startMNIn(t *testing.T, uri, exp, dir string, env []string, flags ...string) *mnNode {
	t.Helper()
	n := &mnNode{dir: dir}
	args := append([]string{"--interval", "1s", "--start-timeout", "3m", "--flush-timeout", "1m",
		"--spool", filepath.Join(n.dir, "spool.jsonl")}, flags...)
	n.cmd = exec.Command(testbin.Bridge(t), append(args, "--", "/bin/sh", "-c", mnChild)...)
	n.cmd.Dir = n.dir
	// env comes last: its TMPDIR or BRIDGE_SCOPES wins (exec keeps a
	// variable's last value).
	n.cmd.Env = cleanEnv(append([]string{"MLFLOW_TRACKING_URI=" + uri, "MLFLOW_EXPERIMENT_NAME=" + exp, "TMPDIR=" + n.dir, "BRIDGE_SCOPES=node"}, env...)...)
	n.cmd.Stderr = &n.stderr
	n.began = time.Now()
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node %s (%s): bridge's stderr:\n%s", n.id, n.dir, n.stderr.String())
		}
	})
	return n
}

// startNodes starts n nodes at once: env(i) is node i's launcher
// environment (its own node id in it).
func startNodes(t *testing.T, uri, exp string, n int, env func(i int) []string) []*mnNode {
	t.Helper()
	nodes := make([]*mnNode, n)
	for i := range nodes {
		nodes[i] = startMN(t, uri, exp, env(i))
		nodes[i].id = fmt.Sprintf("node-%d", i)
	}
	return nodes
}

// wait waits for every node's bridge and keeps its exit code.
func wait(t *testing.T, nodes ...*mnNode) {
	t.Helper()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { n.code = testbin.ExitCode(t, n.cmd.Wait()) })
	}
	wg.Wait()
}

// seen is what node's child got: its run id, its node id, and when it
// started.
func (n *mnNode) seen(t *testing.T) (run, node string, started time.Time) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.dir, "seen"))
	if err != nil {
		t.Fatalf("%s: the child wrote nothing: %v", n.id, err)
	}
	f := strings.Fields(string(b))
	if len(f) != 3 {
		t.Fatalf("%s: the child saw %q, want a run id, a node id and a time", n.id, b)
	}
	ns, _ := strconv.ParseInt(f[2], 10, 64)
	return f[0], f[1], time.Unix(0, ns)
}

// checkJob checks a finished round: one active run of the key, every child
// saw it (and no node id: MLflow's own monitor adds no keys a node to the
// job's run), every node's every sample in a run of its own under the
// job's run (its node's run, found as a restarted node finds it), named by
// the node's state line, no series of a node in the job's run (the job's
// own, system/job_*, are), none in a
// deleted candidate; it returns the job's run.
func checkJob(t *testing.T, srv *mlflowtest.Server, exp, key string, nodes []*mnNode) mlflowtest.Run {
	t.Helper()
	expID := srv.ExperimentID(t, exp)
	filter := fmt.Sprintf("tags.`%s` = '%s'", mlflow.TagJobKey, key)
	active := srv.SearchRuns(t, expID, filter, "ACTIVE_ONLY")
	if len(active) != 1 {
		t.Fatalf("%d active runs of job %s, want exactly one", len(active), key)
	}
	run := active[0]
	for k := range run.Latest {
		// The job's own series (the live evaluation's) are the job run's.
		if !strings.HasPrefix(k, "system/job_") {
			t.Errorf("the job's run holds series %v: a node's series belong to its run", slices.Sorted(maps.Keys(run.Latest)))
			break
		}
	}
	for _, n := range nodes {
		got, node, _ := n.seen(t)
		if got != run.Info.RunID || node != "-" {
			t.Errorf("%s's child saw MLFLOW_RUN_ID=%s MLFLOW_SYSTEM_METRICS_NODE_ID=%s, want %s and none", n.id, got, node, run.Info.RunID)
		}
		own := nodeRun(t, srv, expID, run.Info.RunID, n.id)
		if l := line(run, n.id); l["run"] != own.Info.RunID {
			t.Errorf("%s's line %v does not name its run %s", n.id, l, own.Info.RunID)
		}
		if own.Tags[mlflow.TagJobKey] != "" || own.Tags[mlflow.TagJob] != key {
			t.Errorf("%s's run has tags %s=%q %s=%q, want none and %s", n.id, mlflow.TagJobKey, own.Tags[mlflow.TagJobKey], mlflow.TagJob, own.Tags[mlflow.TagJob], key)
		}
		ss, _, _, err := spooltest.ReadFile(filepath.Join(n.dir, "spool.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		// Each spooled sample is a point of its node's key, at its step
		// and time (a requeued node's earlier attempt adds its own).
		stored := map[[2]int64]bool{}
		for _, m := range srv.History(t, own.Info.RunID, "system/node_memory_used_megabytes") {
			stored[[2]int64{m.Step, m.Timestamp}] = true
		}
		count := 0
		for _, s := range ss {
			if _, ok := s.Value("node_memory_used_megabytes"); !ok {
				continue
			}
			count++
			if !stored[[2]int64{s.Seq, s.Time.UnixMilli()}] {
				t.Errorf("%s: sample %d (%s) is not in its run %s", n.id, s.Seq, s.Time.Format(time.RFC3339Nano), own.Info.RunID)
			}
		}
		if count == 0 {
			t.Errorf("%s: no sample in the spool", n.id)
		}
	}
	for _, r := range srv.SearchRuns(t, expID, filter, "DELETED_ONLY") {
		if len(r.Latest) > 0 || r.Tags[mlflow.TagElected] != "" {
			t.Errorf("deleted candidate %s holds metrics %v, tags %v", r.Info.RunID, r.Latest, r.Tags)
		}
	}
	return run
}

// nodeRun is node's one active run under the job's run jobRun.
func nodeRun(t *testing.T, srv *mlflowtest.Server, expID, jobRun, node string) mlflowtest.Run {
	t.Helper()
	runs := srv.SearchRuns(t, expID, fmt.Sprintf("tags.`%s` = '%s' and tags.`%s` = '%s'", mlflow.TagParentRun, jobRun, mlflow.TagNodeID, node), "ACTIVE_ONLY")
	if len(runs) != 1 {
		t.Fatalf("%d active runs of node %s under job run %s, want one", len(runs), node, jobRun)
	}
	return runs[0]
}

// line is a bridge's state line on the job's run, read back.
func line(run mlflowtest.Run, node string) map[string]string {
	return tracker.ParseLine(run.Tags[tracker.StateTag(node, "")])
}

// reportDelays appends each node's child-start delay to BRIDGE_TEST_MULTINODE_REPORT
// for bench/multinode.sh; tests assert nothing about time.
func reportDelays(t *testing.T, kind string, nodes []*mnNode) {
	t.Helper()
	path := os.Getenv("BRIDGE_TEST_MULTINODE_REPORT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, n := range nodes {
		_, _, started := n.seen(t)
		line, _ := json.Marshal(map[string]any{"kind": kind, "n": len(nodes), "delay_ms": float64(started.Sub(n.began).Microseconds()) / 1000})
		fmt.Fprintf(f, "%s\n", line)
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// TestMultinodeRounds: N = 2, 8 and 32 bridges of one job, started
// together. Each round: exactly one active run, every child saw it, every
// node's samples in it under its node id, nothing in a deleted candidate,
// and the run FINISHED once (one runs/update, by one node).
func TestMultinodeRounds(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	rounds := envInt("BRIDGE_TEST_MULTINODE_ROUNDS", 1)
	ns := []int{2, 8, 32}
	if v := os.Getenv("BRIDGE_TEST_MULTINODE_NS"); v != "" {
		ns = nil
		for _, f := range strings.Fields(v) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				t.Fatalf("BRIDGE_TEST_MULTINODE_NS=%q: %q is not a node count", v, f)
			}
			ns = append(ns, n)
		}
	}
	for _, n := range ns {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			for r := range rounds {
				p, err := faultproxy.Start(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				id := fmt.Sprintf("%d%d", time.Now().UnixNano(), mnJobs.Add(1))
				exp := fmt.Sprintf("multinode-%d-%s", n, id)
				nodes := startNodes(t, p.URL(), exp, n, slurmJob(id, time.Now().Unix(), n, 0))
				wait(t, nodes...)
				for _, nd := range nodes {
					if nd.code != 0 {
						t.Fatalf("round %d: %s's bridge exited %d", r, nd.id, nd.code)
					}
				}
				run := checkJob(t, srv, exp, "slurm:e2e:"+id+".0", nodes)
				if run.Info.Status != mlflow.StatusFinished || p.Count("runs/update") < 1 || run.Tags[jobrun.TagFinishedBy] == "" {
					t.Errorf("round %d: status %s after %d runs/update (finished by %q), want FINISHED",
						r, run.Info.Status, p.Count("runs/update"), run.Tags[jobrun.TagFinishedBy])
				}
				// Every node that writes FINISHED writes the last node's end.
				var last int64
				for _, nd := range nodes {
					if ms, err := strconv.ParseInt(line(run, nd.id)["ended"], 10, 64); err == nil {
						last = max(last, ms)
					}
				}
				if run.Info.EndTime != last {
					t.Errorf("round %d: the run ended at %d, its last node at %d", r, run.Info.EndTime, last)
				}
				// The job's end comes from the nodes' lines: no node reads
				// another's series.
				if n := p.Count("metrics/get-history"); n != 0 {
					t.Errorf("round %d: %d metrics/get-history requests, want none: the end reads the job's run alone", r, n)
				}
				reportDelays(t, "multinode", nodes)
				p.Close()
				if t.Failed() {
					return
				}
			}
		})
	}
}

// TestSingleNodeUnchanged: with no job key (none found, or --job-key=none
// in a Slurm step) bridge creates a run of its own as before: no election,
// keys under system/ alone, no node id for the child. It also gives
// bench/multinode.sh today's child-start delay next to the election's.
func TestSingleNodeUnchanged(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	slurm := slurmJob(fmt.Sprint(mnJobs.Add(1)), time.Now().Unix(), 2, 0)(0)
	for r := range envInt("BRIDGE_TEST_MULTINODE_ROUNDS", 1) {
		for _, env := range [][]string{nil, append(slurm, "BRIDGE_JOB_KEY=none")} {
			n := startMN(t, srv.URL, fmt.Sprintf("single-%d", mnJobs.Add(1)), env)
			n.id = "single"
			wait(t, n)
			id, node, _ := n.seen(t)
			if n.code != 0 || id == "-" || node != "-" {
				t.Fatalf("round %d, env %v: bridge exited %d, the child saw run %q node %q: want a run and no node id", r, env, n.code, id, node)
			}
			run := srv.GetRun(t, id)
			if run.Tags[mlflow.TagJobKey] != "" || run.Info.Status != mlflow.StatusFinished {
				t.Errorf("env %v: run tags %v, status %s: want no job, FINISHED", env, run.Tags, run.Info.Status)
			}
			if keys := srv.MetricKeys(t, id, "system/"); len(keys) == 0 || strings.Count(keys[0], "/") != 1 {
				t.Errorf("env %v: keys %v, want system/<name>", env, keys)
			}
			reportDelays(t, "single", []*mnNode{n})
		}
	}
}

// TestMultinodeTwoJobs: two jobs at once stay apart.
func TestMultinodeTwoJobs(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.SharedPostgres(t)
	exp := fmt.Sprintf("two-jobs-%d", mnJobs.Add(1))
	a, b := fmt.Sprint(mnJobs.Add(1)), fmt.Sprint(mnJobs.Add(1))
	na := startNodes(t, srv.URL, exp, 3, slurmJob(a, time.Now().Unix(), 3, 0))
	nb := startNodes(t, srv.URL, exp, 3, slurmJob(b, time.Now().Unix(), 3, 0))
	wait(t, append(na, nb...)...)
	ra := checkJob(t, srv, exp, "slurm:e2e:"+a+".0", na)
	rb := checkJob(t, srv, exp, "slurm:e2e:"+b+".0", nb)
	if ra.Info.RunID == rb.Info.RunID {
		t.Fatalf("two jobs share run %s", ra.Info.RunID)
	}
}

// TestMultinodeLateNode: a node that starts late (10 s here; two minutes in
// bench/multinode.sh) joins the run the others elected; the run is
// FINISHED only once it too has ended.
func TestMultinodeLateNode(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.SharedPostgres(t)
	late := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("BRIDGE_TEST_MULTINODE_LATE")); err == nil && d > 0 {
		late = d
	}
	id, exp := fmt.Sprint(mnJobs.Add(1)), fmt.Sprintf("late-%d", mnJobs.Add(1))
	env := slurmJob(id, time.Now().Unix(), 3, 0)
	nodes := startNodes(t, srv.URL, exp, 2, env)
	wait(t, nodes...)
	key := "slurm:e2e:" + id + ".0"
	if r := checkJob(t, srv, exp, key, nodes); r.Info.Status != mlflow.StatusRunning {
		t.Errorf("with one of three nodes still to come the run is %s, want RUNNING", r.Info.Status)
	}
	time.Sleep(late) // the lateness under test, not a synchronisation
	last := startMN(t, srv.URL, exp, env(2))
	last.id = "node-2"
	wait(t, last)
	if r := checkJob(t, srv, exp, key, append(nodes, last)); r.Info.Status != mlflow.StatusFinished {
		t.Errorf("after the late node ended the run is %s, want FINISHED", r.Info.Status)
	}
}

// TestMultinodeOneNodeFails: one node's child fails; the run is FAILED and
// stays so when the others end cleanly.
func TestMultinodeOneNodeFails(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	id, exp := fmt.Sprint(mnJobs.Add(1)), fmt.Sprintf("fails-%d", mnJobs.Add(1))
	env := slurmJob(id, time.Now().Unix(), 3, 0)
	nodes := startNodes(t, srv.URL, exp, 3, func(i int) []string {
		if i == 1 {
			return append(env(i), "CHILD_EXIT=3")
		}
		return env(i)
	})
	wait(t, nodes...)
	if nodes[1].code != 3 || nodes[0].code != 0 {
		t.Errorf("exit codes %d %d, want the children's 0 and 3", nodes[0].code, nodes[1].code)
	}
	r := checkJob(t, srv, exp, "slurm:e2e:"+id+".0", nodes)
	if l := line(r, "node-1"); r.Info.Status != mlflow.StatusFailed || l["exit"] != "3" || l["status"] != mlflow.StatusFailed || r.Tags["bridge.failed.node-1"] == "" {
		t.Errorf("run %s, tags %v: want FAILED with node-1's exit recorded", r.Info.Status, r.Tags)
	}
	own := nodeRun(t, srv, srv.ExperimentID(t, exp), r.Info.RunID, "node-1")
	if own.Info.Status != mlflow.StatusFailed || own.Tags["bridge.exit_code"] != "3" {
		t.Errorf("node-1's run: %s, exit code %q; want FAILED, 3", own.Info.Status, own.Tags["bridge.exit_code"])
	}
}

// TestMultinodeRequeue: Slurm requeues the job (SLURM_RESTART_COUNT=1, a
// new start time): its nodes rejoin the run, the attempt tagged on it, and
// each node's steps continue after those of its first attempt (the nodes
// restart with fresh spools: the steps come from the run), never again
// from 0 under the same keys.
func TestMultinodeRequeue(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.SharedPostgres(t)
	id, exp := fmt.Sprint(mnJobs.Add(1)), fmt.Sprintf("requeue-%d", mnJobs.Add(1))
	key := "slurm:e2e:" + id + ".0"
	first := startNodes(t, srv.URL, exp, 2, func(i int) []string {
		env := slurmJob(id, 1000, 2, 0)(i)
		if i == 1 {
			env = append(env, "CHILD_EXIT=3") // a failed attempt
		}
		return env
	})
	wait(t, first...)
	run := checkJob(t, srv, exp, key, first).Info.RunID
	expID := srv.ExperimentID(t, exp)
	firstLast, ownRun := map[string]int64{}, map[string]string{}
	for _, n := range first {
		ownRun[n.id] = nodeRun(t, srv, expID, run, n.id).Info.RunID
		s := steps(t, srv, ownRun[n.id], "system/node_memory_used_megabytes")
		firstLast[n.id] = s[len(s)-1]
	}
	again := startNodes(t, srv.URL, exp, 2, slurmJob(id, 2000, 2, 1))
	wait(t, again...)
	r := checkJob(t, srv, exp, key, again)
	if r.Info.RunID != run {
		t.Fatalf("the requeued job's run %s, want the first attempt's %s", r.Info.RunID, run)
	}
	for _, n := range again {
		if own := nodeRun(t, srv, expID, run, n.id).Info.RunID; own != ownRun[n.id] {
			t.Errorf("%s's requeued attempt writes to run %s, want its first attempt's %s", n.id, own, ownRun[n.id])
		}
		s := steps(t, srv, ownRun[n.id], "system/node_memory_used_megabytes") // fails on a step twice
		seqs := spooledSeqs(t, filepath.Join(n.dir, "spool.jsonl"))
		if len(seqs) == 0 || seqs[0] != firstLast[n.id]+1 {
			t.Errorf("%s: the requeued attempt's steps %v, want them to follow on from the first attempt's last, %d (run's steps %v)",
				n.id, seqs, firstLast[n.id], s)
		}
		if !strings.Contains(n.stderr.String(), "joined the job's run") {
			t.Errorf("%s did not log that it joined the job's run:\n%s", n.id, n.stderr.String())
		}
	}
	for _, n := range again {
		if l := line(r, n.id); l["attempt"] != "1" {
			t.Errorf("%s's line %v, want attempt 1", n.id, l)
		}
	}
	if r.Info.Status != mlflow.StatusFailed {
		t.Errorf("after a failed attempt and a clean one the run is %s, want FAILED kept", r.Info.Status)
	}
}

// TestMultinodeElectionUnfinished: node 1 cannot finish the election (its
// MLflow searches hang). Its child starts within --start-timeout without a
// run, its samples stay in the spool and bridge says how to join them;
// `bridge sync SPOOL` later joins them to the run node 0 elected, under
// node 1's id, and records its end.
func TestMultinodeElectionUnfinished(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.SharedPostgres(t)
	p, err := faultproxy.Start(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.Schedule(faultproxy.Fault{Path: "runs/search", Kind: faultproxy.Hang})
	id, exp := fmt.Sprint(mnJobs.Add(1)), fmt.Sprintf("unfinished-%d", mnJobs.Add(1))
	env := slurmJob(id, time.Now().Unix(), 2, 0)
	n0 := startMN(t, srv.URL, exp, env(0))
	n0.id = "node-0"
	n1 := startMNIn(t, p.URL(), exp, t.TempDir(), env(1), "--start-timeout", "1s", "--flush-timeout", "3s")
	n1.id = "node-1"
	spoolPath := filepath.Join(n1.dir, "spool.jsonl")
	wait(t, n0, n1)
	if n1.code != 0 {
		t.Fatalf("node 1's bridge exited %d, want its child's 0", n1.code)
	}
	if run, _, _ := n1.seen(t); run != "-" {
		t.Errorf("node 1's child saw MLFLOW_RUN_ID=%s, want none", run)
	}
	if !strings.Contains(n1.stderr.String(), "bridge sync "+spoolPath) {
		t.Errorf("node 1 does not say how to join its samples (bridge sync %s):\n%s", spoolPath, n1.stderr.String())
	}
	key := "slurm:e2e:" + id + ".0"
	if r := checkJob(t, srv, exp, key, []*mnNode{n0}); r.Info.Status != mlflow.StatusRunning {
		t.Errorf("with node 1's end unknown the run is %s, want RUNNING", r.Info.Status)
	}
	p.Clear()
	sync := exec.Command(testbin.Bridge(t), "sync", spoolPath)
	sync.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp)
	out, err := sync.CombinedOutput()
	if err != nil {
		t.Fatalf("bridge sync: %v\n%s", err, out)
	}
	// The child ran without the run; what it would have seen, for checkJob.
	os.WriteFile(filepath.Join(n1.dir, "seen"), []byte(checkJobRun(t, srv, exp, key)+" - 0\n"), 0o644)
	if r := checkJob(t, srv, exp, key, []*mnNode{n0, n1}); r.Info.Status != mlflow.StatusFinished || line(r, "node-1")["status"] != mlflow.StatusFinished {
		t.Errorf("after the sync the run is %s, node 1's line %v; want FINISHED\n%s", r.Info.Status, line(r, "node-1"), out)
	}
}

// checkJobRun is the id of the job's one active run.
func checkJobRun(t *testing.T, srv *mlflowtest.Server, exp, key string) string {
	t.Helper()
	runs := srv.SearchRuns(t, srv.ExperimentID(t, exp), fmt.Sprintf("tags.`%s` = '%s'", mlflow.TagJobKey, key), "ACTIVE_ONLY")
	if len(runs) != 1 {
		t.Fatalf("%d active runs of %s", len(runs), key)
	}
	return runs[0].Info.RunID
}

// TestMultinodeWandbGroup: three nodes of one job with W&B, and node 1
// restarted after the job's end. Each child's real wandb reads the
// variables bridge exported: the job's run id derived from the key, mode
// shared, its node's label, primary on node 0 only, no finish-state
// updates elsewhere, and the job's group, so the job's run sits in it.
// Each bridge writes its node's series to a run of its own in the group
// (job type node, named by the node, keys unlabelled), marked complete
// with its child's exit code; bridge writes no series to the job's run,
// only the job's records in its summary: every node's end, the report.
// The restarted node writes the same node run again, as a new writer,
// and its end replaces its record in the job's run.
func TestMultinodeWandbGroup(t *testing.T) {
	py := wbPython(t)
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: wbKey})
	script, err := filepath.Abs(filepath.Join("testdata", "wandb_shared.py"))
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprint(mnJobs.Add(1))
	start := time.Now().Unix()
	const count = 3
	runID := wbsink.RunIDFor("slurm:e2e:"+id+".0", strconv.FormatInt(start, 10))
	var outs [count + 1]syncbuf.Buffer
	run := func(i, out, restarts int) *mnNode {
		n := &mnNode{id: fmt.Sprintf("node-%d", i), dir: t.TempDir()}
		n.cmd = exec.Command(testbin.Bridge(t), "--interval", "1s", "--scopes", "node", "--trackers", "wandb",
			"--spool", filepath.Join(n.dir, "spool.jsonl"), "--", py, script, wbProject)
		n.cmd.Dir = n.dir
		n.cmd.Env = append(cleanEnv(srv.ClientEnv(n.dir, wbKey)...), append(slurmJob(id, start, count, restarts)(i), "WANDB_PROJECT="+wbProject, "TMPDIR="+n.dir)...)
		n.cmd.Stdout, n.cmd.Stderr = &outs[out], &n.stderr
		n.began = time.Now()
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s: stdout:\n%s\nstderr:\n%s", n.id, outs[out].String(), n.stderr.String())
			}
		})
		return n
	}
	nodes := make([]*mnNode, count)
	for i := range nodes {
		nodes[i] = run(i, i, 0)
	}
	wait(t, nodes...)
	for i, n := range nodes {
		if n.code != 0 {
			t.Errorf("%s's bridge exited %d", n.id, n.code)
		}
		primary := map[bool]string{true: "True", false: "False"}[i == 0] // Python's bool
		want := fmt.Sprintf("shared %s shared %s %s %s %s", runID, n.id, primary, primary, runID)
		if !strings.Contains(outs[i].String(), want) {
			t.Errorf("%s's wandb read %q, want %q", n.id, outs[i].String(), want)
		}
	}
	job, ok := srv.Run(srv.Entity(), wbProject, runID)
	if !ok {
		t.Fatalf("no W&B run %s", runID)
	}
	if job.Group != runID {
		t.Errorf("the job's run is in group %q, want %s", job.Group, runID)
	}
	for _, w := range job.Writers {
		for _, l := range w.Files[wandbserver.EventsFile].Lines {
			if strings.Contains(l.Content, `"system.node_memory_used_megabytes`) {
				t.Errorf("a bridge line in the job's run: %s", l.Content)
			}
		}
	}
	// nodeRun checks node i's run and returns it.
	nodeRun := func(i int) wandbserver.Run {
		t.Helper()
		name := fmt.Sprintf("node-%d", i)
		r, ok := srv.Run(srv.Entity(), wbProject, wbsink.NodeRunID(runID, name))
		if !ok {
			t.Fatalf("no run of %s (%s)", name, wbsink.NodeRunID(runID, name))
		}
		if r.Group != runID || r.JobType != wbsink.JobTypeNode || r.DisplayName != name {
			t.Errorf("%s's run: group %q, job type %q, name %q", name, r.Group, r.JobType, r.DisplayName)
		}
		if !r.Complete || r.ExitCode == nil || *r.ExitCode != 0 {
			t.Errorf("%s's run: complete %v, exit code %v; want complete with 0", name, r.Complete, r.ExitCode)
		}
		return r
	}
	// lines are the events lines of each bridge writer of r holding key.
	lines := func(r wandbserver.Run, key string) (out []int) {
		for _, w := range r.Writers {
			n := 0
			for _, l := range w.Files[wandbserver.EventsFile].Lines {
				if strings.Contains(l.Content, `"`+key+`"`) {
					n++
				}
			}
			if w.Files[wandbserver.EventsFile].Overwrites > 0 {
				t.Errorf("run %s: writer %s overwrote lines", r.Name, w.ID)
			}
			out = append(out, n)
		}
		return out
	}
	for i := range nodes {
		if got := lines(nodeRun(i), "system.node_memory_used_megabytes"); len(got) != 1 || got[0] == 0 {
			t.Errorf("node-%d's run: lines with system.node_memory_used_megabytes by writer %v, want bridge's", i, got)
		}
	}
	if n := len(srv.Runs()); n != count+1 {
		t.Errorf("%d runs, want the job's and one a node", n)
	}
	// The job's records in its run's summary: each bridge writes them
	// after its child's last summary line, so the last write is a
	// bridge's. The nodes end at the same moment here, and W&B has no
	// compare-and-set: one node's write may replace another's
	// (docs/multinode.md); tracker/wandb's TestNodeRunFinish and jobrun's
	// TestJobReportInSummary check each record in order.
	sum := job.Summary()
	b, _ := sum["bridge"].(map[string]any)
	ends, _ := b["nodes"].(map[string]any)
	if report, _ := b["report"].(string); len(ends) == 0 || !strings.HasPrefix(report, "No node failed.") {
		t.Errorf("the job's run's summary: %v; want bridge's report", sum)
	}

	// Node 1 again, its launcher's next attempt, alone: its end is the
	// job's run's last write.
	again := run(1, count, 1)
	wait(t, again)
	if again.code != 0 {
		t.Fatalf("the restarted node-1's bridge exited %d", again.code)
	}
	if got := lines(nodeRun(1), "system.node_memory_used_megabytes"); len(got) != 2 || got[0] == 0 || got[1] == 0 {
		t.Errorf("node-1's run: lines by writer %v, want both attempts' bridges", got)
	}
	if n := len(srv.Runs()); n != count+1 {
		t.Errorf("after the restart %d runs, want the job's and one a node", n)
	}
	job, _ = srv.Run(srv.Entity(), wbProject, runID)
	b, _ = job.Summary()["bridge"].(map[string]any)
	ends, _ = b["nodes"].(map[string]any)
	rec, _ := ends["node-1"].(map[string]any)
	ended, _ := strconv.ParseInt(fmt.Sprint(rec["ended"]), 10, 64)
	if rec["status"] != tracker.StatusFinished || ended < again.began.UnixMilli() {
		t.Errorf("node-1's record in the job's run: %v; want the restarted attempt's end (after %d)", rec, again.began.UnixMilli())
	}
}

// TestMultinodeTasksOnOneNode: two bridges of one job on node 0 (srun
// --ntasks-per-node=2: one /tmp, SLURM_LOCALID 0 and 1) and one on node
// 1. Node 0's series are sent once, by the bridge that took the node's
// lock, to node 0's run; the other sends only its own child's process
// series, under system/task-<local>/ of that run, and has a state line of
// its own on the job's run.
func TestMultinodeTasksOnOneNode(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	id, exp := fmt.Sprint(mnJobs.Add(1)), fmt.Sprintf("tasks-%d", mnJobs.Add(1))
	env := slurmJob(id, time.Now().Unix(), 2, 0)
	shared := t.TempDir() // node 0's /tmp
	task := func(local int) []string {
		e := env(0)
		e[5] = "SLURM_LOCALID=" + strconv.Itoa(local)
		return append(e, "TMPDIR="+shared, "BRIDGE_SCOPES=node,process")
	}
	nodes := []*mnNode{
		startMN(t, srv.URL, exp, task(0)),
		startMN(t, srv.URL, exp, task(1)),
		startMN(t, srv.URL, exp, append(env(1), "BRIDGE_SCOPES=node,process")),
	}
	wait(t, nodes...)
	run := checkJobRun(t, srv, exp, "slurm:e2e:"+id+".0")
	own := nodeRun(t, srv, srv.ExperimentID(t, exp), run, "node-0").Info.RunID
	lead, other := -1, -1
	for i, n := range nodes[:2] {
		if n.code != 0 {
			t.Fatalf("task %d's bridge exited %d", i, n.code)
		}
		ss, _, _, err := spooltest.ReadFile(filepath.Join(n.dir, "spool.jsonl"))
		if err != nil || len(ss) == 0 {
			t.Fatalf("task %d's spool: %v", i, err)
		}
		if _, ok := ss[0].Value("node_memory_used_megabytes"); ok {
			lead = i
		} else {
			other = i
		}
	}
	if lead < 0 || other < 0 {
		t.Fatalf("lead %d, other %d: want one bridge of node 0 to send the node's series and one not", lead, other)
	}
	keys := srv.MetricKeys(t, own, "system/")
	prefix := fmt.Sprintf("system/task-%d/process_", other)
	if !slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, prefix) }) {
		t.Errorf("no %s* key; node 0's keys: %v", prefix, keys)
	}
	// Every bridge sends its own bottleneck verdict's ratios (package
	// whyslow), a further one under its task too.
	if slices.ContainsFunc(keys, func(k string) bool {
		return strings.HasPrefix(k, "system/task-") && !strings.HasPrefix(k, prefix) &&
			!strings.HasPrefix(k, fmt.Sprintf("system/task-%d/node_bottleneck_", other))
	}) {
		t.Errorf("node-wide series under a task: %v", keys)
	}
	if keys := srv.MetricKeys(t, run, "system/"); len(keys) > 0 {
		t.Errorf("the job's run holds series %v", keys)
	}
	ss, _, _, _ := spooltest.ReadFile(filepath.Join(nodes[lead].dir, "spool.jsonl"))
	if h := srv.History(t, own, "system/node_memory_used_megabytes"); len(h) != len(ss) {
		t.Errorf("node 0's system/node_memory_used_megabytes has %d points, the lead's spool %d samples: want them once", len(h), len(ss))
	}
	if got, node, _ := nodes[other].seen(t); got != run || node != "-" {
		t.Errorf("the other task's child got MLFLOW_RUN_ID=%s MLFLOW_SYSTEM_METRICS_NODE_ID=%s, want %s and none", got, node, run)
	}
	r := srv.GetRun(t, run)
	if r.Info.Status != mlflow.StatusFinished {
		t.Errorf("run %s, want FINISHED", r.Info.Status)
	}
	if l := tracker.ParseLine(r.Tags[tracker.StateTag("node-0", fmt.Sprintf("task-%d", other))]); l["status"] != mlflow.StatusFinished || l["run"] != own {
		t.Errorf("the other task's line %v, want FINISHED naming node 0's run %s", l, own)
	}
}

// TestMultinodeTasksShareWorkdir: srun --ntasks-per-node=2 starts both of
// a node's bridges in the job's one working directory, with no --spool.
// Each writes a default spool of its own (node id, task, run): neither
// finds the other's locked and goes without one. The second task's
// log-batch calls are refused (503), so its samples stay in its spool;
// `bridge sync` of it sends them where its bridge would have: under
// system/task-1/ on node 0's run, its end under the task's scope there and
// in its state line on the job's run, the run's status left to the nodes.
func TestMultinodeTasksShareWorkdir(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.SharedPostgres(t)
	p, err := faultproxy.Start(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.Schedule(faultproxy.Fault{Path: "runs/log-batch", Kind: faultproxy.Status, Code: 503})
	id, exp := fmt.Sprint(mnJobs.Add(1)), fmt.Sprintf("workdir-%d", mnJobs.Add(1))
	env := slurmJob(id, time.Now().Unix(), 1, 0)(0)
	dir := t.TempDir() // the job's working directory, and the node's /tmp
	task := func(local int, uri string) *mnNode {
		n := &mnNode{id: fmt.Sprintf("node-0 task %d", local), dir: dir}
		e := slices.Clone(env)
		e[4], e[5] = "SLURM_PROCID="+strconv.Itoa(local), "SLURM_LOCALID="+strconv.Itoa(local)
		n.cmd = exec.Command(testbin.Bridge(t), "--interval", "1s", "--start-timeout", "3m", "--flush-timeout", "3s", "--", "sleep", "2")
		n.cmd.Dir = dir
		n.cmd.Env = cleanEnv(append([]string{"MLFLOW_TRACKING_URI=" + uri, "MLFLOW_EXPERIMENT_NAME=" + exp, "TMPDIR=" + dir,
			"BRIDGE_SCOPES=node,process"}, e...)...)
		n.cmd.Stderr = &n.stderr
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s: bridge's stderr:\n%s", n.id, n.stderr.String())
			}
		})
		return n
	}
	lead := task(0, srv.URL)
	// Task 0 leads the node: it has taken the node's lock once it names
	// the job.
	waitfor.Cond(t, time.Minute, "task 0 naming the job", func() bool { return strings.Contains(lead.stderr.String(), "multi-node job") })
	other := task(1, p.URL())
	wait(t, lead, other)
	spools := map[string]bool{}
	for _, n := range []*mnNode{lead, other} {
		out := n.stderr.String()
		if n.code != 0 || strings.Contains(out, "another bridge is writing this spool") || strings.Contains(out, "memory only") {
			t.Fatalf("%s: exit %d, want 0 with a spool file of its own:\n%s", n.id, n.code, out)
		}
		m := regexp.MustCompile(`msg="spooling samples" .*path=(\S+)`).FindStringSubmatch(out)
		if m == nil || spools[m[1]] {
			t.Fatalf("%s spools to %q; the other task to %v:\n%s", n.id, m, spools, out)
		}
		spools[m[1]] = true
	}

	run := checkJobRun(t, srv, exp, "slurm:e2e:"+id+".0")
	own := nodeRun(t, srv, srv.ExperimentID(t, exp), run, "node-0").Info.RunID
	paths, _ := filepath.Glob(filepath.Join(dir, "bridge-spool-node-0.task-1-*.jsonl"))
	if len(paths) != 1 {
		t.Fatalf("task 1's default spools: %v, want one", paths)
	}
	path := paths[0]
	ss, _, attempts, err := spooltest.ReadFile(path)
	if err != nil || len(attempts) != 1 || attempts[0].Start.PID != other.cmd.Process.Pid {
		t.Fatalf("task 1's default spool %s: %v, attempts %+v; want task 1's attempt alone", path, err, attempts)
	}
	procs := 0
	for _, s := range ss {
		if _, ok := s.Value("process_count"); ok {
			procs++
		}
	}
	if procs == 0 {
		t.Fatalf("task 1's spool holds no process_count among %d samples", len(ss))
	}
	p.Clear()
	sync := exec.Command(testbin.Bridge(t), "sync", path)
	sync.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp)
	out, err := sync.CombinedOutput()
	if err != nil {
		t.Fatalf("bridge sync: %v\n%s", err, out)
	}
	if h := srv.History(t, own, "system/task-1/process_count"); len(h) != procs {
		t.Errorf("node 0's system/task-1/process_count has %d points after the sync, task 1's spool %d\n%s", len(h), procs, out)
	}
	if o := srv.GetRun(t, own); o.Tags["bridge.task.task-1.status"] != mlflow.StatusFinished || o.Tags["bridge.status"] != mlflow.StatusFinished {
		t.Errorf("node 0's run: task 1's status %q, the node's %q; want both FINISHED", o.Tags["bridge.task.task-1.status"], o.Tags["bridge.status"])
	}
	r := srv.GetRun(t, run)
	if l := tracker.ParseLine(r.Tags[tracker.StateTag("node-0", "task-1")]); l["status"] != mlflow.StatusFinished || r.Tags["bridge.exit_code"] != "" {
		t.Errorf("task 1's end: its line %v, the job's run's exit code %q; want FINISHED in the line only", l, r.Tags["bridge.exit_code"])
	}
	if r.Info.Status != mlflow.StatusFinished {
		t.Errorf("the job's run is %s, want FINISHED (its one node ended cleanly)", r.Info.Status)
	}
}
