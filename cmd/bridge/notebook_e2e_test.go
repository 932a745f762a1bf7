package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/testbin"
)

// TestNotebookAttach runs a notebook kernel's session with the real
// MLflow client and bridge_system_metrics (python/, with the binary under
// test) against a real server (testdata/notebook_attach.py):
//   - attach() twice returns the monitor already running, and `bridge
//     attach` for the same process and run names it and does nothing: one
//     monitor, each point once (no step twice);
//   - mlflow.end_run() stops the monitor before it returns, as it stops
//     MLflow's own: bridge has exited, the sample it took as it stopped
//     (after the end) was left out, and nothing was written at its end;
//   - a delivered spool is removed from the notebook's folder;
//   - the run resumed and attached again: the steps continue after the
//     first monitor's.
func TestNotebookAttach(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.Shared(t)
	py := mlflowtest.Python(t)
	dir := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join(wd, "testdata", "notebook_attach.py"), testbin.Bridge(t), srv.URL,
		"bridge-e2e-notebook-"+fmt.Sprint(time.Now().UnixNano()))
	cmd.Dir = dir
	cmd.Env = cleanEnv("PYTHONPATH="+filepath.Join(wd, "..", "..", "python"), "MLFLOW_DISABLE_TELEMETRY=true")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("notebook: %v\nstderr:\n%s", err, &stderr)
	}
	var got struct {
		SameMonitor     bool   `json:"same_monitor"`
		CLICode         int    `json:"cli_code"`
		CLIStderr       string `json:"cli_stderr"`
		RunningAfterEnd bool   `json:"running_after_end_run"`
		Exit            int    `json:"exit"`
		First           struct {
			Status  string            `json:"status"`
			EndTime int64             `json:"end_time"`
			Tags    map[string]string `json:"tags"`
			Points  [][2]int64        `json:"points"`
		} `json:"first"`
		NewMonitor            bool       `json:"new_monitor"`
		SecondRunningAfterEnd bool       `json:"second_running_after_end_run"`
		SecondPoints          [][2]int64 `json:"second_points"`
		SpoolsLeft            []string   `json:"spools_left"`
		Warnings              []string   `json:"warnings"`
	}
	// MLflow prints its own lines ("View run ..."): the script's is the last.
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("notebook printed %q: %v\nstderr:\n%s", &stdout, err, &stderr)
	}
	log := stderr.String()

	if !got.SameMonitor {
		t.Error("attach() twice for the same run started a second monitor")
	}
	if got.CLICode != 0 || !strings.Contains(got.CLIStderr, "is monitored already by bridge attach pid") || !strings.Contains(got.CLIStderr, "this attach does nothing") {
		t.Errorf("`bridge attach` beside attach(): exit %d, stderr:\n%s\nwant exit 0 naming the monitor already running", got.CLICode, got.CLIStderr)
	}
	onePerStep := func(what string, pts [][2]int64) {
		for i, p := range pts {
			if p[0] != int64(i) {
				t.Errorf("%s: steps %v, want each once from 0 (one monitor, each point once)", what, pts)
				return
			}
		}
	}
	onePerStep("first monitor", got.First.Points)

	if got.RunningAfterEnd || got.Exit != 0 {
		t.Errorf("after mlflow.end_run() returned, bridge running=%v exit=%d; want stopped, exit 0", got.RunningAfterEnd, got.Exit)
	}
	if got.First.Status != "FINISHED" {
		t.Errorf("run status %s after end_run(), want FINISHED", got.First.Status)
	}
	for k := range got.First.Tags {
		if k == "bridge.attach_end" {
			t.Errorf("bridge wrote its end tag into a run its owner had ended: %v", got.First.Tags)
		}
	}
	if got.First.Tags["bridge.version"] == "" {
		t.Errorf("the start tags (sent while the run ran) are missing: %v", got.First.Tags)
	}
	// bridge's sample at its stop was taken after the run's end: left out.
	m := regexp.MustCompile(`bridge left out the (\d+) samples? taken after that`).FindStringSubmatch(log)
	if n, _ := strconv.Atoi(m2(m)); n < 1 {
		t.Errorf("bridge does not say it left out the samples taken after the run's end:\n%s", log)
	}
	if len(got.SpoolsLeft) != 0 {
		t.Errorf("delivered spools left in the notebook's folder: %v", got.SpoolsLeft)
	}
	if len(got.Warnings) != 0 {
		t.Errorf("warnings: %q", got.Warnings)
	}

	if !got.NewMonitor || got.SecondRunningAfterEnd {
		t.Errorf("after the run resumed: a new monitor %v, running after the second end_run %v", got.NewMonitor, got.SecondRunningAfterEnd)
	}
	onePerStep("both monitors", got.SecondPoints)
	if len(got.SecondPoints) <= len(got.First.Points) {
		t.Errorf("the resumed run's monitor added no point: %v", got.SecondPoints)
	}
}

