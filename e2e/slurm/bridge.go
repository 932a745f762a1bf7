package slurm

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/internal/mlflowtest"
	"github.com/bridge-dev/bridge/internal/testbin"
)

// MLflowEnv exposes srv on the cluster network and returns the variables
// that point a job's bridges at it, in a new experiment, and that
// experiment's name.
func (c *Cluster) MLflowEnv(t testing.TB, srv *mlflowtest.Server) ([]string, string) {
	t.Helper()
	experiment := fmt.Sprintf("bridge-e2e-slurm-%s-%d", jobName(t), time.Now().UnixNano())
	return []string{"MLFLOW_TRACKING_URI=" + c.ExposeURL(t, srv.URL), "MLFLOW_EXPERIMENT_NAME=" + experiment}, experiment
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

// ChildRuns maps each MLFLOW_RUN_ID that bridge handed a child (the
// process recorded as "child") to the hosts whose child got it; it fails t
// when a child got none or one that is not a run of experiment.
func ChildRuns(t testing.TB, srv *mlflowtest.Server, j Job, experiment string) map[string][]string {
	t.Helper()
	runs := srv.RunIDs(t, experiment)
	handed := map[string][]string{}
	for _, task := range j.Tasks {
		child := task.Procs["child"]
		id := child.Env["MLFLOW_RUN_ID"]
		switch {
		case id == "":
			t.Fatalf("rank %d: the child on %s got no MLFLOW_RUN_ID; bridge said:\n%s", task.Rank, child.Host, task.Launched().Stderr)
		case !slices.Contains(runs, id):
			t.Fatalf("rank %d: the child on %s got MLFLOW_RUN_ID=%s, not a run of experiment %s (%v)", task.Rank, child.Host, id, experiment, runs)
		}
		handed[id] = append(handed[id], child.Host)
	}
	return handed
}
