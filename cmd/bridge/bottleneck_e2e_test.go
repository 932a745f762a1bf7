package main

// The bottleneck verdict, each cause produced for real through the real
// binary against a real MLflow server: a job that is input-bound, one
// throttled by its quota, one reclaiming at its memory limit, one waiting
// on a stalled disk (real v1 cgroups, a FUSE file system that stalls),
// and with the stand-in NVML a busy GPU, an idle one and a hot one. Each
// job runs until bridge has seen enough windows of its cause (the test
// watches the spool, then tells the job to stop): no assertion depends on
// how fast this machine is. Each verdict and its evidence are checked in
// the run's tag, its share series in MLflow and `bridge report --json`.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/stallfs"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/whyslow"
)

// whyJob is one job of these tests: its bridge, the file that tells the
// job to stop, and the spool bridge writes.
type whyJob struct {
	cmd    *exec.Cmd
	spool  string
	stop   string
	stderr bytes.Buffer
}

// whyWindow is the verdict's window in these tests: short, so that a job
// has several in a few seconds.
const whyWindow = "2s"

// startWhy starts bridge (inside g's cgroups when g is not nil) on the
// Python script child, with a short verdict window and the variables env;
// the script finds the stop file in $STOP.
func startWhy(t *testing.T, srv *mlflowtest.Server, g *cgrouptest.Group, env []string, args []string, child string) *whyJob {
	t.Helper()
	dir := t.TempDir()
	j := &whyJob{spool: filepath.Join(dir, "spool.jsonl"), stop: filepath.Join(dir, "stop")}
	enter := ""
	if g != nil {
		enter = g.ShellEnter()
	}
	bargs := append([]string{"-c", enter + `exec "$0" "$@"`, testbin.Bridge(t), "--interval", "250ms", "--analysis-window", whyWindow,
		"--start-timeout", "1m", "--flush-timeout", "1m"}, args...)
	bargs = append(bargs, "--", mlflowtest.Python(t), "-c", child)
	j.cmd = exec.Command("/bin/sh", bargs...)
	j.cmd.Dir = dir
	j.cmd.Env = cleanEnv(append([]string{"BRIDGE_SPOOL=" + j.spool, "STOP=" + j.stop,
		"MLFLOW_TRACKING_URI=" + srv.URL, "MLFLOW_EXPERIMENT_NAME=" + uniqueName(t)}, env...)...)
	j.cmd.Stderr = &j.stderr
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	j.cmd.WaitDelay = 10 * time.Second
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL) // a test that failed early; the group is gone once waited for
		if t.Failed() {
			t.Logf("bridge's stderr:\n%s", j.stderr.String())
		}
	})
	return j
}

// waitCause waits until the job's spool holds at least n verdicts and
// cause's share of them is at least half.
func (j *whyJob) waitCause(t *testing.T, cause whyslow.Cause, n int) {
	t.Helper()
	key := whyslow.ShareSeries[cause].Name
	waitfor.Cond(t, 3*time.Minute, fmt.Sprintf("%d verdicts in the spool, half of the time %s", n, cause), func() bool {
		smp, _, _, err := spooltest.ReadFile(j.spool)
		if err != nil {
			return false
		}
		seen, share := 0, 0.0
		for _, s := range smp {
			if v, ok := s.Value(key); ok {
				seen, share = seen+1, v
			}
		}
		return seen >= n && share >= 0.5
	})
}

