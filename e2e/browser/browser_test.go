// Package browser checks what a user sees: the real bridge binary runs a
// small training script (testdata/train.py, which logs its own loss through
// the mlflow client) inside a real cgroup with a 1 GiB memory limit and a
// 1.5-CPU quota, and the MLflow UI, served by a real `mlflow server`, shows
// bridge's container_ and node_ series as charts on the run's System metrics
// tab next to the script's own metrics on the Model metrics tab. Headless
// Chromium (Debian's `chromium`) is driven by playwright-core (npm ci in
// this directory); the test skips when either, node or BRIDGE_TEST_PYTHON
// is missing. Where no cgroup of the test's own can be made (not root, not
// cgroup v1) it runs without limits and says so.
//
// BRIDGE_UPDATE_SCREENSHOT=1 copies the screenshot to
// docs/mlflow-system-metrics.png (only from a run inside the cgroup, so
// that the picture shows a limit):
//
//	BRIDGE_TEST_PYTHON=$PWD/.venv/bin/python BRIDGE_UPDATE_SCREENSHOT=1 \
//	  go test ./e2e/browser -run TestSystemMetricsTab -v
package browser

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/metrics/cgroup"
)

const (
	chromiumPath = "/usr/bin/chromium"
	experiment   = "bridge-e2e-browser" // one experiment for every run of this test
	runName      = "bridge-ui-demo"
	trainSteps   = 8  // train.py's TRAIN_STEPS
	trainStepMB  = 75 // train.py's TRAIN_STEP_MB: MiB added per step, 600 MiB in all
)

// demoLimits are those of a small training pod: 1 GiB, 1.5 CPUs.
var demoLimits = cgrouptest.Limits{MemoryBytes: 1 << 30, QuotaUs: 150000, PeriodUs: 100000}

func TestMain(m *testing.M) { os.Exit(mlflowtest.Main(m)) }

// nodeJS returns node's path, or skips the test saying what is missing
// to drive Chromium.
func nodeJS(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the browser test drives Chromium with playwright-core; install Node.js, then run scripts/test.sh (the README's test command)")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("%s not found: install Debian's chromium (apt-get install -y chromium) to run the browser test; scripts/test.sh installs it when run as root", chromiumPath)
	}
	if _, err := os.Stat("node_modules/playwright-core"); err != nil {
		t.Skip("e2e/browser/node_modules is missing: run `npm ci` in e2e/browser, or scripts/test.sh which does, to run the browser test")
	}
	return node
}

func TestSystemMetricsTab(t *testing.T) {
	node := nodeJS(t)
	d := demo{node: node, python: mlflowtest.Python(t)}
	d.srv = mlflowtest.Shared(t)
	d.bridge = testbin.Bridge(t)

	// cgrouptest skips the test it is given when it cannot make a group;
	// a subtest confines that skip, and the demo then runs without limits.
	inGroup := false
	t.Run("cgroup", func(t *testing.T) {
		g := cgrouptest.NewV1(t, demoLimits)
		inGroup = true
		t.Logf("running bridge inside %v (memory limit %d bytes, CPU quota %d/%d us)",
			g.Dirs(), demoLimits.MemoryBytes, demoLimits.QuotaUs, demoLimits.PeriodUs)
		d.check(t, g)
	})
	if !inGroup {
		t.Log("no cgroup of the test's own could be made (see the skipped subtest): running bridge in the test's cgroup, without the 1 GiB limit and 1.5-CPU quota; the limit chart is not expected")
		d.check(t, nil)
	}
}

type demo struct {
	node, python, bridge string
	srv                  *mlflowtest.Server
}

