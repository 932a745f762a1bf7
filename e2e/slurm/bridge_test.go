package slurm

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
)

// bridge under srun, one task per node, set up as a user would: the MLflow
// variables and nothing else (the key, the node ids and the node count
// come from Slurm). Issue 22: one run for the job, every child handed it
// and its own node id, every node's series under system/node-N/ once, and
// the run FINISHED when every node has ended cleanly.
func TestBridgeUnderSrun(t *testing.T) {
	c := Shared(t)
	srv := mlflowtest.SharedPostgres(t)
	j, experiment := c.RunBridge(t, srv, Spec{}, nil, "sleep", "3")
	if j.Exit != 0 {
		t.Fatalf("srun exited %d:\n%s", j.Exit, j.Output)
	}
	requireLauncherFacts(t, c, j.ID, j.Tasks, 1)
	for _, task := range j.Tasks {
		if bh, ch := task.Launched().Host, task.Procs["child"].Host; bh != ch {
			t.Errorf("bridge ran on %s, its child on %s", bh, ch)
		}
	}
	run := JobRun(t, srv, len(c.Nodes), j.Tasks, experiment)
	// srun outside a batch job: the allocation's first step, 0.
	if key, want := run.Tags["bridge.job_key"], fmt.Sprintf("slurm:%s:%s.0", c.Name, j.ID); key != want {
		t.Errorf("the run's key is %q, want %q", key, want)
	}
	requireFinished(t, run, len(c.Nodes))
	for n := range c.Nodes {
		RequireOnce(t, srv, run.Info.RunID, fmt.Sprintf("system/node-%d/%s", n, NodeKey))
	}
	t.Logf("a job of %d nodes: one run, %s, %d system keys", len(c.Nodes), run.Info.RunID, len(srv.MetricKeys(t, run.Info.RunID, "system/")))
}

// Two bridges of the job per node (srun --ntasks-per-node=2), in the job's
// one working directory: on each node one bridge sends the node's series,
// once; the other only its child's process series, under
// system/node-N/task-L/; each bridge writes a default spool of its own.
func TestBridgeUnderSrunTwoTasksPerNode(t *testing.T) {
	c := Shared(t)
	srv := mlflowtest.SharedPostgres(t)
	j, experiment := c.RunBridge(t, srv, Spec{TasksPerNode: 2}, nil, "sleep", "3")
	requireLauncherFacts(t, c, j.ID, j.Tasks, 2)
	run := JobRun(t, srv, len(c.Nodes), j.Tasks, experiment)
	requireFinished(t, run, len(c.Nodes))
	for n := range c.Nodes {
		RequireOnce(t, srv, run.Info.RunID, fmt.Sprintf("system/node-%d/%s", n, NodeKey))
	}
	spools := map[string]int{}
	for _, task := range j.Tasks {
		// node-N for the node's lead, node-N/task-L for the other.
		node := task.Procs["child"].Env["MLFLOW_SYSTEM_METRICS_NODE_ID"]
		RequireOnce(t, srv, run.Info.RunID, "system/"+node+"/process_count")
		log := task.Launched().Stderr
		m := spoolingRe.FindStringSubmatch(log)
		path := ""
		if m != nil {
			path = m[1]
		}
		if prev, taken := spools[path]; m == nil || taken {
			t.Errorf("rank %d spools to %q (rank %d too?):\n%s", task.Rank, path, prev, log)
		}
		spools[path] = task.Rank
	}
}

// spoolingRe finds the spool's path in bridge's log.
var spoolingRe = regexp.MustCompile(`msg="spooling samples" .*path=(\S+)`)

// requireFinished checks the end of a job whose every node ended cleanly:
// the run FINISHED, the node count Slurm gave, each node's end recorded.
func requireFinished(t testing.TB, run mlflowtest.Run, nodes int) {
	t.Helper()
	if run.Info.Status != "FINISHED" || run.Tags["bridge.nodes"] != fmt.Sprint(nodes) {
		t.Errorf("run %s: status %s, bridge.nodes %q; want FINISHED after %d clean nodes", run.Info.RunID, run.Info.Status, run.Tags["bridge.nodes"], nodes)
	}
	for n := range nodes {
		if k := fmt.Sprintf("bridge.node.node-%d.status", n); run.Tags[k] != "FINISHED" {
			t.Errorf("run %s: %s=%q, want FINISHED", run.Info.RunID, k, run.Tags[k])
		}
	}
}
