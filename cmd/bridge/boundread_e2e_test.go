package main

// The bounded reader end to end (docs/reliability.md, "Reads of the
// outside world"): the real binary, faults in a fixture /sys mounted in a
// private mount namespace, a stalled disk (harness/stallfs) under the
// spool, and a real MLflow server at the end of a multi-node job.

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
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/stallfs"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/amdgpu"
	"github.com/bridge-dev/bridge/metrics/infiniband"
	"github.com/bridge-dev/bridge/metrics/rapl"
	"github.com/bridge-dev/bridge/tracker"
)

// sysFault is what is put in place of a sysfs file: a FIFO nobody writes
// (a read that waits, as a wedged driver's), or a link to /dev/zero (a
// file that never ends).
type sysFault struct {
	name string
	put  func(path string) error
}

var sysFaults = []sysFault{
	{"FIFO", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
	{"/dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }},
}

// faultFiles are the files of the hardware fixture (hwFixture) the faults
// go in, each with its collector: what the collectors' constructors read,
// and RAPL's energy_uj, which each sample reads.
var faultFiles = []struct{ rel, collector string }{
	{"class/powercap/intel-rapl:0/name", rapl.Name},
	{"class/powercap/intel-rapl:0/max_energy_range_uj", rapl.Name},
	{"class/powercap/intel-rapl:0/energy_uj", rapl.Name},
	{"class/infiniband/mlx5_0/fw_ver", infiniband.Name},
	{"class/infiniband/mlx5_0/ports/1/state", infiniband.Name},
	{"class/drm/card0/device/unique_id", amdgpu.Name},
}

// putFault replaces rel under root with f.
func putFault(t *testing.T, root, rel string, f sysFault) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := f.put(p); err != nil {
		t.Fatal(err)
	}
}

// warned reports whether the log has a WARN naming the file at rel, or,
// for a read that waits, the collector left out.
func warned(log, rel, collector string) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=WARN") && (strings.Contains(l, filepath.Base(rel)) || strings.Contains(l, "collector="+collector)) {
			return true
		}
	}
	return false
}

// hwmChild writes bridge's (its parent's) peak RSS, in kB, to the file
// hwm, once the file GO exists, then exits 7.
const hwmChild = `: > started; while [ ! -e GO ]; do sleep 0.05; done
sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' /proc/$PPID/status > hwm.tmp && mv hwm.tmp hwm; exit 7`

// maxHWM bounds bridge's peak RSS in these tests: bridge takes 15-30 MiB,
// its documented bound whatever fails is about 250 MiB; /dev/zero read
// without a bound took it to gigabytes.
const maxHWM = 250 << 10 // kB

// sysFaultJob runs a job in the fixture's namespace whose child waits for GO,
// with the collect timeout short so that a read that waits is given up on
// soon. It returns the command, its output, and its working directory
// (where the child's files are).
func sysFaultJob(t *testing.T, root string) (*exec.Cmd, *syncbuf.Buffer, string) {
	t.Helper()
	dir := t.TempDir()
	job := inFixtureNS(t, root, "--interval=200ms", "--collect-timeout=1s", "--trackers=none", "--flush-timeout=30s",
		"--", "sh", "-c", hwmChild)
	job.Dir = dir
	job.Env = append(job.Env, "BRIDGE_SPOOL="+filepath.Join(dir, "spool.jsonl"))
	out := &syncbuf.Buffer{}
	job.Stdout, job.Stderr = out, out
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { job.Process.Kill() })
	return job, out, dir
}

// endSysFaultJob lets the child end and checks what every fault job must
// show: the child's exit status is bridge's, and bridge's peak RSS stayed
// bounded.
func endSysFaultJob(t *testing.T, job *exec.Cmd, out *syncbuf.Buffer, dir string) {
	t.Helper()
	os.WriteFile(filepath.Join(dir, "GO"), nil, 0o644)
	err := waitExit(t, job, out, 2*time.Minute)
	if code := exitCode(t, err); code != 7 {
		t.Errorf("exit %d, want the child's 7\n%s", code, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "hwm"))
	hwm, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil {
		t.Fatalf("the child did not write bridge's VmHWM: %v %v %q", err, perr, b)
	}
	t.Logf("bridge's peak RSS: %d kB", hwm)
	if hwm > maxHWM {
		t.Errorf("bridge's peak RSS %d kB, past %d kB: a read without a size bound?", hwm, maxHWM)
	}
}

