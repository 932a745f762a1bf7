package main

// What the end of a job gives a user, through the real binary against a
// real MLflow server: the end-of-run table of a clean run and of a real
// OOM kill in a real v1 memory cgroup, and `bridge report` of that run.

import (
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

	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
)

// tableOf is the end-of-run table in bridge's stderr: its lines from the
// title on, the blank line before it left out.
func tableOf(t *testing.T, stderr string) []string {
	t.Helper()
	i := strings.Index(stderr, "bridge: end of run\n")
	if i < 0 {
		t.Fatalf("no end-of-run table:\n%s", stderr)
	}
	return strings.Split(strings.TrimRight(stderr[i:], "\n"), "\n")
}

// mlflowLink is what MLflow's own client prints when run ends
// (MlflowClient's _log_url).
func mlflowLink(t *testing.T, srv *mlflowtest.Server, run string) []string {
	t.Helper()
	cmd := exec.Command(mlflowtest.Python(t), "-c", `import sys
from mlflow.tracking import MlflowClient
MlflowClient(tracking_uri=sys.argv[1])._tracking_client._log_url(sys.argv[2])`, srv.URL, run)
	cmd.Env = cleanEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("MLflow's client: %v\n%s", err, out)
	}
	return strings.Split(strings.TrimRight(string(out), "\n"), "\n")
}

// waitForSamples is Python that waits, within 2 minutes, until the spool
// holds n more samples than when it started: then bridge has walked the
// child's tree since it became python, whatever the machine's speed.
func waitForSamples(n int) string {
	return fmt.Sprintf(`import os, time
def samples():
    with open(os.environ["BRIDGE_SPOOL"]) as f:
        return sum('"type":"sample"' in line for line in f)
start, deadline = samples(), time.time() + 120
while samples() < start + %d and time.time() < deadline:
    time.sleep(0.02)
`, n)
}

// A clean run's table starts with the run's link, as MLflow's client
// prints it, then how long the job ran and how it ended; no row is
// without something to say (no figure "not sampled" of a job sampled
// throughout, no energy of a machine without an energy source, no OOM
// count of none, no exit reason beside exit status 0).
func TestCleanRunTableStartsWithTheURL(t *testing.T) {
	srv := mlflowtest.Shared(t)
	j := newJob(t, srv.URL, "--interval=200ms", "--", "python3", "-c", waitForSamples(3))
	if code := j.run(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
	}
	table := tableOf(t, j.err.String())
	link := mlflowLink(t, srv, j.runID(t))
	if len(table) < 6 || table[1] != "  "+link[0] || table[2] != "  "+link[1] {
		t.Fatalf("the table does not start with MLflow's link %q:\n%s", link, strings.Join(table, "\n"))
	}
	if !regexp.MustCompile(`^  duration +\d+\.\d s, from \d\d:\d\d:\d\d to \d\d:\d\d:\d\d UTC on \d{4}-\d\d-\d\d; \d+ samples taken$`).MatchString(table[3]) ||
		!regexp.MustCompile(`^  exit status +0$`).MatchString(table[4]) {
		t.Errorf("the duration and the exit status do not follow the link:\n%s", strings.Join(table, "\n"))
	}
	row := regexp.MustCompile(`^  (\S.*?)  +(.*)$`)
	for _, l := range table[3:] {
		m := row.FindStringSubmatch(l)
		if m == nil || strings.TrimSpace(m[2]) == "" {
			t.Errorf("row %q has nothing to say", l)
			continue
		}
		switch what, v := m[1], m[2]; {
		case strings.Contains(v, "not sampled") || what == "not sampled":
			t.Errorf("row %q: a figure not sampled in a job sampled throughout", l)
		case what == "energy" && !strings.Contains(v, " J "):
			t.Errorf("row %q: energy without a measurement", l)
		case what == "OOM kills", what == "exit reason":
			t.Errorf("row %q: nothing to say in a clean run", l)
		}
	}
	t.Logf("the table:\n%s", strings.Join(table, "\n"))
}

// oomChild prints its pid, waits for two samples of its own (bridge walks
// its tree as python), then allocates past any limit.
var oomChild = `import os
print(os.getpid(), flush=True)
` + waitForSamples(2) + `b = []
while True:
    b.append(b"x" * 5_000_000)
    time.sleep(0.01)
`

