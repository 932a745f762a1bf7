package main

// The job's report end to end: real bridges of one job, each node in
// cgroups of its own (as pods are), against a real MLflow server whose
// artifact proxy takes the report; `bridge report` reads it back.
// docs/multinode.md, "The job's report".

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
)

// rjob is a test job whose run keeps artifacts behind the server's proxy.
type rjob struct {
	srv       *mlflowtest.Server
	exp, key  string
	nodes     int
	bridge    string
	sharedDir string // files the children and the test signal each other with
}

func newRJob(t *testing.T, nodes int) *rjob {
	t.Helper()
	srv := mlflowtest.Shared(t)
	name := fmt.Sprintf("bridge-e2e-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
	srv.CreateExperimentAt(t, name, "mlflow-artifacts:/"+name)
	return &rjob{srv: srv, exp: name, key: "e2e:" + name, nodes: nodes, bridge: testbin.Bridge(t), sharedDir: t.TempDir()}
}

// rnode is one node's bridge, started inside its own cgroups.
type rnode struct {
	id     string
	cmd    *exec.Cmd
	stderr syncbuf.Buffer
	code   int
}

// start starts node i's bridge inside g around child (a shell script).
func (j *rjob) start(t *testing.T, i int, g *cgrouptest.Group, child string, extra ...string) *rnode {
	t.Helper()
	n := &rnode{id: fmt.Sprintf("node-%d", i)}
	dir := t.TempDir()
	args := append([]string{"-c", g.ShellEnter() + `exec "$0" "$@"`, j.bridge, "--interval", "500ms",
		"--start-timeout", "1m", "--flush-timeout", "1m"}, extra...)
	n.cmd = exec.Command("/bin/sh", append(args, "--", "/bin/sh", "-c", child)...)
	n.cmd.Dir = dir
	n.cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+j.srv.URL, "MLFLOW_EXPERIMENT_NAME="+j.exp, "TMPDIR="+dir,
		"BRIDGE_JOB_KEY="+j.key, "BRIDGE_NODE_ID="+n.id, "BRIDGE_NODES="+strconv.Itoa(j.nodes),
		"SHARED="+j.sharedDir, "NODE="+n.id)
	n.cmd.Stderr = &n.stderr
	n.cmd.WaitDelay = 10 * time.Second
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.cmd.Process.Kill() // a test that failed early; no-op once waited for
		if t.Failed() {
			t.Logf("%s: bridge's stderr:\n%s", n.id, n.stderr.String())
		}
	})
	return n
}

func (n *rnode) wait(t *testing.T) int {
	t.Helper()
	n.code = exitCode(t, n.cmd.Wait())
	return n.code
}

// run is the job's MLflow run: the one active run of its key.
func (j *rjob) run(t *testing.T) mlflowtest.Run {
	t.Helper()
	runs := j.srv.SearchRuns(t, j.srv.ExperimentID(t, j.exp), fmt.Sprintf("tags.`%s` = '%s'", mlflow.TagJobKey, j.key), "ACTIVE_ONLY")
	if len(runs) != 1 {
		t.Fatalf("%d active runs of the job, want 1", len(runs))
	}
	return runs[0]
}

// report runs `bridge report --json RUN` and decodes what it prints.
func (j *rjob) report(t *testing.T, run string) *report.Report {
	t.Helper()
	cmd := exec.Command(j.bridge, "report", "--json", run)
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI=" + j.srv.URL)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if code := exitCode(t, cmd.Run()); code != 0 {
		t.Fatalf("bridge report exited %d: %s", code, &errb)
	}
	var rep report.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("bridge report --json: %v\n%s", err, &out)
	}
	return &rep
}

func rowsByNode(rep *report.Report) map[string]report.Node {
	m := map[string]report.Node{}
	for _, n := range rep.Nodes {
		m[n.Node] = n
	}
	return m
}

