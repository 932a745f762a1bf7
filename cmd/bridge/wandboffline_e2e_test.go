package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
)

// offlineChild is a training script with wandb: it writes the id of its
// run to run_id and logs three steps.
const offlineChild = `import wandb
run = wandb.init()
open("run_id", "w").write(run.id)
for i in range(3):
    wandb.log({"loss": 1.0 / (i + 1)})
wandb.finish()
`

// With WANDB_MODE=offline bridge gives the child a run id (WANDB_RUN_ID),
// keeps its samples in the spool and says, at the end, that the child's
// upload and bridge's land in that run. `bridge sync --run-id` refused
// while WANDB_MODE is still offline names WANDB_MODE. Then, online, the
// real `wandb sync` of the child's offline run and `bridge sync` of the
// spool write one run on the W&B test server: the child's history and
// summary, bridge's system metrics and the job's figures.
func TestWandbOfflineThenSync(t *testing.T) {
	t.Parallel()
	py := mlflowtest.Python(t) // a python with wandb 0.31 (.venv)
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: wbKey})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "train.py"), []byte(offlineChild), 0o644); err != nil {
		t.Fatal(err)
	}
	spool := filepath.Join(dir, "s.jsonl")
	env := func(mode string) []string {
		return append(cleanEnv(srv.ClientEnv(dir, "")...), "WANDB_PROJECT=offproj", "WANDB_MODE="+mode)
	}

	job := exec.Command(testbin.Bridge(t), "--interval=200ms", "--spool="+spool, "--", py, "train.py")
	job.Dir, job.Env = dir, env("offline")
	out, err := job.CombinedOutput()
	if code := exitCode(t, err); code != 0 {
		t.Fatalf("bridge with WANDB_MODE=offline: exit %d\n%s", code, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "run_id"))
	if err != nil {
		t.Fatalf("the child wrote no run id: %v\n%s", err, out)
	}
	id := string(b)
	_, _, attempts, err := spooltest.ReadFile(spool)
	if err != nil || len(attempts) == 0 || attempts[0].Start.Runs["wandb"] != id {
		t.Fatalf("the spool records W&B run %q, the child's is %q (%v)", attempts[0].Start.Runs["wandb"], id, err)
	}
	if want := "offline (WANDB_MODE=offline): the child's run " + id + " is on disk; upload it with wandb sync, then bridge's samples with bridge sync"; !strings.Contains(string(out), want) {
		t.Errorf("the end-of-run table does not say where the run is and how both land in it (want %q):\n%s", want, out)
	}
	if len(srv.Runs()) != 0 {
		t.Fatalf("an offline job reached the server: %d runs", len(srv.Runs()))
	}

	refused := exec.Command(testbin.Bridge(t), "sync", "--run-id", id, spool)
	refused.Dir, refused.Env = dir, env("offline")
	out, err = refused.CombinedOutput()
	if code := exitCode(t, err); code != 2 || !strings.Contains(string(out), "WANDB_MODE=offline") || strings.Contains(string(out), "WANDB_PROJECT is set") {
		t.Errorf("bridge sync --run-id with WANDB_MODE=offline: exit %d, want 2 naming WANDB_MODE, not what turns W&B on:\n%s", code, out)
	}

	runDirs, _ := filepath.Glob(filepath.Join(dir, "wandb", "offline-run-*-"+id))
	if len(runDirs) != 1 {
		t.Fatalf("the child's offline run directory for %s: %v", id, runDirs)
	}
	wsync := exec.Command(filepath.Join(filepath.Dir(py), "wandb"), "sync", runDirs[0])
	wsync.Dir, wsync.Env = dir, env("online")
	if out, err := wsync.CombinedOutput(); err != nil {
		t.Fatalf("wandb sync of the child's run: %v\n%s", err, out)
	}
	bsync := exec.Command(testbin.Bridge(t), "sync", spool)
	bsync.Dir, bsync.Env = dir, env("online")
	if out, err := bsync.CombinedOutput(); exitCode(t, err) != 0 {
		t.Fatalf("bridge sync after wandb sync:\n%s", out)
	}

	runs := srv.Runs()
	if len(runs) != 1 || runs[0].Name != id {
		t.Fatalf("runs on the server: %d (want one, %s)", len(runs), id)
	}
	run := runs[0]
	if h := run.File(wandbserver.Primary, wandbserver.HistoryFile); len(h.Lines) != 3 {
		t.Errorf("the child's history in run %s: %d lines, want 3", id, len(h.Lines))
	}
	ours := 0
	for _, w := range run.Writers {
		if w.ID == wandbserver.Primary {
			continue
		}
		for _, l := range w.Files[wandbserver.EventsFile].Lines {
			if strings.Contains(l.Content, `"system.container_`) || strings.Contains(l.Content, `"system.node_`) {
				ours++
			}
		}
	}
	if ss, _, _, _ := spooltest.ReadFile(spool); ours == 0 || ours != len(ss) {
		t.Errorf("bridge's lines in run %s: %d, the spool holds %d samples", id, ours, len(ss))
	}
	sum := run.Summary()
	if _, ok := sum["bridge/process_memory_peak_rss_megabytes"]; !ok || sum["loss"] == nil {
		t.Errorf("run %s's summary %v: want the child's loss and the job's figures (bridge/...)", id, sum)
	}
}