// A real OOM kill in a real v1 memory cgroup: the table names the process
// the kernel killed and its RSS, as the kernel's log gives them, the
// job's start time and duration, and the process tree's peak; the run's
// tags and `bridge report` carry them, the single run's report has no
// multi-node footer, and its JSON writes "->" as it is.
func TestOOMTableNamesTheKilledProcess(t *testing.T) {
	if f, err := os.Open("/dev/kmsg"); err != nil {
		t.Skipf("this test reads the kernel's log, as bridge does, and needs /dev/kmsg readable: %v (TestOOMTableGuessesWithoutTheKernelLog covers a machine without it)", err)
	} else {
		f.Close()
	}
	srv := mlflowtest.Shared(t)
	g := cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 200 * mib})
	j := newJob(t, srv.URL, "--interval=200ms", "--", "python3", "-c", oomChild).inCgroup(g)
	if code := j.run(t); code != 137 {
		t.Fatalf("exit %d, want 137; stderr:\n%s", code, &j.err)
	}
	pid := strings.TrimSpace(j.out.String())
	table := strings.Join(tableOf(t, j.err.String()), "\n")
	run := srv.GetRun(t, j.runID(t))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^  🏃 View run python3 at: http://\S+/#/experiments/\d+/runs/` + run.Info.RunID + `$`),
		regexp.MustCompile(`(?m)^  duration +\d+\.\d s, from \d\d:\d\d:\d\d to \d\d:\d\d:\d\d UTC on \d{4}-\d\d-\d\d; \d+ samples taken$`),
		regexp.MustCompile(`(?m)^  exit status +137 \(killed by SIGKILL\)$`),
		regexp.MustCompile(`(?m)^  exit reason +cgroup_oom_kill: killed by the kernel's OOM killer .*; it killed python3 \(pid ` + pid + `, RSS \d+\.\d MB\): oom_kill 0 -> 1`),
		regexp.MustCompile(`(?m)^  peak process-tree RSS +\d+\.\d MB, the command's processes together, the highest of \d+ samples?$`),
		regexp.MustCompile(`(?m)^  OOM kills +1 process killed by the kernel's OOM killer during the job$`),
	} {
		if !want.MatchString(table) {
			t.Errorf("the table does not match %s:\n%s", want, table)
		}
	}
	if strings.Contains(table, "killed process") {
		t.Errorf("the kernel's log named the process, yet the table says it did not:\n%s", table)
	}
	if m := regexp.MustCompile(`it killed python3 \(pid \d+, RSS (\d+\.\d) MB\)`).FindStringSubmatch(table); m != nil {
		if rss, _ := strconv.ParseFloat(m[1], 64); rss < 150 {
			t.Errorf("the killed process's RSS, %.1f MB, is not what the kernel killed at a 209.7 MB limit:\n%s", rss, table)
		}
	}
	ev := run.Tags["bridge.exit_evidence"]
	for _, want := range []string{"killed_process=python3", "killed_pid=" + pid, "killed_named_by=kernel log"} {
		if !strings.Contains(ev, want) {
			t.Errorf("bridge.exit_evidence lacks %q: %s", want, ev)
		}
	}
	started, err := time.Parse(time.RFC3339Nano, run.Tags["bridge.command_started"])
	took, err2 := strconv.ParseFloat(run.Tags["bridge.command_duration_seconds"], 64)
	treePeak, err3 := strconv.ParseFloat(run.Tags["bridge.peak_process_tree_rss_megabytes"], 64)
	if err != nil || err2 != nil || err3 != nil || started.Before(time.UnixMilli(run.Info.StartTime).Add(-time.Minute)) || took <= 0 || treePeak <= 0 {
		t.Errorf("tags: started %q, duration %q, tree peak %q", run.Tags["bridge.command_started"], run.Tags["bridge.command_duration_seconds"],
			run.Tags["bridge.peak_process_tree_rss_megabytes"])
	}

	// bridge report, as text, Markdown and JSON.
	code, text, errs := reportOut(t, srv.URL, run.Info.RunID)
	if code != 0 {
		t.Fatalf("bridge report: exit %d\n%s", code, errs)
	}
	for _, want := range []string{"started (UTC)", "ran", "process tree", fmt.Sprintf("peak RSS %.1f MB", treePeak),
		"it killed python3 (pid " + pid + ", RSS "} {
		if !strings.Contains(text, want) {
			t.Errorf("bridge report lacks %q:\n%s", want, text)
		}
	}
	_, md, _ := reportOut(t, srv.URL, run.Info.RunID, "--markdown")
	for what, out := range map[string]string{"text": text, "markdown": md} {
		if strings.Contains(out, "Each node's end time") || strings.Contains(out, "Differs from the job") {
			t.Errorf("the %s report of a single run carries the multi-node footer:\n%s", what, out)
		}
	}
	_, js, _ := reportOut(t, srv.URL, run.Info.RunID, "--json")
	if strings.Contains(js, `\u003e`) || strings.Contains(js, `\u003c`) || strings.Contains(js, `\u0026`) || !strings.Contains(js, "oom_kill 0 -> 1") {
		t.Errorf("bridge report --json escapes text as HTML, or lacks the evidence's \"0 -> 1\":\n%s", js)
	}
	var rep struct {
		Nodes []struct {
			Started  string   `json:"started"`
			Duration *float64 `json:"duration_seconds"`
			Tree     *float64 `json:"process_tree_peak_rss_megabytes"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(js), &rep); err != nil || len(rep.Nodes) != 1 || rep.Nodes[0].Started == "" ||
		rep.Nodes[0].Duration == nil || rep.Nodes[0].Tree == nil || *rep.Nodes[0].Tree != treePeak {
		t.Errorf("bridge report --json (%v):\n%s", err, js)
	}
	t.Logf("the table:\n%s\nbridge report:\n%s", table, text)
}

// Where the kernel's log cannot be read (a container without /dev/kmsg:
// here a regular file covers it, in a mount namespace of bridge's own),
// the OOM verdict names the largest of the job's processes in the last
// sample that found them alive (never a zombie's RSS of 0), says that it
// is a guess, and why the kernel did not name it.
func TestOOMTableGuessesWithoutTheKernelLog(t *testing.T) {
	srv := mlflowtest.Shared(t)
	g := cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 200 * mib})
	j := newJob(t, srv.URL, "--interval=200ms", "--", "python3", "-c", oomChild).inCgroup(g)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skipf("this test hides /dev/kmsg in a mount namespace and needs unshare(1): %v", err)
	}
	cover := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(cover, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	j.cmd.Args = append([]string{"unshare", "--mount", "--propagation", "private", "sh", "-c", `mount --bind "$0" /dev/kmsg && exec "$@"`, cover}, j.cmd.Args...)
	j.cmd.Path = unshare
	if out, err := exec.Command(unshare, "--mount", "--propagation", "private", "mount", "--bind", cover, "/dev/kmsg").CombinedOutput(); err != nil {
		t.Skipf("this test needs a mount namespace of its own (root, CAP_SYS_ADMIN): %v: %s", err, out)
	}
	if code := j.run(t); code != 137 {
		t.Fatalf("exit %d, want 137; stderr:\n%s", code, &j.err)
	}
	pid := strings.TrimSpace(j.out.String())
	table := strings.Join(tableOf(t, j.err.String()), "\n")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^  exit reason +cgroup_oom_kill: .*; it killed most likely python3 \(pid ` + pid + `\), the largest of the job's processes in the last sample, RSS [1-9]\d*\.\d MB at \d\d:\d\d:\d\d UTC: oom_kill 0 -> 1`),
		regexp.MustCompile("(?m)^  killed process +the kernel's log could not be read: /dev/kmsg: not the kernel's log device \\(a regular file\\); " +
			"bridge names instead the largest of the job's processes in the last sample, which the OOM killer takes first: `dmesg` on the node names the one it killed$"),
		regexp.MustCompile(`(?m)^  duration +\d+\.\d s, from `),
		regexp.MustCompile(`(?m)^  peak process-tree RSS +\d+\.\d MB`),
	} {
		if !want.MatchString(table) {
			t.Errorf("the table does not match %s:\n%s", want, table)
		}
	}
	ev := srv.GetRun(t, j.runID(t)).Tags["bridge.exit_evidence"]
	for _, want := range []string{"killed_process=python3", "killed_named_by=largest process in the last sample", "kernel_log=the kernel's log could not be read"} {
		if !strings.Contains(ev, want) {
			t.Errorf("bridge.exit_evidence lacks %q: %s", want, ev)
		}
	}
	t.Logf("the table:\n%s", table)
}
