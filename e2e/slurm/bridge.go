package slurm

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/metrics/node"
)

// MLflowEnv exposes srv on the cluster network and returns the variables
// that point a job's bridges at it, in a new experiment, and that
// experiment's name. Nothing names the job or the node: bridge finds them
// in Slurm's variables. BRIDGE_START_TIMEOUT only gives the election room
// on a busy test machine (the default 5 s would start a child without the
// run, which the tests count as a failure).
func (c *Cluster) MLflowEnv(t testing.TB, srv *mlflowtest.Server) ([]string, string) {
	t.Helper()
	experiment := fmt.Sprintf("bridge-e2e-slurm-%s-%d", jobName(t), time.Now().UnixNano())
	return []string{"MLFLOW_TRACKING_URI=" + c.ExposeURL(t, srv.URL), "MLFLOW_EXPERIMENT_NAME=" + experiment,
		"BRIDGE_START_TIMEOUT=1m"}, experiment
}

// BridgeSpec makes spec's command `bridge BRIDGEARGS... -- task.sh child
// CHILD...` (the real binary, testbin.Bridge) posting to srv (MLflowEnv),
// and returns it with the experiment's name. Run the spec with Srun,
// Sbatch or Submit: each task's Procs["task"] is then bridge as the
// launcher started it (its environment, output and exit status) and
// Procs["child"] what bridge gave its child.
func (c *Cluster) BridgeSpec(t testing.TB, srv *mlflowtest.Server, spec Spec, bridgeArgs []string, child ...string) (Spec, string) {
	t.Helper()
	env, experiment := c.MLflowEnv(t, srv)
	spec.Env = append(slices.Clone(spec.Env), env...)
	cmd := append([]string{testbin.Bridge(t)}, bridgeArgs...)
	spec.Cmd = append(append(cmd, "--"), c.Wrap("child", child...)...)
	return spec, experiment
}

// RunBridge runs BridgeSpec's job with srun and fails t unless every task
// (bridge) and every child exited 0; it returns the job and the
// experiment's name.
func (c *Cluster) RunBridge(t testing.TB, srv *mlflowtest.Server, spec Spec, bridgeArgs []string, child ...string) (Job, string) {
	t.Helper()
	spec, experiment := c.BridgeSpec(t, srv, spec, bridgeArgs, child...)
	j := c.Srun(t, spec)
	RequireExits(t, j, 0, "task", "child")
	return j, experiment
}

// RequireExits fails t unless the job has tasks and every one of them
// recorded each named process with exit status want.
func RequireExits(t testing.TB, j Job, want int, procs ...string) {
	t.Helper()
	if len(j.Tasks) == 0 {
		t.Fatalf("job %s (exit %d) recorded no task; its output:\n%s", j.ID, j.Exit, j.Output)
	}
	var bad []string
	for _, task := range j.Tasks {
		for _, name := range procs {
			p, ok := task.Procs[name]
			switch {
			case !ok:
				bad = append(bad, fmt.Sprintf("attempt %d rank %d: no %q process recorded", task.Attempt, task.Rank, name))
			case p.Exit != want:
				bad = append(bad, fmt.Sprintf("attempt %d rank %d on %s: %s exited %d, want %d\nstdout:\n%s\nstderr:\n%s",
					task.Attempt, task.Rank, p.Host, name, p.Exit, want, p.Stdout, p.Stderr))
			}
		}
	}
	if len(bad) > 0 {
		t.Fatalf("job %s (exit %d):\n%s\njob output:\n%s", j.ID, j.Exit, strings.Join(bad, "\n"), j.Output)
	}
}

