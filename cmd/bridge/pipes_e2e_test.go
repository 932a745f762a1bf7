package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/testbin"
)

// deadPipe is the write end of a pipe whose reader has gone: every write to
// it fails with EPIPE and raises SIGPIPE (`bridge ... 2>&1 | tee log` after
// tee died).
func deadPipe(t *testing.T) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() { w.Close() })
	return w
}

// requireEnded checks what a job whose output failed must still have done:
// the spool's end record holds the child's exit code, and the MLflow run
// bridge created is ended with the matching status.
func requireEnded(t *testing.T, srv *mlflowtest.Server, j *job, code int, status string) {
	t.Helper()
	_, _, attempts, err := spooltest.ReadFile(j.spool)
	if err != nil || len(attempts) == 0 {
		t.Fatalf("reading the spool: %v (%d attempts)", err, len(attempts))
	}
	end := attempts[len(attempts)-1].End
	if end == nil || end.ExitCode == nil || *end.ExitCode != code {
		t.Fatalf("the spool's end record is %+v, want exit code %d", end, code)
	}
	run := srv.GetRun(t, j.runID(t))
	if run.Info.Status != status || run.Info.EndTime == 0 {
		t.Fatalf("MLflow run %s, end time %d; want %s with an end time", run.Info.Status, run.Info.EndTime, status)
	}
}

// bridge's stdout or stderr is a pipe whose reader went away before bridge
// started: bridge logs into it (at debug level, every sample) and still
// starts the child, passes its exit status, ends the run and writes the
// spool's end record.
func TestOutputClosedBeforeStart(t *testing.T) {
	srv := mlflowtest.Shared(t)
	for _, which := range []string{"stderr", "stdout", "both"} {
		t.Run(which, func(t *testing.T) {
			j := newJob(t, srv.URL, "--log-level=debug", "--interval=200ms", "--", "sh", "-c", "touch started; sleep 1; exit 3")
			if which != "stdout" {
				j.cmd.Stderr = deadPipe(t)
			}
			if which != "stderr" {
				j.cmd.Stdout = deadPipe(t)
			}
			if code := j.run(t); code != 3 {
				t.Fatalf("exit %d, want the child's 3 (bridge must not die of SIGPIPE)", code)
			}
			if _, err := os.Stat(filepath.Join(j.dir, "started")); err != nil {
				t.Fatal("the child never started")
			}
			requireEnded(t, srv, j, 3, "FAILED")
		})
	}
}

// The reader of bridge's stderr goes away while the child runs (a log
// shipper restarting): bridge keeps sampling and logging into the dead
// pipe, and the job ends as it would have.
func TestStderrClosedMidRun(t *testing.T) {
	srv := mlflowtest.Shared(t)
	j := newJob(t, srv.URL, "--log-level=debug", "--interval=200ms", "--",
		"sh", "-c", "while [ ! -e go ]; do sleep 0.05; done; sleep 1; exit 5")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	j.cmd.Stderr = w
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { j.cmd.Process.Kill() })
	// Read until bridge has logged a sample, so that it is mid-run.
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "level=") {
				lines <- sc.Text()
				return
			}
		}
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("bridge's stderr closed before it logged anything")
		}
		t.Logf("read %q, closing the reader", l[:min(len(l), 60)])
	case <-time.After(60 * time.Second):
		t.Fatal("bridge logged nothing within 60s")
	}
	r.Close()
	if err := os.WriteFile(filepath.Join(j.dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, j.cmd.Wait()); code != 5 {
		t.Fatalf("exit %d, want the child's 5 (bridge must not die of SIGPIPE)", code)
	}
	requireEnded(t, srv, j, 5, "FAILED")
}

// The reader of bridge's stderr stays but stops reading (a stalled log
// shipper): the pipe is full before bridge starts, so every write would
// block, in a blocking pipe and in a non-blocking one (O_NONBLOCK is shared
// by everyone writing to the pipe). bridge still starts the child, ends
// the job and exits with its status, not when the reader wakes up.
func TestStderrStalledReader(t *testing.T) {
	srv := mlflowtest.Shared(t)
	for _, nonblock := range []bool{false, true} {
		t.Run(fmt.Sprintf("nonblocking=%v", nonblock), func(t *testing.T) {
			j := newJob(t, srv.URL, "--interval=200ms", "--", "sh", "-c", "touch started; sleep 1; exit 6")
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close() // kept open, never read
			defer w.Close()
			fd := int(w.Fd())
			fillPipe(t, fd)
			if err := unix.SetNonblock(fd, nonblock); err != nil {
				t.Fatal(err)
			}
			j.cmd.Stderr = w
			if err := j.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { j.cmd.Process.Kill() })
			done := make(chan error, 1)
			go func() { done <- j.cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(2 * time.Minute):
				t.Fatal("bridge did not exit while its stderr was stalled")
			}
			if code := exitCode(t, err); code != 6 {
				t.Fatalf("exit %d, want the child's 6", code)
			}
			if _, err := os.Stat(filepath.Join(j.dir, "started")); err != nil {
				t.Fatal("the child never started")
			}
			requireEnded(t, srv, j, 6, "FAILED")
		})
	}
}

