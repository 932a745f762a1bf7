package slurm

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/tracker"
)

// bridge under srun, one task per node, set up as a user would: the MLflow
// variables and nothing else (the key, the node ids and the node count
// come from Slurm). Issue 22: one run for the job, every child handed it
// and a run of each node under it holding the node's series once, and the
// run FINISHED when every node has ended cleanly.
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
	run, own := JobRun(t, srv, len(c.Nodes), j.Tasks, experiment)
	// srun outside a batch job: the allocation's first step, 0.
	if key, want := run.Tags["bridge.job_key"], fmt.Sprintf("slurm:%s:%s.0", c.Name, j.ID); key != want {
		t.Errorf("the run's key is %q, want %q", key, want)
	}
	requireFinished(t, run, own, len(c.Nodes))
	for n := range c.Nodes {
		RequireOnce(t, srv, own[fmt.Sprintf("node-%d", n)].Info.RunID, "system/"+NodeKey)
	}
	t.Logf("a job of %d nodes: the job's run %s, a run a node under it", len(c.Nodes), run.Info.RunID)
}

// Two bridges of the job per node (srun --ntasks-per-node=2), in the job's
// one working directory: on each node one bridge sends the node's series,
// once, to the node's run; the other only its child's process series,
// under system/task-L/ of that run; each bridge writes a default spool of
// its own.
func TestBridgeUnderSrunTwoTasksPerNode(t *testing.T) {
	c := Shared(t)
	srv := mlflowtest.SharedPostgres(t)
	j, experiment := c.RunBridge(t, srv, Spec{TasksPerNode: 2}, nil, "sleep", "3")
	requireLauncherFacts(t, c, j.ID, j.Tasks, 2)
	run, own := JobRun(t, srv, len(c.Nodes), j.Tasks, experiment)
	requireFinished(t, run, own, len(c.Nodes))
	for n := range c.Nodes {
		RequireOnce(t, srv, own[fmt.Sprintf("node-%d", n)].Info.RunID, "system/"+NodeKey)
	}
	spools := map[string]int{}
	for _, task := range j.Tasks {
		// node-N for the node's lead, node-N.task-L for the other.
		node, sub, _ := strings.Cut(Writes(task.Launched().Stderr), ".")
		key := "system/process_count"
		if sub != "" {
			key = "system/" + sub + "/process_count"
		}
		RequireOnce(t, srv, own[node].Info.RunID, key)
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
// the run FINISHED, the node count Slurm gave, each node's end recorded in
// its state line and on its own run.
func requireFinished(t testing.TB, run mlflowtest.Run, own map[string]mlflowtest.Run, nodes int) {
	t.Helper()
	if run.Info.Status != "FINISHED" || run.Tags["bridge.nodes"] != fmt.Sprint(nodes) {
		t.Errorf("run %s: status %s, bridge.nodes %q; want FINISHED after %d clean nodes", run.Info.RunID, run.Info.Status, run.Tags["bridge.nodes"], nodes)
	}
	for n := range nodes {
		id := fmt.Sprintf("node-%d", n)
		if l := tracker.ParseLine(run.Tags[tracker.StateTag(id, "")]); l["status"] != "FINISHED" || l["run"] != own[id].Info.RunID {
			t.Errorf("run %s: %s's line %v, want FINISHED naming its run %s", run.Info.RunID, id, l, own[id].Info.RunID)
		}
		if r := own[id]; r.Info.Status != "FINISHED" {
			t.Errorf("%s's run %s is %s, want FINISHED", id, r.Info.RunID, r.Info.Status)
		}
	}
}