func m2(m []string) string {
	if len(m) < 2 {
		return ""
	}
	return m[1]
}

// TestNotebookAttachReload reloads bridge_system_metrics in a notebook's
// session (testdata/notebook_reload.py): attach() after
// importlib.reload() returns the monitor already running; after a fresh
// import (a table of its own) the new `bridge attach` is refused, and
// mlflow.end_run() then stops both without warning that samples did not
// reach the run, since every one did: the running monitor's spool, held
// by its bridge when the refused one stopped, was removed as delivered.
func TestNotebookAttachReload(t *testing.T) {
	t.Parallel()
	srv := mlflowtest.Shared(t)
	py := mlflowtest.Python(t)
	dir := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join(wd, "testdata", "notebook_reload.py"), testbin.Bridge(t), srv.URL,
		"bridge-e2e-notebook-reload-"+fmt.Sprint(time.Now().UnixNano()))
	cmd.Dir = dir
	cmd.Env = cleanEnv("PYTHONPATH="+filepath.Join(wd, "..", "..", "python"), "MLFLOW_DISABLE_TELEMETRY=true")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("notebook: %v\nstderr:\n%s", err, &stderr)
	}
	var got struct {
		SameAfterReload bool     `json:"same_after_reload"`
		RefusedExit     int      `json:"refused_exit"`
		FirstRunning    bool     `json:"first_running"`
		FirstExit       int      `json:"first_exit"`
		Status          string   `json:"status"`
		Steps           []int64  `json:"steps"`
		SpoolsLeft      []string `json:"spools_left"`
		Warnings        []string `json:"warnings"`
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("notebook printed %q: %v\nstderr:\n%s", &stdout, err, &stderr)
	}
	if !got.SameAfterReload {
		t.Error("attach() after importlib.reload() started a second monitor")
	}
	if got.RefusedExit != 0 || !got.FirstRunning || !strings.Contains(stderr.String(), "is monitored already by bridge attach pid") {
		t.Errorf("attach() after a fresh import: exit %d, the first running %v; want it refused, the first running:\n%s",
			got.RefusedExit, got.FirstRunning, &stderr)
	}
	if got.FirstExit != 0 || got.Status != "FINISHED" || len(got.Steps) < 4 {
		t.Errorf("the run: %s, %d points, bridge exit %d", got.Status, len(got.Steps), got.FirstExit)
	}
	for i, s := range got.Steps {
		if s != int64(i) {
			t.Errorf("steps %v, want each once from 0 (one monitor)", got.Steps)
			break
		}
	}
	if len(got.SpoolsLeft) != 0 {
		t.Errorf("delivered spools left in the notebook's folder: %v", got.SpoolsLeft)
	}
	if len(got.Warnings) != 0 {
		t.Errorf("warnings when every sample reached the run: %q", got.Warnings)
	}
}