// check runs train.py under bridge (inside g when g is not nil), then opens
// the run in the browser and checks the charts.
func (d demo) check(t *testing.T, g *cgrouptest.Group) {
	dir := t.TempDir()
	spoolPath := filepath.Join(dir, "spool.jsonl")
	train, err := filepath.Abs(filepath.Join("testdata", "train.py"))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--interval", "1s", "--run-name", runName, "--", d.python, train}
	// A hang guard, not a timing check.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	if g != nil {
		// The shell joins the group and execs bridge, which starts the
		// script inside it: both are charged to the group, as in a pod.
		cmd = exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", g.ShellEnter() + `exec "$0" "$@"`, d.bridge}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, d.bridge, args...)
	}
	cmd.Dir = dir
	cmd.Env = append(testbin.CleanEnv(),
		"BRIDGE_SPOOL="+spoolPath,
		"MLFLOW_TRACKING_URI="+d.srv.URL,
		"MLFLOW_EXPERIMENT_NAME="+experiment,
		fmt.Sprintf("TRAIN_STEPS=%d", trainSteps),
		fmt.Sprintf("TRAIN_STEP_MB=%d", trainStepMB),
	)
	// Its own process group, killed at cleanup (before the group's removal,
	// which was registered earlier), so nothing is left inside.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	if code := testbin.ExitCode(t, cmd.Wait()); code != 0 {
		t.Fatalf("bridge exited %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	t.Logf("bridge and train.py: exit 0\n%s", strings.TrimSpace(stdout.String()))

	samples, _, attempts, err := spooltest.ReadFile(spoolPath)
	if err != nil || len(attempts) == 0 {
		t.Fatalf("reading spool %s: %v (%d attempts)\nstderr:\n%s", spoolPath, err, len(attempts), &stderr)
	}
	runID := attempts[0].Start.Runs["mlflow"]
	if runID == "" {
		t.Fatalf("no MLflow run in the spool; stderr:\n%s", &stderr)
	}
	run := d.srv.GetRun(t, runID)
	if run.Info.Status != "FINISHED" || run.Info.RunName != runName {
		t.Fatalf("run %+v, want FINISHED named %s", run.Info, runName)
	}
	if !strings.Contains(stdout.String(), "train.py: run "+runID) {
		t.Fatalf("train.py logged into another run than bridge's %s:\n%s", runID, &stdout)
	}

	expect := []string{
		"container_memory_working_set_megabytes",
		"container_memory_limit_megabytes",
		"container_cpu_utilization_percentage",
		"node_memory_usage_megabytes",
	}
	if g != nil {
		// The limit is the one the test set, and the group's high-water mark
		// covers what train.py held (the final sample is taken after it exits).
		limit := d.srv.History(t, runID, "system/container_memory_limit_megabytes")
		wantLimit := float64(demoLimits.MemoryBytes) / 1e6
		if len(limit) == 0 || limit[len(limit)-1].Value != wantLimit {
			t.Errorf("container_memory_limit_megabytes in MLflow = %+v, want %v (1 GiB)", limit, wantLimit)
		}
		peak := 0.0
		for _, s := range samples {
			if v, ok := s.Value("container_memory_peak_megabytes"); ok && v > peak {
				peak = v
			}
		}
		if held := float64(trainSteps*trainStepMB<<20) / 1e6; peak < held {
			t.Errorf("container_memory_peak_megabytes reached %.1f, less than the %.1f MB train.py held", peak, held)
		}
		t.Logf("%d samples; limit %.1f MB, peak %.1f MB", len(samples), wantLimit, peak)
	} else {
		expect = slices.DeleteFunc(expect, func(n string) bool { return n == "container_memory_limit_megabytes" })
		// In the test's own cgroups, the cpu one may be the host's root,
		// whose CPU bridge does not send as a container's.
		if l, err := cgroup.FindLayout(cgroup.Options{}); err == nil && len(l.AtRoot()) > 0 {
			if at := l.AtRoot(); slices.Contains(at, "cpuacct") || slices.Contains(at, "cpu") && l.Paths()["cpuacct"] == "" {
				expect = slices.DeleteFunc(expect, func(n string) bool { return n == "container_cpu_utilization_percentage" })
			}
		}
	}

	// go test -artifacts keeps the screenshots (and a .failed.png) for a look.
	out := filepath.Join(t.ArtifactDir(), "system-metrics.png")
	screenshot(t, ctx, d.node, out, "mlflow-system-metrics.png", g != nil, "from a run without the cgroup limits",
		"--url", d.srv.URL, "--experiment", run.Info.ExperimentID, "--run", runID,
		"--expect", strings.Join(expect, ","), "--model-expect", "loss")
}