// Three nodes in memory cgroups of their own; node-1's child allocates
// past its 200 MiB limit and the kernel kills it; the test, as the
// launcher, then stops the others with SIGTERM. The run is FAILED, names
// node-1's OOM kill as the first failure, and its report has three rows,
// node-1's peak the kernel's.
func TestJobReportOOMKilledNode(t *testing.T) {
	j := newRJob(t, 3)
	groups := []*cgrouptest.Group{
		cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 1 << 30}),
		cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 200 * mib}),
		cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 1 << 30}),
	}
	// The others say they run; node-1 allocates once they do.
	const run = `touch "$SHARED/$NODE.ready"; while :; do sleep 0.05; done`
	const alloc = `while [ ! -e "$SHARED/node-0.ready" ] || [ ! -e "$SHARED/node-2.ready" ]; do sleep 0.05; done
exec python3 -c 'import time
b = []
while True:
    b.append(b"x" * 5_000_000)
    time.sleep(0.01)'`
	nodes := []*rnode{j.start(t, 0, groups[0], run), j.start(t, 1, groups[1], alloc), j.start(t, 2, groups[2], run)}
	if code := nodes[1].wait(t); code != 137 {
		t.Fatalf("node-1 exited %d, want 137 (OOM-killed)", code)
	}
	for _, i := range []int{0, 2} {
		if err := nodes[i].cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{0, 2} {
		if code := nodes[i].wait(t); code != 143 {
			t.Errorf("%s exited %d after SIGTERM, want 143", nodes[i].id, code)
		}
	}

	r := j.run(t)
	ff := r.Tags[report.TagFirstFailure]
	if r.Info.Status != mlflow.StatusFailed || !strings.HasPrefix(ff, "node-1: cgroup_oom_kill at ") {
		t.Fatalf("run %s, %s=%q; want FAILED, node-1's OOM kill", r.Info.Status, report.TagFirstFailure, ff)
	}
	t.Logf("%s=%s", report.TagFirstFailure, ff)

	rep := j.report(t, r.Info.RunID)
	rows := rowsByNode(rep)
	if len(rep.Nodes) != 3 || rep.Status != mlflow.StatusFailed || rep.FirstFailure == nil || rep.FirstFailure.Node != "node-1" {
		t.Fatalf("bridge report --json:\n%s", rep.JSON())
	}
	limit := 200 * mib / 1e6
	if n := rows["node-1"]; n.Status != mlflow.StatusFailed || n.Reason != "cgroup_oom_kill" || n.PeakWorkingSetMB == nil ||
		n.PeakWorkingSetMB.Float64() < 0.95*limit || !strings.HasPrefix(n.PeakWorkingSetSource, "kernel") || n.MemoryLimitMB == nil {
		t.Errorf("node-1's row: want FAILED, cgroup_oom_kill, the kernel's peak near the %.1f MB limit:\n%s", limit, rep.JSON())
	}
	t.Logf("node-1: peak working set %v MB (%s) of %v MB", deref(rows["node-1"].PeakWorkingSetMB), rows["node-1"].PeakWorkingSetSource, deref(rows["node-1"].MemoryLimitMB))
	for _, id := range []string{"node-0", "node-2"} {
		if n := rows[id]; n.Status != mlflow.StatusKilled || !strings.Contains(n.Consequence, "after node-1's failure") || n.Samples == 0 {
			t.Errorf("%s's row: want KILLED as node-1's consequence, with samples:\n%s", id, rep.JSON())
		}
	}
	// The run's own copy was written again as the stopped nodes ended.
	b, ok := j.srv.Artifact(t, r.Info.RunID, jobrun.ReportJSON)
	var onRun report.Report
	if !ok || json.Unmarshal(b, &onRun) != nil || len(onRun.Nodes) != 3 {
		t.Fatalf("the run's %s: %s", jobrun.ReportJSON, b)
	}
	for _, n := range onRun.Nodes {
		if n.Status == "RUNNING" {
			t.Errorf("the run's report still shows %s running: it was not written again when it ended", n.Node)
		}
	}
	if md, ok := j.srv.Artifact(t, r.Info.RunID, jobrun.ReportMarkdown); !ok || !strings.Contains(string(md), "**First failure:** node-1: cgroup_oom_kill at ") {
		t.Errorf("the run's %s:\n%s", jobrun.ReportMarkdown, md)
	}
}

