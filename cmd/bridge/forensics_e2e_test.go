package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/summary"
)

// inCgroup makes the job's bridge start inside g: a shell joins the group
// and execs bridge, so bridge and its child share the cgroup, as in a pod.
func (j *job) inCgroup(g *cgrouptest.Group) *job { return j.enterFirst(g.ShellEnter()) }

// enterFirst makes the job's bridge start after the shell snippet enter,
// which moves the shell into cgroups (cgrouptest's ShellEnter*).
func (j *job) enterFirst(enter string) *job {
	args := append([]string{"sh", "-c", enter + `exec "$0" "$@"`, j.cmd.Path}, j.cmd.Args[1:]...)
	j.cmd.Path = "/bin/sh"
	j.cmd.Args = args
	j.cmd.WaitDelay = 10 * time.Second
	return j
}

func requireTags(t *testing.T, tags map[string]string, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if tags[k] != v {
			t.Errorf("tag %s = %q, want %q", k, tags[k], v)
		}
	}
}

const mib = 1 << 20

// The child allocates past a 200 MiB limit; the kernel OOM-kills it. bridge
// exits 137 and says cgroup_oom_kill on the run, with the counter as evidence.
func TestForensicsCgroupOOMKill(t *testing.T) {
	srv := mlflowtest.Shared(t)
	g := cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 200 * mib})
	alloc := `import time
b = []
while True:
    b.append(b"x" * 5_000_000)
    time.sleep(0.01)
`
	j := newJob(t, srv.URL, "--interval=500ms", "--", "python3", "-c", alloc).inCgroup(g)
	if code := j.run(t); code != 137 {
		t.Fatalf("exit %d, want 137; stderr:\n%s", code, &j.err)
	}
	run := srv.GetRun(t, j.runID(t))
	requireTags(t, run.Tags, map[string]string{
		"bridge.exit_reason":    "cgroup_oom_kill",
		"bridge.exit_code":      "137",
		"bridge.oom_kill_count": "1",
	})
	if ev := run.Tags["bridge.exit_evidence"]; !strings.Contains(ev, "oom_kill") {
		t.Errorf("evidence does not cite the oom_kill counter: %q", ev)
	}
	// The kernel's SIGKILL ended it, but the job failed: its memory did.
	if run.Info.Status != "FAILED" {
		t.Errorf("status %s, want FAILED", run.Info.Status)
	}
	// The kernel's high-water mark is the evidence: the sampled working set
	// may miss the allocation's last steps (it did: 95.3 MB sampled of a
	// 209.7 MB peak), however the machine is loaded.
	share, err := strconv.ParseFloat(run.Tags["bridge.peak_usage_share_of_limit_percentage"], 64)
	if err != nil || share < 95 {
		t.Errorf("bridge.peak_usage_share_of_limit_percentage = %q, want the kernel's high-water mark at the limit (>= 95)",
			run.Tags["bridge.peak_usage_share_of_limit_percentage"])
	}
	t.Logf("peak usage share of limit: bridge %s%%, sampled working set share %s%%",
		run.Tags["bridge.peak_usage_share_of_limit_percentage"], run.Tags["bridge.peak_working_set_share_of_limit_percentage"])
	if !strings.Contains(j.err.String(), "cgroup_oom_kill") {
		t.Errorf("end-of-run table does not give the reason:\n%s", &j.err)
	}
	t.Logf("detail: %s", run.Tags["bridge.exit_reason_detail"])
}

func TestForensicsAppError(t *testing.T) {
	srv := mlflowtest.Shared(t)
	j := newJob(t, srv.URL, "--interval=300ms", "--", "sh", "-c", "sleep 0.5; exit 1")
	if code := j.run(t); code != 1 {
		t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
	}
	requireTags(t, srv.GetRun(t, j.runID(t)).Tags, map[string]string{"bridge.exit_reason": "app_error", "bridge.exit_code": "1"})
}

func TestForensicsForwardedSIGTERM(t *testing.T) {
	srv := mlflowtest.Shared(t)
	j := newJob(t, srv.URL, "--interval=300ms", "--", "sh", "-c", "touch ready; while :; do sleep 0.05; done")
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitfor.File(t, 30*time.Second, filepath.Join(j.dir, "ready"))
	j.cmd.Process.Signal(syscall.SIGTERM)
	if code := exitCode(t, j.cmd.Wait()); code != 143 {
		t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
	}
	tags := srv.GetRun(t, j.runID(t)).Tags
	requireTags(t, tags, map[string]string{"bridge.exit_reason": "killed_by_signal"})
	if !strings.Contains(tags["bridge.exit_evidence"], "forwarded=true") {
		t.Errorf("evidence does not say bridge forwarded the signal: %q", tags["bridge.exit_evidence"])
	}
}

