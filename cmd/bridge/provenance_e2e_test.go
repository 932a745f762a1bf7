package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/testbin"
)

// provenanceScript starts a run with MLflow's own client, as a training
// script does: alone it creates the run, under bridge it resumes bridge's.
const provenanceScript = `import mlflow
with mlflow.start_run() as run:
    mlflow.log_metric("loss", 0.5)
`

// provenanceTags are the context tags MLflow's client sets for a script
// (mlflow/tracking/context: default_context.py, git_context.py).
var provenanceTags = []string{"mlflow.user", "mlflow.source.name", "mlflow.source.type",
	"mlflow.source.git.commit", "mlflow.source.git.branch", "mlflow.source.git.repoURL"}

// gitRepoWith makes a git repository in a new directory holding files, with
// one commit on branch "experiment" and a remote whose URL carries a
// token: what a training repository cloned over HTTPS with a token looks
// like.
func gitRepoWith(t *testing.T, files map[string]string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: this test makes a repository with it")
	}
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
			"GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("init", "-q", "-b", "experiment")
	run("remote", "add", "origin", "https://trainer:ghp_s3cretT0ken@git.example.com/lab/models.git")
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("add", ".")
	run("commit", "-q", "-m", "train")
	return dir
}

// In a git repository, `bridge -- python train.py` gives the run the
// provenance MLflow's own client gives `python train.py` alone: the user,
// the source's name and type, the git commit, branch and repository URL
// (its token removed). The same script runs both ways against a real
// server, and the tags are compared with what the client set.
func TestProvenanceAsMLflowClient(t *testing.T) {
	t.Parallel()
	srv := mlflowtest.Shared(t)
	py := mlflowtest.Python(t)
	dir := gitRepoWith(t, map[string]string{"train.py": provenanceScript})
	exp := "bridge-e2e-provenance"
	env := cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp, "LOGNAME=trainer", "USER=someone-else")

	alone := exec.Command(py, "train.py")
	alone.Dir, alone.Env = dir, env
	if out, err := alone.CombinedOutput(); err != nil {
		t.Fatalf("python train.py with MLflow's client: %v\n%s", err, out)
	}
	withBridge := exec.Command(testbin.Bridge(t), "--interval=200ms", "--", py, "train.py")
	withBridge.Dir, withBridge.Env = dir, append(env, "BRIDGE_SPOOL="+filepath.Join(t.TempDir(), "s.jsonl"))
	if out, err := withBridge.CombinedOutput(); exitCode(t, err) != 0 {
		t.Fatalf("bridge -- python train.py:\n%s", out)
	}

	runs := srv.SearchRuns(t, srv.ExperimentID(t, exp), "", "ALL")
	var client, bridge *mlflowtest.Run
	for i := range runs {
		if runs[i].Tags["bridge.command"] != "" {
			bridge = &runs[i]
		} else {
			client = &runs[i]
		}
	}
	if len(runs) != 2 || client == nil || bridge == nil {
		t.Fatalf("want one run made by MLflow's client and one by bridge, got %d runs", len(runs))
	}
	for _, k := range provenanceTags {
		if client.Tags[k] == "" {
			t.Fatalf("MLflow's client set no %s: the comparison needs it (tags %v)", k, client.Tags)
		}
		if bridge.Tags[k] != client.Tags[k] {
			t.Errorf("%s: bridge's run has %q, MLflow's client sets %q", k, bridge.Tags[k], client.Tags[k])
		}
	}
	if strings.Contains(bridge.Tags["mlflow.source.git.repoURL"], "s3cret") {
		t.Errorf("the repository URL keeps its token: %q", bridge.Tags["mlflow.source.git.repoURL"])
	}
	if bridge.Info.RunName != "train.py" {
		t.Errorf("bridge's run is named %q, want train.py", bridge.Info.RunName)
	}
}