// fillPipe writes to the pipe's write end fd until it is full.
func fillPipe(t *testing.T, fd int) {
	t.Helper()
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	page := make([]byte, 4096)
	for {
		if _, err := unix.Write(fd, page); err != nil {
			if err == unix.EAGAIN {
				break
			}
			t.Fatalf("filling the pipe: %v", err)
		}
	}
	// Whatever room is left is less than a page: fill it byte by byte.
	for {
		if _, err := unix.Write(fd, page[:1]); err != nil {
			return
		}
	}
}

// `bridge sample` and `bridge sync` print to stdout: a reader that went away
// (`bridge sample | head -1`) costs the output, not the work. sync still
// uploads the spool and ends the run.
func TestSampleAndSyncWithClosedOutput(t *testing.T) {
	srv := mlflowtest.Shared(t)
	sample := exec.Command(testbin.Bridge(t), "sample", "--json", "--window=100ms", "--trackers=none")
	sample.Env = cleanEnv()
	sample.Stdout, sample.Stderr = deadPipe(t), deadPipe(t)
	if code := exitCode(t, sample.Run()); code != 0 {
		t.Fatalf("bridge sample into a closed pipe: exit %d, want 0", code)
	}

	j := newJob(t, "", "--interval=200ms", "--trackers=none", "--", "sh", "-c", "sleep 0.6; exit 4")
	if code := j.run(t); code != 4 {
		t.Fatalf("offline job: exit %d; stderr:\n%s", code, &j.err)
	}
	sync := exec.Command(testbin.Bridge(t), "sync", j.spool)
	sync.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+uniqueName(t))
	sync.Stdout, sync.Stderr = deadPipe(t), deadPipe(t)
	if code := exitCode(t, sync.Run()); code != 0 {
		t.Fatalf("bridge sync into closed pipes: exit %d, want 0", code)
	}
	samples, _, attempts, err := spooltest.ReadFile(j.spool)
	if err != nil {
		t.Fatal(err)
	}
	id := attempts[len(attempts)-1].Start.Runs["mlflow"]
	if id == "" {
		t.Fatal("sync recorded no MLflow run in the spool")
	}
	if run := srv.GetRun(t, id); run.Info.Status != "FAILED" || run.Info.EndTime == 0 {
		t.Errorf("synced run %s end %d, want FAILED (the job's exit 4) with an end time", run.Info.Status, run.Info.EndTime)
	}
	if n := len(srv.History(t, id, "system/node_memory_used_megabytes")); n != len(samples) {
		t.Errorf("%d points in MLflow, want the spool's %d samples", n, len(samples))
	}
}

// bridge started with SIGPIPE ignored (a parent that ignores it, as Python
// does) still gives the child SIGPIPE's default disposition: a child that
// inherited it ignored would spin on EPIPE where it would have ended.
func TestChildGetsDefaultSIGPIPE(t *testing.T) {
	bin := testbin.Bridge(t)
	// grep, exec'd by bridge, reads its own status: a shell in between
	// would keep an inherited ignore whatever bridge did.
	cmd := exec.Command("sh", "-c", `trap "" PIPE; exec "$0" --trackers=none --spool="$1" -- grep SigIgn /proc/self/status`,
		bin, filepath.Join(t.TempDir(), "spool.jsonl"))
	cmd.Env = cleanEnv()
	out, err := cmd.Output()
	if code := exitCode(t, err); code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	hex, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "SigIgn:")
	mask, perr := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
	if !ok || perr != nil {
		t.Fatalf("cannot read the child's SigIgn from %q", out)
	}
	const sigpipe = 13
	if mask&(1<<(sigpipe-1)) != 0 {
		t.Fatalf("the child inherited SIGPIPE ignored (SigIgn %s)", strings.TrimSpace(hex))
	}
}