func needFixtureNS(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs root: it mounts a fixture tree over /sys/class in a private mount namespace (scripts/test.sh runs as root)")
	}
	if _, err := exec.LookPath("mount"); err != nil {
		t.Skip("SKIPPED: needs mount(8) (util-linux) to set up the fixture's mount namespace")
	}
}

// Each file a collector's constructor reads, and RAPL's energy_uj, made a
// FIFO or a link to /dev/zero before bridge starts: `bridge sample`
// answers, with the collector left out or the value unknown and a WARN
// that says why. Then, with every one of them faulted at once, a job: the
// child starts, its exit status is bridge's, bridge's memory stays bounded,
// and each collector says why it is left out or what it could not read.
func TestSysfsFaultsAtStart(t *testing.T) {
	needFixtureNS(t)
	for _, f := range sysFaults {
		for _, ff := range faultFiles {
			t.Run(f.name+" "+ff.rel, func(t *testing.T) {
				root := hwFixture(t)
				putFault(t, root, ff.rel, f)
				cmd := inFixtureNS(t, root, "sample", "--json", "--trackers=none", "--window=100ms", "--collect-timeout=1s")
				var out, errb syncbuf.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errb
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				err := waitExit(t, cmd, &errb, 2*time.Minute)
				if code := exitCode(t, err); code != 0 {
					t.Fatalf("bridge sample exited %d\n%s", code, &errb)
				}
				var got struct {
					Detected map[string]any `json:"detected"`
				}
				if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
					t.Fatalf("bridge sample --json: %v\n%s", err, &out)
				}
				if _, ok := got.Detected[ff.collector]; !ok {
					t.Errorf("bridge sample says nothing of %s: %v", ff.collector, got.Detected)
				}
				if !warned(errb.String(), ff.rel, ff.collector) {
					t.Errorf("no WARN naming %s or the %s collector:\n%s", filepath.Base(ff.rel), ff.collector, &errb)
				}
			})
		}
		t.Run(f.name+" job", func(t *testing.T) {
			root := hwFixture(t)
			for _, ff := range faultFiles[1:] { // the name would hide the range and the counter behind it
				putFault(t, root, ff.rel, f)
			}
			job, out, dir := sysFaultJob(t, root)
			waitfor.File(t, 2*time.Minute, filepath.Join(dir, "started"))
			endSysFaultJob(t, job, out, dir)
			for _, ff := range faultFiles[1:] {
				if !warned(out.String(), ff.rel, ff.collector) {
					t.Errorf("no WARN naming %s or the %s collector:\n%s", filepath.Base(ff.rel), ff.collector, out)
				}
			}
		})
	}
}

// The same files made a FIFO or a link to /dev/zero while bridge samples:
// sampling goes on (samples keep reaching the spool), the collector that
// reads one every sample (RAPL's energy_uj) fails its reads with a WARN or
// is skipped after the collect timeout, bridge's memory stays bounded, and
// the child's exit status is bridge's.
func TestSysfsFaultsWhileSampling(t *testing.T) {
	needFixtureNS(t)
	for _, f := range sysFaults {
		t.Run(f.name, func(t *testing.T) {
			root := hwFixture(t)
			job, out, dir := sysFaultJob(t, root)
			spool := filepath.Join(dir, "spool.jsonl")
			count := func() int {
				ss, _, _, _ := spooltest.ReadFile(spool)
				n := 0
				for _, s := range ss {
					if _, ok := s.Value(metrics.NodeCPUEnergy.Name); ok {
						n++
					}
				}
				return n
			}
			waitfor.Cond(t, 2*time.Minute, "samples with the node's CPU energy", func() bool { return count() >= 2 })
			for _, ff := range faultFiles {
				putFault(t, root, ff.rel, f)
			}
			samples := func() int { ss, _, _, _ := spooltest.ReadFile(spool); return len(ss) }
			after := samples()
			// Long enough for /dev/zero read without a bound to take gigabytes.
			waitfor.Cond(t, 2*time.Minute, "ten more samples after the faults", func() bool { return samples() >= after+10 })
			endSysFaultJob(t, job, out, dir)
			if !warned(out.String(), "energy_uj", rapl.Name) && !strings.Contains(out.String(), "collectors did not answer in time") {
				t.Errorf("no WARN about RAPL's energy_uj:\n%s", out)
			}
		})
	}
}