// The job's report as the MLflow UI shows it: three nodes of one job, each
// in cgroups of its own with a memory limit; node-1's child allocates past
// its 200 MiB and the kernel kills it; the test, as the launcher, stops the
// other two. The run's Artifacts tab shows bridge-report.md, whose first
// line names node-1's OOM kill, with a row per node. Where no cgroup can be
// made, node-1's child exits 1 instead, and the report says app_error.
//
// BRIDGE_UPDATE_SCREENSHOT=1 copies the screenshot to
// docs/mlflow-job-report.png (only from a run inside the cgroups):
//
//	BRIDGE_TEST_PYTHON=$PWD/.venv/bin/python BRIDGE_UPDATE_SCREENSHOT=1 \
//	  go test ./e2e/browser -run TestJobReportArtifact -v
func TestJobReportArtifact(t *testing.T) {
	node := nodeJS(t)
	srv := mlflowtest.Shared(t)
	bridge := testbin.Bridge(t)
	// cgrouptest skips the test it is given when it cannot make a group;
	// a subtest confines that skip, and the job then runs without limits.
	inGroups := false
	t.Run("cgroups", func(t *testing.T) {
		var groups []*cgrouptest.Group
		for _, l := range []cgrouptest.Limits{{MemoryBytes: 1 << 30}, {MemoryBytes: 200 << 20}, {MemoryBytes: 1 << 30}} {
			groups = append(groups, cgrouptest.NewV1(t, l))
		}
		inGroups = true
		jobReport(t, node, bridge, srv, groups)
	})
	if !inGroups {
		t.Log("no cgroups of the test's own could be made (see the skipped subtest): the nodes run without limits and node-1's child exits 1")
		jobReport(t, node, bridge, srv, nil)
	}
}

// jobReport runs the job (each node in its group, when groups is not nil)
// and checks its report in the browser.
func jobReport(t *testing.T, node, bridge string, srv *mlflowtest.Server, groups []*cgrouptest.Group) {
	exp := fmt.Sprintf("bridge-e2e-browser-job-%d", time.Now().UnixNano())
	expID := srv.CreateExperimentAt(t, exp, "mlflow-artifacts:/"+exp)
	key := "browser:" + exp
	shared := t.TempDir()
	const run = `touch "$SHARED/$NODE.ready"; while :; do sleep 0.05; done`
	fail := `exit 1`
	if groups != nil {
		fail = `exec python3 -c 'import time
b = []
while True:
    b.append(b"x" * 5_000_000)
    time.sleep(0.01)'`
	}
	fail = `while [ ! -e "$SHARED/node-0.ready" ] || [ ! -e "$SHARED/node-2.ready" ]; do sleep 0.05; done
` + fail
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a hang guard
	defer cancel()
	var cmds []*exec.Cmd
	var stderrs []*bytes.Buffer
	for i, child := range []string{run, fail, run} {
		id := fmt.Sprintf("node-%d", i)
		dir := t.TempDir()
		args := []string{"--interval", "1s", "--run-name", "bridge-job-demo", "--start-timeout", "1m", "--flush-timeout", "1m",
			"--", "/bin/sh", "-c", child}
		var cmd *exec.Cmd
		if groups != nil {
			cmd = exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", groups[i].ShellEnter() + `exec "$0" "$@"`, bridge}, args...)...)
		} else {
			cmd = exec.CommandContext(ctx, bridge, args...)
		}
		cmd.Dir = dir
		cmd.Env = append(testbin.CleanEnv(), "MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp, "TMPDIR="+dir,
			"BRIDGE_JOB_KEY="+key, "BRIDGE_NODE_ID="+id, "BRIDGE_NODES=3", "SHARED="+shared, "NODE="+id)
		cmd.WaitDelay = 10 * time.Second
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		cmds, stderrs = append(cmds, cmd), append(stderrs, &stderr)
	}
	logs := func() string {
		var b strings.Builder
		for i, e := range stderrs {
			fmt.Fprintf(&b, "node-%d:\n%s\n", i, e)
		}
		return b.String()
	}
	wantFail := map[bool]int{true: 137, false: 1}[groups != nil]
	if code := testbin.ExitCode(t, cmds[1].Wait()); code != wantFail {
		t.Fatalf("node-1 exited %d, want %d\n%s", code, wantFail, logs())
	}
	for _, i := range []int{0, 2} {
		_ = cmds[i].Process.Signal(syscall.SIGTERM)
	}
	for _, i := range []int{0, 2} {
		if code := testbin.ExitCode(t, cmds[i].Wait()); code != 143 {
			t.Errorf("node-%d exited %d after SIGTERM, want 143", i, code)
		}
	}
	runs := srv.SearchRuns(t, expID, fmt.Sprintf("tags.`bridge.job_key` = '%s'", key), "ACTIVE_ONLY")
	if len(runs) != 1 {
		t.Fatalf("%d active runs of the job, want 1\n%s", len(runs), logs())
	}
	runID := runs[0].Info.RunID
	reason := map[bool]string{true: "cgroup_oom_kill", false: "app_error"}[groups != nil]
	if md, ok := srv.Artifact(t, runID, "bridge-report.md"); !ok || !strings.Contains(string(md), "**First failure:** node-1: "+reason+" at ") {
		t.Fatalf("the run's bridge-report.md:\n%s\n%s", md, logs())
	}

	out := filepath.Join(t.ArtifactDir(), "job-report.png")
	screenshot(t, ctx, node, out, "mlflow-job-report.png", groups != nil, "from a run without cgroups",
		"--url", srv.URL, "--experiment", expID, "--run", runID,
		"--artifact", "bridge-report.md", "--artifact-expect", "node-1: "+reason+" at ,node-0,node-2")
}