// JobRun checks a job's bridges and their runs in experiment, from the
// tasks the cluster ran (each task's bridge recorded as "task", its child
// as "child"; several attempts when the job was requeued) and returns the
// job's run and each node's run by node id: the experiment holds exactly
// one active run of the job's key (election losers are deleted), and one
// run of each node under it (mlflow.parentRunId, bridge.node_id node-N,
// N: SLURM_NODEID), nothing else; every child was handed the job's run's
// id and no node id; exactly one bridge per node and attempt leads the
// node (it writes node-N's run as node-N; the others as node-N.task-L, L:
// SLURM_LOCALID); no bridge found its default spool taken by another; the
// job's run holds no series; every node's run has the node's series
// under system/, and a task's keys under system/task-L/ are its process's
// only.
func JobRun(t testing.TB, srv *mlflowtest.Server, nodes int, tasks []Task, experiment string) (mlflowtest.Run, map[string]mlflowtest.Run) {
	t.Helper()
	exp := srv.ExperimentID(t, experiment)
	if exp == "" {
		t.Fatalf("experiment %s does not exist: no bridge made a run", experiment)
	}
	active := srv.SearchRuns(t, exp, "", "ACTIVE_ONLY")
	var jobs []mlflowtest.Run
	for _, r := range active {
		if r.Tags["bridge.job_key"] != "" {
			jobs = append(jobs, r)
		}
	}
	if len(jobs) != 1 {
		var ids []string
		for _, r := range jobs {
			ids = append(ids, r.Info.RunID+" ("+r.Tags["bridge.job_key"]+")")
		}
		t.Fatalf("experiment %s holds %d active runs of a job %v, want the job's one", experiment, len(jobs), ids)
	}
	run := jobs[0]
	own := map[string]mlflowtest.Run{}
	for _, r := range active {
		switch {
		case r.Info.RunID == run.Info.RunID:
		case r.Tags["mlflow.parentRunId"] != run.Info.RunID:
			t.Errorf("active run %s (tags %v) is neither the job's run %s nor one of its nodes'", r.Info.RunID, r.Tags, run.Info.RunID)
		case own[r.Tags["bridge.node_id"]].Info.RunID != "":
			t.Errorf("node %s has two runs: %s and %s", r.Tags["bridge.node_id"], own[r.Tags["bridge.node_id"]].Info.RunID, r.Info.RunID)
		default:
			own[r.Tags["bridge.node_id"]] = r
		}
	}
	type nodeAttempt struct {
		node    string
		attempt int
	}
	leads := map[nodeAttempt]int{}
	for _, task := range tasks {
		bridge, child := task.Launched(), task.Procs["child"]
		where := fmt.Sprintf("attempt %d, rank %d on %s", task.Attempt, task.Rank, bridge.Host)
		if got := child.Env["MLFLOW_RUN_ID"]; got != run.Info.RunID {
			t.Errorf("%s: the child got MLFLOW_RUN_ID=%q, want the job's run %s; bridge said:\n%s", where, got, run.Info.RunID, bridge.Stderr)
		}
		if got := child.Env["MLFLOW_SYSTEM_METRICS_NODE_ID"]; got != "" {
			t.Errorf("%s: the child got MLFLOW_SYSTEM_METRICS_NODE_ID=%q, want none", where, got)
		}
		node, sub := "node-"+bridge.Env["SLURM_NODEID"], "task-"+bridge.Env["SLURM_LOCALID"]
		switch got := Writes(bridge.Stderr); got {
		case node:
			leads[nodeAttempt{node, task.Attempt}]++
		case node + "." + sub:
		default:
			t.Errorf("%s: bridge wrote to the node's run as %q, want %s (or %s.%s)", where, got, node, node, sub)
		}
		if strings.Contains(bridge.Stderr, "another bridge is writing this spool") {
			t.Errorf("%s: bridge found its default spool taken:\n%s", where, bridge.Stderr)
		}
	}
	for _, task := range tasks {
		k := nodeAttempt{"node-" + task.Launched().Env["SLURM_NODEID"], task.Attempt}
		if n := leads[k]; n != 1 {
			t.Errorf("%s, attempt %d: %d bridges sent the node's series, want one", k.node, k.attempt, n)
		}
	}
	if keys := srv.MetricKeys(t, run.Info.RunID, "system/"); len(keys) > 0 {
		t.Errorf("the job's run %s holds series %v: they belong to the nodes' runs", run.Info.RunID, keys)
	}
	for n := range nodes {
		id := fmt.Sprintf("node-%d", n)
		r, ok := own[id]
		if !ok {
			t.Errorf("node %s has no run under the job's run %s", id, run.Info.RunID)
			continue
		}
		keys := srv.MetricKeys(t, r.Info.RunID, "system/")
		if !slices.Contains(keys, "system/"+NodeKey) {
			t.Errorf("%s's run %s has no system/%s: the node's series are missing (keys: %v)", id, r.Info.RunID, NodeKey, keys)
		}
		for _, k := range keys {
			rest := strings.TrimPrefix(k, "system/")
			// A task's process series, and its bridge's own bottleneck
			// verdict (package whyslow).
			if task, name, ok := strings.Cut(rest, "/"); ok && (!strings.HasPrefix(task, "task-") ||
				!strings.HasPrefix(name, "process_") && !strings.HasPrefix(name, "node_bottleneck_")) {
				t.Errorf("%s's run %s: key %s: under a task only its process's series belong", id, r.Info.RunID, k)
			}
		}
	}
	return run, own
}

// writesRe finds, in bridge's log, who it writes to its node's run as.
var writesRe = regexp.MustCompile(`msg="writing to the node's run" .* node=(\S+)`)

// Writes is who a bridge wrote to its node's run as (<node>, or
// <node>.<task>), from its log; "" when it never did.
func Writes(stderr string) string {
	m := writesRe.FindStringSubmatch(stderr)
	if m == nil {
		return ""
	}
	return m[1]
}

// NodeKey is a series only a node's lead bridge sends, under
// system/<node-id>/.
var NodeKey = node.MemoryUsed.Name

// RequireOnce fails t when a step of key repeats in the run's history:
// two bridges sent the same series (one attempt of a job numbers its steps
// once).
func RequireOnce(t testing.TB, srv *mlflowtest.Server, run, key string) {
	t.Helper()
	h := srv.History(t, run, key)
	if len(h) == 0 {
		t.Errorf("run %s has no %s", run, key)
	}
	seen := map[int64]bool{}
	for _, m := range h {
		if seen[m.Step] {
			t.Errorf("run %s: %s has step %d twice: two bridges send it", run, key, m.Step)
			return
		}
		seen[m.Step] = true
	}
}