// The clocksource file read at the end of a multi-node job (real MLflow)
// is --sys-root's: a FIFO there, or one on a disk that stops answering
// while the job runs, costs its tag ("clocksource unknown"), never the
// child's exit status.
func TestClockSourceFaultAtJobEnd(t *testing.T) {
	srv := mlflowtest.Shared(t)
	for _, tc := range []struct {
		name  string
		stall bool
	}{{"FIFO", false}, {"stalled disk", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var sysRoot string
			var fs *stallfs.FS
			if tc.stall {
				fs = stallfs.Mount(t)
				sysRoot = fs.Dir
			} else {
				sysRoot = t.TempDir()
			}
			file := filepath.Join(sysRoot, "devices/system/clocksource/clocksource0/current_clocksource")
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.stall {
				err := os.WriteFile(file, []byte("tsc\n"), 0o644)
				if err != nil {
					t.Fatal(err)
				}
			} else if err := syscall.Mkfifo(file, 0o600); err != nil {
				t.Fatal(err)
			}
			exp := fmt.Sprintf("bridge-e2e-clock-%d", time.Now().UnixNano())
			expID := srv.CreateExperiment(t, exp)
			key := "e2e:" + exp
			dir := t.TempDir()
			cmd := exec.Command(testbin.Bridge(t), "--interval=200ms", "--collect-timeout=1s", "--flush-timeout=1m",
				"--trackers=mlflow", "--sys-root="+sysRoot, "--",
				"sh", "-c", `: > started; while [ ! -e GO ]; do sleep 0.05; done; exit 5`)
			cmd.Dir = dir
			cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp,
				"BRIDGE_JOB_KEY="+key, "BRIDGE_NODE_ID=node-0", "BRIDGE_NODES=1", "BRIDGE_SPOOL="+filepath.Join(dir, "spool.jsonl"))
			out := &syncbuf.Buffer{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() }) // before the mount's cleanup releases the stall
			waitfor.File(t, 2*time.Minute, filepath.Join(dir, "started"))
			if tc.stall {
				fs.StallAll()
			}
			os.WriteFile(filepath.Join(dir, "GO"), nil, 0o644)
			err := waitExit(t, cmd, out, 2*time.Minute)
			if code := exitCode(t, err); code != 5 {
				t.Fatalf("exit %d, want the child's 5\n%s", code, out)
			}
			// With the disk stalled, "clocksource unknown" below is the read
			// given up on: the file says tsc.
			runs := srv.SearchRuns(t, expID, "", "ACTIVE_ONLY")
			if len(runs) != 2 {
				t.Fatalf("%d runs in %s, want the job's and its node's\n%s", len(runs), exp, out)
			}
			// The node's run has the tag, the job's run the node's line.
			var clock []string
			for _, r := range runs {
				tags := srv.GetRun(t, r.Info.RunID).Tags
				for k, v := range tags {
					if strings.HasSuffix(k, "ended_clock") {
						clock = append(clock, k+"="+v)
					}
				}
				if l := tracker.ParseLine(tags[tracker.StateTag("node-0", "")]); l["status"] != "" {
					clock = append(clock, "line clock="+l["clock"])
				}
			}
			for _, c := range clock {
				if _, v, _ := strings.Cut(c, "="); !strings.HasPrefix(v, "clocksource unknown, ") {
					t.Errorf("%s, want the clocksource unknown", c)
				}
			}
			if len(clock) != 2 {
				t.Errorf("clocks %v, want the node's run's tag and its line's\n%s", clock, out)
			}
		})
	}
}