// The run's own note as the MLflow UI shows it: train.py, in a cgroup of a
// small pod's limits, writes the run's note as a person would, then
// trains; bridge (a --run-tick of 1 s, prices set, a CPU package whose
// fixture counter the test raises by 12 J every 250 ms, about 48 W) adds
// its section to the note. The run's Overview page shows the person's note
// and bridge's section rendered (memory and CPU with what the next run
// should ask for, energy per step, cost), and not bridge's marks.
//
// BRIDGE_UPDATE_SCREENSHOT=1 copies the screenshot to
// docs/mlflow-run-note.png (only from a run inside the cgroup):
//
//	BRIDGE_TEST_PYTHON=$PWD/.venv/bin/python BRIDGE_UPDATE_SCREENSHOT=1 \
//	  go test ./e2e/browser -run TestRunNoteOverview -v
func TestRunNoteOverview(t *testing.T) {
	node := nodeJS(t)
	d := demo{node: node, python: mlflowtest.Python(t), srv: mlflowtest.Shared(t), bridge: testbin.Bridge(t)}
	inGroup := false
	t.Run("cgroup", func(t *testing.T) {
		g := cgrouptest.NewV1(t, demoLimits)
		inGroup = true
		d.note(t, g)
	})
	if !inGroup {
		t.Log("no cgroup of the test's own could be made (see the skipped subtest): running bridge without the pod's limits")
		d.note(t, nil)
	}
}

// personsNote is what train.py writes in the run's note first.
const personsNote = "Baseline for the **new tokenizer**: compare with last week's run."