// end tells the job to stop and waits for bridge; it returns bridge's
// exit status.
func (j *whyJob) end(t *testing.T) int {
	t.Helper()
	if err := os.WriteFile(j.stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return exitCode(t, j.cmd.Wait())
}

// verdict checks the job's run: its tag bridge.bottleneck names cause and
// holds each of evidence, its share series in MLflow end with cause's
// share the largest, and `bridge report --json` has the same verdict and
// shares in the node's row. It returns the run.
func (j *whyJob) verdict(t *testing.T, srv *mlflowtest.Server, cause whyslow.Cause, evidence ...string) mlflowtest.Run {
	t.Helper()
	_, _, attempts, err := spooltest.ReadFile(j.spool)
	if err != nil || len(attempts) == 0 || attempts[0].Start.Runs["mlflow"] == "" {
		t.Fatalf("no MLflow run in the spool %s: %v", j.spool, err)
	}
	id := attempts[0].Start.Runs["mlflow"]
	run := srv.GetRun(t, id)
	tag := run.Tags[whyslow.Tag]
	t.Logf("%s = %q", whyslow.Tag, tag)
	if !strings.HasPrefix(tag, string(cause)+": ") {
		t.Errorf("%s = %q, want the cause %s first", whyslow.Tag, tag, cause)
	}
	for _, e := range evidence {
		if !strings.Contains(tag, e) {
			t.Errorf("%s = %q, want the evidence %q", whyslow.Tag, tag, e)
		}
	}
	shares := map[string]float64{}
	for _, c := range whyslow.Causes {
		key := "system/" + whyslow.ShareSeries[c].Name
		m, ok := run.Latest[key]
		if !ok {
			t.Errorf("no %s in the run", key)
			continue
		}
		shares[string(c)] = m.Value
	}
	for c, v := range shares {
		if v > shares[string(cause)] {
			t.Errorf("%s's share %v is larger than %s's %v", c, v, cause, shares[string(cause)])
		}
	}
	if h := srv.History(t, id, "system/"+whyslow.ShareSeries[cause].Name); len(h) < 2 {
		t.Errorf("%d points of %s's share, want one a window", len(h), cause)
	}

	cmd := exec.Command(testbin.Bridge(t), "report", "--json", id)
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI=" + srv.URL)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if code := exitCode(t, cmd.Run()); code != 0 {
		t.Fatalf("bridge report exited %d: %s", code, &errb)
	}
	var rep report.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Nodes) != 1 {
		t.Fatalf("bridge report --json: %v, %d nodes\n%s", err, len(rep.Nodes), &out)
	}
	n := rep.Nodes[0]
	if n.Bottleneck != tag {
		t.Errorf("the report's verdict %q, the tag's %q", n.Bottleneck, tag)
	}
	for c, v := range shares {
		got := 0.0
		if f := n.BottleneckShares[c]; f != nil {
			got = f.Float64()
		}
		if math.Abs(got-v) > 1e-3 {
			t.Errorf("the report's %s share %v, the series' %v", c, got, v)
		}
	}
	return run
}

// rolesAddUp checks every sample of the spool: each role series adds up,
// over the roles, to the tree's; and some sample saw the tree as trainers
// trainers and loaders data-loading workers.
func (j *whyJob) rolesAddUp(t *testing.T, trainers, loaders float64) {
	t.Helper()
	smp, _, _, err := spooltest.ReadFile(j.spool)
	if err != nil {
		t.Fatal(err)
	}
	families := []struct {
		total string
		part  func(metrics.RoleDescs) *metrics.Desc
	}{
		{"process_cpu_usage_cores", func(d metrics.RoleDescs) *metrics.Desc { return d.CPU }},
		{"process_memory_rss_megabytes", func(d metrics.RoleDescs) *metrics.Desc { return d.RSS }},
		{"process_count", func(d metrics.RoleDescs) *metrics.Desc { return d.Count }},
		{"process_io_read_megabytes_per_second", func(d metrics.RoleDescs) *metrics.Desc { return d.IORead }},
		{"process_io_write_megabytes_per_second", func(d metrics.RoleDescs) *metrics.Desc { return d.IOWrite }},
	}
	checked, shaped := map[string]int{}, false
	for _, s := range smp {
		for _, fam := range families {
			total, ok := s.Value(fam.total)
			if !ok {
				continue
			}
			sum := 0.0
			for _, r := range metrics.ProcessRoles {
				v, _ := s.Value(fam.part(r).Name)
				sum += v
			}
			if math.Abs(sum-total) > 1e-9*math.Max(1, total) {
				t.Errorf("sample %d: the roles' %s add up to %v, the tree's is %v", s.Seq, fam.total, sum, total)
			}
			checked[fam.total]++
		}
		tr, _ := s.Value(metrics.ProcessRoles[metrics.RoleTrainer].Count.Name)
		dl, _ := s.Value(metrics.ProcessRoles[metrics.RoleDataLoader].Count.Name)
		shaped = shaped || (tr == trainers && dl == loaders)
	}
	for _, fam := range families {
		if checked[fam.total] == 0 {
			t.Errorf("no sample with %s", fam.total)
		}
	}
	if !shaped {
		t.Errorf("no sample saw %v trainers and %v data-loading workers", trainers, loaders)
	}
}

