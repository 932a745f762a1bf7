package slurm

import (
	"fmt"
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

// JobRun checks issue 22's promise on the tasks of a job run under bridge
// (each task's bridge recorded as "task", its child as "child"; several
// attempts when the job was requeued) and returns the job's run: the
// experiment holds exactly one active run (election losers are deleted);
// every child was handed that run's id and its own node id, node-N
// (N: SLURM_NODEID) from the bridge that leads its node, exactly one per
// node and attempt, node-N/task-L (L: SLURM_LOCALID) from the others;
// no bridge found its default spool taken by another; every one of the
// job's nodes has its series under system/node-N/, and a task's keys under
// system/node-N/task-L/ are its process's only.
func JobRun(t testing.TB, srv *mlflowtest.Server, nodes int, tasks []Task, experiment string) mlflowtest.Run {
	t.Helper()
	exp := srv.ExperimentID(t, experiment)
	if exp == "" {
		t.Fatalf("experiment %s does not exist: no bridge made a run", experiment)
	}
	active := srv.SearchRuns(t, exp, "", "ACTIVE_ONLY")
	if len(active) != 1 {
		var ids []string
		for _, r := range active {
			ids = append(ids, r.Info.RunID+" ("+r.Tags["bridge.job_key"]+")")
		}
		t.Fatalf("experiment %s holds %d active runs %v, want the job's one", experiment, len(active), ids)
	}
	run := active[0]
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
		node, sub := "node-"+bridge.Env["SLURM_NODEID"], "task-"+bridge.Env["SLURM_LOCALID"]
		switch got := child.Env["MLFLOW_SYSTEM_METRICS_NODE_ID"]; got {
		case node:
			leads[nodeAttempt{node, task.Attempt}]++
		case node + "/" + sub:
		default:
			t.Errorf("%s: the child got MLFLOW_SYSTEM_METRICS_NODE_ID=%q, want %s (or %s/%s)", where, got, node, node, sub)
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
	for n := range nodes {
		prefix := fmt.Sprintf("system/node-%d/", n)
		keys := srv.MetricKeys(t, run.Info.RunID, prefix)
		if !slices.Contains(keys, prefix+NodeKey) {
			t.Errorf("run %s has no %s%s: node %d's series are missing (keys: %v)", run.Info.RunID, prefix, NodeKey, n, keys)
		}
		for _, k := range keys {
			rest := strings.TrimPrefix(k, prefix)
			if task, name, ok := strings.Cut(rest, "/"); ok && (!strings.HasPrefix(task, "task-") || !strings.HasPrefix(name, "process_")) {
				t.Errorf("run %s: key %s: under a task only its process's series belong", run.Info.RunID, k)
			}
		}
	}
	return run
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