// A SIGKILL from another process, far from the limit, is not an OOM kill.
func TestForensicsForeignSIGKILLIsNotOOM(t *testing.T) {
	srv := mlflowtest.Shared(t)
	g := cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 200 * mib})
	j := newJob(t, srv.URL, "--interval=300ms", "--", "sh", "-c", "echo $$ > pid; while :; do sleep 0.05; done").inCgroup(g)
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(j.dir, "pid")
	waitfor.File(t, 30*time.Second, pidFile)
	waitSamples(t, j.spool, 2, time.Minute) // a counter reading before the kill
	b, _ := os.ReadFile(pidFile)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("child pid %q: %v", b, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, j.cmd.Wait()); code != 137 {
		t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
	}
	tags := srv.GetRun(t, j.runID(t)).Tags
	requireTags(t, tags, map[string]string{"bridge.exit_reason": "killed_by_signal", "bridge.oom_kill_count": "0"})
	if !strings.Contains(tags["bridge.exit_evidence"], "forwarded=false") {
		t.Errorf("evidence should say bridge did not forward it: %q", tags["bridge.exit_evidence"])
	}
}

// bridge itself dies without a clean shutdown (as in a group OOM kill); the
// bridge restarted on the same spool writes into the same run and reports
// the lost attempt with its last sample.
func TestForensicsPreviousAttemptLost(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.Shared(t)
	first := newJob(t, srv.URL, "--interval=300ms", "--", "sh", "-c", "touch ready; sleep 30")
	if err := first.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitfor.File(t, 30*time.Second, filepath.Join(first.dir, "ready"))
	waitSamples(t, first.spool, 2, time.Minute) // the lost attempt must leave a sample
	first.cmd.Process.Kill()                    // SIGKILL: no end record, run left RUNNING
	first.cmd.Wait()
	id := first.runID(t)
	if st := srv.GetRun(t, id).Info.Status; st != "RUNNING" {
		t.Fatalf("after SIGKILL of bridge the run is %s", st)
	}

	second := newJob(t, srv.URL, "--interval=300ms", "--", "sh", "-c", "sleep 0.5")
	second.spool = first.spool
	second.env("BRIDGE_SPOOL=" + first.spool)
	if code := second.run(t); code != 0 {
		t.Fatalf("second attempt: exit %d; stderr:\n%s", code, &second.err)
	}
	run := srv.GetRun(t, id)
	lost := run.Tags["bridge.previous_attempt_lost"]
	if !strings.Contains(lost, "attempt 1") || !strings.Contains(lost, "without a clean shutdown") {
		t.Errorf("bridge.previous_attempt_lost = %q", lost)
	}
	if run.Tags["bridge.previous_attempt_last_sample"] == "" {
		t.Error("no last sample of the lost attempt on the run")
	}
	if run.Info.Status != "FINISHED" {
		t.Errorf("status %s: the restarted bridge owns the run it created before", run.Info.Status)
	}
	if !strings.Contains(second.err.String(), "previous attempt") {
		t.Errorf("stderr does not mention the lost attempt:\n%s", &second.err)
	}
	fmt.Fprintln(os.Stderr) // keep the package's output readable between tests
	t.Logf("previous_attempt_lost: %s", lost)
}

// Near the limit bridge samples every --fast-interval instead of --interval:
// a job about to be OOM-killed leaves a dense record. The child holds its
// memory until the spool has six more samples (not for a fixed time), so the
// count does not depend on how fast this machine is; at the 30 s interval
// that would take three minutes, past the child's own 120 s bound.
func TestFastSamplingNearLimit(t *testing.T) {
	g := cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 200 * mib})
	hold := `import os, time
def samples():
    with open(os.environ["BRIDGE_SPOOL"]) as f:
        return sum('"type":"sample"' in line for line in f)
b = b"x" * 150_000_000
start = samples()
deadline = time.time() + 120
while samples() < start + 6 and time.time() < deadline:
    time.sleep(0.05)
`
	cmd, _, errb := bridgeCmd(t, "--interval=30s", "--fast-interval=200ms", "--fast-threshold=60", "--", "python3", "-c", hold)
	j := &job{cmd: cmd}
	j.inCgroup(g)
	if code := exitCode(t, j.cmd.Run()); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errb)
	}
	ss := spooled(t, cmd)
	fast := 0
	for i := 1; i < len(ss); i++ {
		pct, ok := ss[i-1].Value("container_memory_working_set_percentage")
		// Far below the 30 s interval, whatever the load: a fast sample.
		if ok && pct >= 60 && ss[i].Time.Sub(ss[i-1].Time) < 10*time.Second {
			fast++
		}
	}
	if fast < 5 {
		t.Fatalf("%d fast samples above the threshold among %d, want at least 5", fast, len(ss))
	}
	t.Logf("%d samples, %d taken at the fast interval", len(ss), fast)
}