// A SIGTERM while bridge waits on the spool's disk at start (a hard NFS
// mount whose server went away: even the stat does not return) is acted
// on at once, whether bridge is still looking at --spool or already
// opening it: one line says the command never ran, the child never runs,
// and bridge exits 143 long before its bounds on the disk (2 s, then 5 s
// a step) would have let it go on.
func TestSignalDuringStalledSpoolOpen(t *testing.T) {
	for _, tc := range []struct {
		name    string
		waiting int // calls blocked on the disk when the signal is sent
	}{{"checking --spool", 1}, {"opening the spool", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			fs := stallfs.Mount(t)
			fs.StallAll()
			dir := t.TempDir()
			ran := filepath.Join(dir, "ran")
			cmd := exec.Command(testbin.Bridge(t), "--trackers=none", "--spool="+filepath.Join(fs.Dir, "spool.jsonl"), "--", "touch", ran)
			cmd.Dir = dir
			cmd.Env = cleanEnv()
			var errb syncbuf.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() }) // before the mount's cleanup releases the stall
			waitfor.Cond(t, time.Minute, fmt.Sprintf("%d calls blocked on the spool's disk", tc.waiting), func() bool { return fs.Waiting() >= tc.waiting })
			sent := time.Now()
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			err := waitExit(t, cmd, &errb, 2*time.Minute)
			t.Logf("bridge exited %v after the SIGTERM", time.Since(sent))
			if code := exitCode(t, err); code != 143 {
				t.Errorf("exit %d, want 143\n%s", code, &errb)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Error("the child ran after a SIGTERM that came before it started")
			}
			if n := regexp.MustCompile(`SIGTERM arrived while bridge was [a-z ]+, before the command started: the command never ran`).FindAllString(errb.String(), -1); len(n) != 1 {
				t.Errorf("want one line saying the command never ran:\n%s", &errb)
			}
		})
	}
}

// `bridge sync --timeout` on a spool whose disk does not answer exits
// within its timeout (plus the second its last write gets), whether the
// disk stops answering before sync looks at the file (not even its stat
// returns) or once sync writes to it (its writes and fsync block): exit 1,
// and the reason said.
func TestSyncTimeoutStalledDisk(t *testing.T) {
	srv := mlflowtest.Shared(t)
	for _, tc := range []struct {
		name string
		all  bool
	}{{"every call", true}, {"writes and fsync", false}} {
		t.Run(tc.name, func(t *testing.T) {
			fs := stallfs.Mount(t)
			spool := filepath.Join(fs.Dir, "spool.jsonl")
			// A spool to upload: a short job with no tracker.
			job, _, errb := bridgeCmd(t, "--interval=100ms", "--trackers=none", "--spool="+spool, "--", "sleep", "0.5")
			if err := job.Run(); err != nil {
				t.Fatalf("writing the spool: %v\n%s", err, errb)
			}
			if tc.all {
				fs.StallAll()
			} else {
				fs.Stall(true)
			}
			exp := fmt.Sprintf("bridge-e2e-synctimeout-%d", time.Now().UnixNano())
			cmd := exec.Command(testbin.Bridge(t), "sync", "--timeout=3s", spool)
			cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp)
			var out bytes.Buffer
			var serr syncbuf.Buffer
			cmd.Stdout, cmd.Stderr = &out, &serr
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() }) // before the mount's cleanup releases the stall
			waitfor.Cond(t, time.Minute, "a call of sync blocked on the stalled disk", func() bool { return fs.Waiting() >= 1 })
			err := waitExit(t, cmd, &serr, 2*time.Minute)
			t.Logf("bridge sync --timeout=3s exited %v after it started", time.Since(start))
			code := exitCode(t, err)
			if tc.all && code != 1 {
				t.Errorf("exit %d, want 1 (nothing could be read)\n%s%s", code, &out, &serr)
			}
			if tc.all && !strings.Contains(serr.String(), "did not answer") {
				t.Errorf("sync does not say the disk did not answer:\n%s", &serr)
			}
		})
	}
}

// A --spool that is no regular file (/dev/zero, read without end; a FIFO,
// which waits for a writer) does not hold the child back: it starts, its
// exit status is bridge's, and one ERROR names the spool.
func TestSpoolNotRegular(t *testing.T) {
	for _, f := range sysFaults {
		t.Run(f.name, func(t *testing.T) {
			spool := filepath.Join(t.TempDir(), "spool.jsonl")
			if err := f.put(spool); err != nil {
				t.Fatal(err)
			}
			cmd, _, errb := bridgeCmd(t, "--trackers=none", "--interval=200ms", "--spool="+spool, "--", "sh", "-c", "exit 3")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			waitfor.Cond(t, 2*time.Minute, "bridge with a --spool that is "+f.name+" ending", func() bool {
				select {
				case err = <-done:
					return true
				default:
					return false
				}
			})
			if code := exitCode(t, err); code != 3 {
				t.Errorf("exit %d, want the child's 3\n%s", code, errb)
			}
			if !strings.Contains(errb.String(), "the spool is not a regular file") || !strings.Contains(errb.String(), spool) {
				t.Errorf("no ERROR naming the spool as not a regular file:\n%s", errb)
			}
		})
	}
}