// whyV1 is a real v1 cgroup for a job, or a skip that says why not.
func whyV1(t *testing.T, lim cgrouptest.Limits) *cgrouptest.Group {
	t.Helper()
	return cgrouptest.NewV1(t, lim)
}

// input: a trainer that waits on four data-loading workers, named
// pt_data_worker as PyTorch names them (prctl PR_SET_NAME on their main
// thread), which spin within a 0.2-core quota: the workers hold the CPU,
// the quota throttles, the trainer waits. The verdict is input, with the
// throttling as its evidence, not cpu_throttled; the role series add up.
func TestBottleneckInput(t *testing.T) {
	t.Parallel()
	srv := mlflowtest.Shared(t)
	g := whyV1(t, cgrouptest.Limits{MemoryBytes: 1 << 30, QuotaUs: 20000, PeriodUs: 100000})
	j := startWhy(t, srv, g, nil, nil, `
import ctypes, multiprocessing as mp, os, queue
def worker(q):
    ctypes.CDLL(None).prctl(15, b"pt_data_worker", 0, 0, 0)
    n = 0
    while True:
        n += 1
        if n % 2000000 == 0:
            q.put(n)
if __name__ == "__main__":
    mp.set_start_method("fork")
    q = mp.Queue()
    for _ in range(4):
        mp.Process(target=worker, args=(q,), daemon=True).start()
    while not os.path.exists(os.environ["STOP"]):
        try:
            q.get(timeout=0.2)
        except queue.Empty:
            pass
`)
	j.waitCause(t, whyslow.Input, 3)
	if code := j.end(t); code != 0 {
		t.Fatalf("bridge exited %d", code)
	}
	j.verdict(t, srv, whyslow.Input, "the 4 data-loading workers used", "of the 0.20 cores allowed", "while the trainer used", "the CPU quota throttled")
	j.rolesAddUp(t, 1, 4)
}

// cpu_throttled: a busy trainer in a 0.1-core quota.
func TestBottleneckCPUThrottled(t *testing.T) {
	t.Parallel()
	srv := mlflowtest.Shared(t)
	g := whyV1(t, cgrouptest.Limits{MemoryBytes: 1 << 30, QuotaUs: 10000, PeriodUs: 100000})
	j := startWhy(t, srv, g, nil, nil, `
import os
while not os.path.exists(os.environ["STOP"]):
    for _ in range(100000):
        pass
`)
	j.waitCause(t, whyslow.CPUThrottled, 3)
	if code := j.end(t); code != 0 {
		t.Fatalf("bridge exited %d", code)
	}
	j.verdict(t, srv, whyslow.CPUThrottled, "the CPU quota throttled", "the trainer used", "of the 0.10 cores allowed")
}