// note runs train.py under bridge (inside g when g is not nil) and checks
// the run's Overview page.
func (d demo) note(t *testing.T, g *cgrouptest.Group) {
	dir := t.TempDir()
	sys := filepath.Join(dir, "sys")
	uj := filepath.Join(sys, "class", "powercap", "intel-rapl:0", "energy_uj")
	for p, v := range map[string]string{
		"class/powercap/intel-rapl/enabled": "1\n", "class/powercap/intel-rapl:0/name": "package-0\n",
		"class/powercap/intel-rapl:0/energy_uj": "1000000\n", "class/powercap/intel-rapl:0/max_energy_range_uj": "262143328850\n",
		"class/powercap/intel-rapl:0/enabled": "1\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(sys, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sys, p), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for e := uint64(1_000_000); ; e += 12_000_000 {
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond):
			}
			os.WriteFile(uj, []byte(fmt.Sprintf("%d\n", e)), 0o644)
		}
	}()
	spoolPath := filepath.Join(dir, "spool.jsonl")
	train, err := filepath.Abs(filepath.Join("testdata", "train.py"))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--interval", "1s", "--run-tick", "1s", "--run-name", "bridge-note-demo", "--sys-root", sys,
		"--price-per-gpu-hour", "2.5", "--price-per-node-hour", "4", "--", d.python, train}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a hang guard
	defer cancel()
	var cmd *exec.Cmd
	if g != nil {
		cmd = exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", g.ShellEnter() + `exec "$0" "$@"`, d.bridge}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, d.bridge, args...)
	}
	cmd.Dir = dir
	cmd.Env = append(testbin.CleanEnv(), "BRIDGE_SPOOL="+spoolPath, "MLFLOW_TRACKING_URI="+d.srv.URL, "MLFLOW_EXPERIMENT_NAME="+experiment,
		fmt.Sprintf("TRAIN_STEPS=%d", trainSteps), "TRAIN_STEP_MB=40", "TRAIN_NOTE="+personsNote)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	if code := testbin.ExitCode(t, cmd.Wait()); code != 0 {
		t.Fatalf("bridge exited %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	_, _, attempts, err := spooltest.ReadFile(spoolPath)
	if err != nil || len(attempts) == 0 || attempts[0].Start.Runs["mlflow"] == "" {
		t.Fatalf("reading spool %s: %v\nstderr:\n%s", spoolPath, err, &stderr)
	}
	runID := attempts[0].Start.Runs["mlflow"]
	run := d.srv.GetRun(t, runID)
	note := run.Tags["mlflow.note.content"]
	if !strings.HasPrefix(note, personsNote+"\n\n<!-- bridge: begin") || strings.Count(note, "<!-- bridge: begin") != 1 ||
		!strings.Contains(note, "J a step") || !strings.Contains(note, "cost ") {
		t.Fatalf("the run's note:\n%s\nstderr:\n%s", note, &stderr)
	}
	t.Logf("the run's note:\n%s", note)

	out := filepath.Join(t.ArtifactDir(), "run-note.png")
	expect := []string{"new tokenizer", "Peak working set", "next run", "J a step", "cost "}
	screenshot(t, ctx, d.node, out, "mlflow-run-note.png", g != nil, "from a run without the cgroup limits",
		"--url", d.srv.URL, "--experiment", run.Info.ExperimentID, "--run", runID,
		"--overview-expect", strings.Join(expect, ","), "--overview-absent", "bridge: begin,bridge: end,**")
}

// screenshot runs shot.mjs with args into out and checks it wrote a PNG;
// with BRIDGE_UPDATE_SCREENSHOT=1 it copies it to docs/<doc>, only from a
// run with the cgroups the picture needs (real: false names what was
// missing, and the update fails).
func screenshot(t *testing.T, ctx context.Context, node, out, doc string, real bool, missing string, args ...string) {
	t.Helper()
	shot := exec.CommandContext(ctx, node, append(append([]string{"shot.mjs"}, args...), "--out", out, "--chromium", chromiumPath)...)
	var output bytes.Buffer
	shot.Stdout, shot.Stderr = &output, &output
	if err := shot.Run(); err != nil {
		t.Fatalf("node shot.mjs: %v\n%s", err, output.String())
	}
	t.Log(strings.TrimSpace(output.String()))
	png, err := os.ReadFile(out)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("no PNG screenshot at %s: %v", out, err)
	}
	if os.Getenv("BRIDGE_UPDATE_SCREENSHOT") != "1" {
		return
	}
	if !real {
		t.Fatalf("BRIDGE_UPDATE_SCREENSHOT=1: not updating docs/%s %s (run as root on a cgroup v1 host)", doc, missing)
	}
	dst := filepath.Join("..", "..", "docs", doc)
	if err := os.WriteFile(dst, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("updated %s", dst)
}
