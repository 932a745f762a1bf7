package slurm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/internal/mlflowtest"
	"github.com/bridge-dev/bridge/internal/testbin"
)

// deploy/sbatch.sh as a user submits it, on every node, with a trivial
// training script. `bridge` and `python` on the job's PATH are shims that
// run the real ones under task.sh, so that each node's bridge and training
// process are recorded.
func TestDeploySbatch(t *testing.T) {
	c := Shared(t)
	srv := mlflowtest.Shared(t)
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
	code := `import os, sys, time
print("train.py", sys.argv[1:], "rank", os.environ["SLURM_PROCID"], "run", os.environ.get("MLFLOW_RUN_ID"))
time.sleep(2)
`
	if err := os.WriteFile(train, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}

	env, experiment := c.MLflowEnv(t, srv)
	env = append(env, "PATH="+shims+":"+os.Getenv("PATH"))
	j := c.Sbatch(t, Spec{Script: script, Cmd: []string{train, "--epochs", "1"}, Env: env})
	RequireExits(t, j, 0, "task", "child")
	if j.Exit != 0 {
		t.Fatalf("batch job %s exited %d:\n%s", j.ID, j.Exit, j.Output)
	}
	requireLauncherFacts(t, c, j.ID, j.Tasks, 1)
	handed := ChildRuns(t, srv, j, experiment)
	for _, task := range j.Tasks {
		child := task.Procs["child"]
		want := fmt.Sprintf("train.py ['--epochs', '1'] rank %d run %s", task.Rank, child.Env["MLFLOW_RUN_ID"])
		if !strings.Contains(child.Stdout, want) {
			t.Errorf("rank %d on %s printed %q, want %q", task.Rank, child.Host, child.Stdout, want)
		}
	}
	t.Logf("deploy/sbatch.sh on %d nodes: %d MLflow run(s)", len(c.Nodes), len(handed))
}