// memory_pressure on cgroup v1, which has no PSI per cgroup: the job holds
// 93% of its 256 MiB limit in anonymous memory (bridge's own included: it
// runs in the cgroup it measures) and reads a file larger than what is
// left, again and again: the usage reaches the limit and the kernel
// reclaims (memory.failcnt grows) with the working set near the limit.
func TestBottleneckMemoryPressure(t *testing.T) {
	t.Parallel()
	srv := mlflowtest.Shared(t)
	const limit = 256 << 20
	g := whyV1(t, cgrouptest.Limits{MemoryBytes: limit})
	big := filepath.Join(t.TempDir(), "data.bin") // on disk: its pages are page cache, not shmem
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	j := startWhy(t, srv, g, []string{"MEMCG=" + g.Memory, "DATA=" + big, fmt.Sprintf("LIMIT=%d", limit)}, nil, `
import os
def rss():
    for line in open(os.path.join(os.environ["MEMCG"], "memory.stat")):
        k, v = line.split()
        if k == "total_rss":
            return int(v)
hold = []
while rss() < 0.93 * int(os.environ["LIMIT"]):
    hold.append(bytearray(1 << 20))
while not os.path.exists(os.environ["STOP"]):
    with open(os.environ["DATA"], "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass
`)
	j.waitCause(t, whyslow.MemoryPressure, 3)
	if code := j.end(t); code != 0 {
		t.Fatalf("bridge exited %d (an OOM kill would be 137)", code)
	}
	j.verdict(t, srv, whyslow.MemoryPressure, "the usage reached the memory limit", "memory.failcnt", "of the 268 MB limit")
}

// io: the job's trainer writes a file on a disk that stalls while its
// child's fsync of that file hangs, holding the file's lock: the trainer
// is blocked in the kernel (state D), as on a hard NFS mount whose server
// went away.
func TestBottleneckIO(t *testing.T) {
	t.Parallel()
	fs := stallfs.Mount(t)
	srv := mlflowtest.Shared(t)
	g := whyV1(t, cgrouptest.Limits{MemoryBytes: 1 << 30})
	fs.Stall(false) // every fsync blocks until Release
	j := startWhy(t, srv, g, []string{"FILE=" + filepath.Join(fs.Dir, "checkpoint")}, nil, `
import os
fd = os.open(os.environ["FILE"], os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"x")
child = os.fork()
if child == 0:
    os.fsync(fd)
    os._exit(0)
while not os.path.exists(os.environ["STOP"]):
    os.write(fd, b"y")
os.waitpid(child, 0)
`)
	j.waitCause(t, whyslow.IO, 3)
	if err := os.WriteFile(j.stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fs.Release()
	if code := exitCode(t, j.cmd.Wait()); code != 0 {
		t.Fatalf("bridge exited %d", code)
	}
	j.verdict(t, srv, whyslow.IO, "of the job's processes were blocked in the kernel (state D")
}

// With the stand-in NVML: a busy GPU is gpu_compute whatever the host
// does (its SW power cap event is no slowdown), an idle GPU with an idle
// host is idle, a hot GPU is gpu_throttled. The host's container series
// are left out (--scopes): the GPU and the tree decide.
func TestBottleneckGPU(t *testing.T) {
	t.Parallel()
	bin := testbin.Bridge(t)
	lib := fakeNVMLLib(t, bin)
	srv := mlflowtest.Shared(t)
	waitStop := `
import os, time
while not os.path.exists(os.environ["STOP"]):
    time.sleep(0.05)
`
	for _, tc := range []struct {
		profile  string
		cause    whyslow.Cause
		evidence []string
	}{
		{"busy", whyslow.GPUCompute, []string{"the GPU was busy 90% of the time (SM activity)"}},
		{"idle", whyslow.Idle, []string{"the GPU was idle 98% of the time", "it waits on something outside this node"}},
		{"hot", whyslow.GPUThrottled, []string{"GPU 0 had hw_thermal clock events in 100% of the samples", "busy 90% of the time"}},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			t.Parallel()
			env, _ := fakeNVMLEnv(t, lib)
			j := startWhy(t, srv, nil, append(env, "FAKE_NVML_PROFILE="+tc.profile), []string{"--scopes", "gpu,process"}, waitStop)
			j.waitCause(t, tc.cause, 3)
			if code := j.end(t); code != 0 {
				t.Fatalf("bridge exited %d", code)
			}
			j.verdict(t, srv, tc.cause, tc.evidence...)
		})
	}
}