// A slow node: node-2's child runs under a CPU quota of a tenth of a CPU
// that it keeps hitting. Only node-2 is flagged as differing from the job.
func TestJobReportThrottledNode(t *testing.T) {
	j := newRJob(t, 3)
	// A tenth of a CPU: the busy child hits it in every period it runs,
	// however loaded the machine (it needs 10 ms of CPU a 100 ms period).
	groups := []*cgrouptest.Group{
		cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 1 << 30}),
		cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 1 << 30}),
		cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 1 << 30, QuotaUs: 10000, PeriodUs: 100000}),
	}
	const busy = `exec python3 -c 'import time
end = time.monotonic() + 4
while time.monotonic() < end:
    pass'`
	var nodes []*rnode
	for i, g := range groups {
		// Node scope and the container's: the node's network is the test
		// machine's, the same for every node.
		nodes = append(nodes, j.start(t, i, g, busy, "--scopes", "container,node"))
	}
	for _, n := range nodes {
		if code := n.wait(t); code != 0 {
			t.Fatalf("%s exited %d", n.id, code)
		}
	}
	r := j.run(t)
	rep := j.report(t, r.Info.RunID)
	rows := rowsByNode(rep)
	if r.Info.Status != mlflow.StatusFinished || len(rep.Nodes) != 3 || rep.FirstFailure != nil {
		t.Fatalf("run %s; bridge report --json:\n%s", r.Info.Status, rep.JSON())
	}
	slow := rows["node-2"]
	if !strings.Contains(strings.Join(slow.Differs, "; "), "CPU throttled") || slow.CPULimitCores == nil || slow.CPULimitCores.Float64() != 0.1 {
		t.Errorf("node-2 under its quota: differs %q, CPU limit %v; want it flagged as throttled:\n%s", slow.Differs, slow.CPULimitCores, rep.JSON())
	}
	for _, id := range []string{"node-0", "node-1"} {
		if d := rows[id].Differs; len(d) > 0 {
			t.Errorf("%s differs %q: it ran as the job's other node did", id, d)
		}
	}
	t.Logf("node-2: throttled in %v%% of periods; differs %q", deref(slow.ThrottledSharePercent), slow.Differs)
	var text bytes.Buffer
	if err := rep.Text(&text); err == nil {
		t.Logf("bridge report:\n%s", &text)
	}
}

func deref(p *metrics.Float) any {
	if p == nil {
		return nil
	}
	return p.Float64()
}

// A job of 300 nodes on a server whose runs keep their artifacts where
// only the client writes: the report goes in the summary tag, cut at a
// line within MLflow's 8,000 characters, saying how many lines it left
// out. One real bridge is node-0; the other nodes' ends are on the run
// already, as their bridges recorded them.
func TestJobReportSummaryCut(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := fmt.Sprintf("bridge-e2e-summary-cut-%d", time.Now().UnixNano())
	srv.CreateExperiment(t, exp)
	key := "e2e:" + exp
	shared := t.TempDir()
	cmd := exec.Command(testbin.Bridge(t), "--interval", "500ms", "--start-timeout", "1m", "--flush-timeout", "1m",
		"--", "/bin/sh", "-c", `while [ ! -e "$SHARED/go" ]; do sleep 0.05; done; exit 3`)
	cmd.Dir = t.TempDir()
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp, "BRIDGE_JOB_KEY="+key,
		"BRIDGE_NODE_ID=node-0", "BRIDGE_NODES=300", "SHARED="+shared)
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var run string
	waitfor.Cond(t, 2*time.Minute, "the job's run", func() bool {
		id := srv.ExperimentID(t, exp)
		if id == "" {
			return false
		}
		runs := srv.SearchRuns(t, id, fmt.Sprintf("tags.`%s` = '%s'", mlflow.TagJobKey, key), "ACTIVE_ONLY")
		if len(runs) == 1 {
			run = runs[0].Info.RunID
		}
		return run != ""
	})
	tags := map[string]string{}
	for i := 1; i < 300; i++ {
		tags[tracker.StateTag(fmt.Sprintf("node-%d", i), "")] = report.EndLine(map[string]string{"bridge.exit_code": "0"},
			report.Ending{Status: mlflow.StatusFinished, Ended: time.Now(), Attempt: 0})
	}
	srv.LogBatch(t, run, tags, nil)
	if err := os.WriteFile(filepath.Join(shared, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd.Wait()); code != 3 {
		t.Fatalf("bridge exited %d, want the child's 3:\n%s", code, &stderr)
	}
	r := srv.GetRun(t, run)
	sum := r.Tags[report.TagReportSummary]
	lines := strings.Split(strings.TrimSuffix(sum, "\n"), "\n")
	var left int
	_, err := fmt.Sscanf(lines[len(lines)-1], "... %d more lines (bridge report "+run+" shows them all)", &left)
	if n := utf8.RuneCountInString(sum); n > report.SummaryMax || err != nil || len(lines)-2+left != 300 ||
		!strings.HasPrefix(lines[0], "Status FAILED; first failure: node-0: ") {
		t.Fatalf("%s: %d characters, %d lines, the last %q (%v):\n%s\n%s", report.TagReportSummary, n, len(lines), lines[len(lines)-1], err, sum, &stderr)
	}
	for _, l := range lines[1 : len(lines)-1] {
		if !strings.HasPrefix(l, "node-") || !strings.Contains(l, ": status ") || !strings.Contains(l, "; ended (UTC) ") {
			t.Errorf("a line cut: %q", l)
		}
	}
	t.Logf("%d lines kept, %d left out, %d characters", len(lines)-2, left, utf8.RuneCountInString(sum))
}
