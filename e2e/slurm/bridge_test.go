package slurm

import (
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/internal/mlflowtest"
)

// bridge under srun, one task per node, posting to the suite's MLflow
// server. What this checks holds before and after issue 22 (one run per
// job): every node's bridge and child succeed, every child is handed a run
// that exists and holds system metrics, and the experiment has
// no run that no child was handed. How many runs the job made is logged:
// today, one per node.
func TestBridgeUnderSrun(t *testing.T) {
	c := Shared(t)
	srv := mlflowtest.Shared(t)
	j, experiment := c.RunBridge(t, srv, Spec{}, []string{"--interval", "1s"}, "sleep", "3")
	if j.Exit != 0 {
		t.Fatalf("srun exited %d:\n%s", j.Exit, j.Output)
	}
	requireLauncherFacts(t, c, j.ID, j.Tasks, 1)

	for _, task := range j.Tasks {
		if bh, ch := task.Launched().Host, task.Procs["child"].Host; bh != ch {
			t.Errorf("bridge ran on %s, its child on %s", bh, ch)
		}
	}
	handed := ChildRuns(t, srv, j, experiment)
	for id, hosts := range handed {
		if keys := srv.MetricKeys(t, id, "system/"); len(keys) == 0 {
			t.Errorf("run %s (handed to %v) holds no system/ metrics", id, hosts)
		} else {
			t.Logf("run %s, handed to %v: %d system keys, e.g. %s", id, hosts, len(keys), strings.Join(keys[:min(3, len(keys))], " "))
		}
	}
	runs := srv.RunIDs(t, experiment)
	for _, id := range runs {
		if _, ok := handed[id]; !ok {
			t.Errorf("experiment %s holds run %s, handed to no child", experiment, id)
		}
	}
	t.Logf("issue 22: a job of %d nodes made %d MLflow run(s)", len(c.Nodes), len(runs))
}