// waitSamples polls the spool until it holds n samples: a test that needs
// samples waits for them rather than for a time in which they usually come.
func waitSamples(t *testing.T, path string, n int, d time.Duration) {
	t.Helper()
	waitfor.Cond(t, d, fmt.Sprintf("%d samples in %s", n, path), func() bool {
		b, _ := os.ReadFile(path)
		return strings.Count(string(b), `"type":"sample"`) >= n
	})
}

// A job that allocates past its limit faster than bridge samples dies
// between two samples: they saw a few MB. The kernel's high-water mark saw
// the limit, and the OOM-kill counter rose: the end-of-run table and the
// run's tags give the peak working set at the limit, from that mark at the
// OOM kill, and say so; the peak usage is the mark itself, named as usage
// (page cache included). The process tree's RSS is never a 0 from a tree
// without memory of its own (the child between fork and exec).
func TestForensicsOOMBetweenSamples(t *testing.T) {
	srv := mlflowtest.Shared(t)
	const limit = 150_000_000
	g := cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: limit})
	// An hour's interval and no fast sampling: the first sample at once,
	// the next (at a random phase) long after the kill.
	j := newJob(t, srv.URL, "--interval=1h", "--fast-interval=0", "--",
		"python3", "-c", "b = bytearray(400_000_000)").inCgroup(g)
	if code := j.run(t); code != 137 {
		t.Fatalf("exit %d, want 137; stderr:\n%s", code, &j.err)
	}
	limitMB := float64(limit) / 1e6
	sampledWS := 0.0
	ss, _, _, err := spooltest.ReadFile(j.spool)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if v, ok := s.Value("container_memory_working_set_megabytes"); ok {
			sampledWS = max(sampledWS, v)
		}
		if v, ok := s.Value("process_memory_rss_megabytes"); ok && v <= 0 {
			t.Errorf("sample %d has a process-tree RSS of %v MB", s.Seq, v)
		}
	}
	run := srv.GetRun(t, j.runID(t))
	requireTags(t, run.Tags, map[string]string{"bridge.exit_reason": "cgroup_oom_kill", "bridge.oom_kill_count": "1"})
	ws, err := strconv.ParseFloat(run.Tags["bridge.peak_working_set_megabytes"], 64)
	if err != nil || ws < summary.AtLimit*limitMB {
		t.Errorf("bridge.peak_working_set_megabytes = %q, want the limit (%.1f MB): the working set reached it at the OOM kill",
			run.Tags["bridge.peak_working_set_megabytes"], limitMB)
	}
	wantSource := "kernel high-water mark memory.max_usage_in_bytes at the OOM kill"
	if sampledWS < summary.AtLimit*limitMB && run.Tags["bridge.peak_working_set_source"] != wantSource {
		t.Errorf("bridge.peak_working_set_source = %q with a sampled peak of %.1f MB, want %q",
			run.Tags["bridge.peak_working_set_source"], sampledWS, wantSource)
	}
	requireTags(t, run.Tags, map[string]string{
		"bridge.peak_usage_source":                    "kernel high-water mark memory.max_usage_in_bytes",
		"bridge.peak_usage_share_of_limit_percentage": "100.0",
	})
	table := j.err.String()
	for _, want := range []string{
		fmt.Sprintf("peak working set       %.1f MB, 100.0%% of the %.1f MB limit: the %s", limitMB, limitMB, wantSource),
		fmt.Sprintf("peak usage             %.1f MB with the page cache, 100.0%% of the %.1f MB limit: the kernel high-water mark memory.max_usage_in_bytes\n", limitMB, limitMB),
	} {
		if sampledWS < summary.AtLimit*limitMB && !strings.Contains(table, want) {
			t.Errorf("end-of-run table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "peak process-tree RSS  0.0 MB") {
		t.Errorf("a process-tree RSS of 0 in the table:\n%s", table)
	}
	t.Logf("sampled working set peak %.1f MB over %d samples; tags: working set %s (%s), usage %s (%s)", sampledWS, len(ss),
		run.Tags["bridge.peak_working_set_megabytes"], run.Tags["bridge.peak_working_set_source"],
		run.Tags["bridge.peak_usage_megabytes"], run.Tags["bridge.peak_usage_source"])
}
