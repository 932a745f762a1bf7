package slurm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/tracker"
)

// deploySpec is deploy/sbatch.sh as a user submits it, `sbatch
// deploy/sbatch.sh train.py ARGS...`, with code as train.py and the MLflow
// variables of srv (MLflowEnv) set; it returns the spec and the
// experiment's name. `bridge` and `python` on the job's PATH are shims that
// run the real ones under task.sh, so that each node's bridge ("task") and
// training process ("child") are recorded.
func deploySpec(t *testing.T, c *Cluster, srv *mlflowtest.Server, code string, args ...string) (Spec, string) {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 not found: %v", err)
	}
	script, err := filepath.Abs("../../deploy/sbatch.sh")
	if err != nil {
		t.Fatal(err)
	}
	shims := t.TempDir()
	for name, real := range map[string]string{"bridge": testbin.Bridge(t), "python": python} {
		proc := map[string]string{"bridge": "task", "python": "child"}[name]
		body := "#!/bin/sh\nexec " + shellQuote(c.Wrap(proc, real)) + ` "$@"` + "\n"
		if err := os.WriteFile(filepath.Join(shims, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	train := filepath.Join(t.TempDir(), "train.py")
	if err := os.WriteFile(train, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	env, experiment := c.MLflowEnv(t, srv)
	env = append(env, "PATH="+shims+":"+os.Getenv("PATH"))
	return Spec{Script: script, Cmd: append([]string{train}, args...), Env: env}, experiment
}

// deploy/sbatch.sh on every node with a trivial training script: one run
// for the job, handed to every node's train.py with its node id, every
// node's series in it, FINISHED.
func TestDeploySbatch(t *testing.T) {
	c := Shared(t)
	srv := mlflowtest.SharedPostgres(t)
	spec, experiment := deploySpec(t, c, srv, `import os, sys, time
print("train.py", sys.argv[1:], "rank", os.environ["SLURM_PROCID"], "run", os.environ.get("MLFLOW_RUN_ID"))
time.sleep(2)
`, "--epochs", "1")
	j := c.Sbatch(t, spec)
	RequireExits(t, j, 0, "task", "child")
	if j.Exit != 0 {
		t.Fatalf("batch job %s exited %d:\n%s", j.ID, j.Exit, j.Output)
	}
	requireLauncherFacts(t, c, j.ID, j.Tasks, 1)
	run, own := JobRun(t, srv, len(c.Nodes), j.Tasks, experiment)
	requireFinished(t, run, own, len(c.Nodes))
	for _, task := range j.Tasks {
		child := task.Procs["child"]
		want := fmt.Sprintf("train.py ['--epochs', '1'] rank %d run %s", task.Rank, run.Info.RunID)
		if !strings.Contains(child.Stdout, want) {
			t.Errorf("rank %d on %s printed %q, want %q", task.Rank, child.Host, child.Stdout, want)
		}
	}
}

// deploy/sbatch.sh requeued while it trains (scontrol requeue, as after a
// node failure or a preemption): the second attempt's bridges rejoin the
// first attempt's run, and each node's attempt is tagged on it. Every
// node recorded the first attempt's end (the requeue's SIGTERM), so the
// run stays KILLED (or FAILED): a status never goes from worse back to
// better.
func TestDeploySbatchRequeue(t *testing.T) {
	c := Shared(t)
	srv := mlflowtest.SharedPostgres(t)
	// The first attempt trains until it is requeued; the second ends.
	spec, experiment := deploySpec(t, c, srv, `import os, time
if "SLURM_RESTART_COUNT" not in os.environ:
    time.sleep(600)
`)
	b := c.Submit(t, spec)
	b.WaitProc(t, 0, len(c.Nodes), "child") // every node's bridge has found the run
	b.Requeue(t)
	j := b.Wait(t)
	if j.Exit != 0 {
		t.Fatalf("batch job %s exited %d:\n%s", j.ID, j.Exit, j.Output)
	}
	again := j.Attempt(1)
	RequireExits(t, Job{ID: j.ID, Tasks: again, Output: j.Output}, 0, "task", "child")
	requireLauncherFacts(t, c, j.ID, again, 1)
	if len(again) == len(j.Tasks) {
		t.Fatalf("job %s recorded no first attempt", j.ID)
	}

	run, _ := JobRun(t, srv, len(c.Nodes), j.Tasks, experiment) // both attempts' children got the run, each node one run
	for n := range c.Nodes {
		id := fmt.Sprintf("node-%d", n)
		if l := tracker.ParseLine(run.Tags[tracker.StateTag(id, "")]); l["attempt"] != "1" || l["status"] != "FINISHED" {
			t.Errorf("run %s: %s's line %v; want the requeued attempt 1, FINISHED", run.Info.RunID, id, l)
		}
		// The child died of the SIGTERM, or (here task.sh wrapping
		// python) lived to exit 143: a stop from outside either way.
		if failed := run.Tags[fmt.Sprintf("bridge.failed.node-%d", n)]; !strings.HasSuffix(failed, ": exit 143, attempt 0") {
			t.Errorf("run %s: bridge.failed.node-%d=%q, want the first attempt's end, exit 143", run.Info.RunID, n, failed)
		}
	}
	late := 0
	for _, task := range j.Tasks {
		if task.Attempt == 0 && strings.Contains(task.Launched().Stderr, "the signal that ended the child reached bridge too") {
			late++
		}
	}
	t.Logf("first attempt: %d of %d bridges took Slurm's SIGTERM after their child had died of it", late, len(c.Nodes))
	if t.Failed() {
		for _, task := range j.Tasks {
			t.Logf("attempt %d, rank %d: bridge said:\n%s", task.Attempt, task.Rank, task.Launched().Stderr)
		}
	}
	if run.Info.Status != "KILLED" && run.Info.Status != "FAILED" {
		t.Errorf("run %s is %s, want the first attempt's KILLED (or FAILED)", run.Info.RunID, run.Info.Status)
	}
}
