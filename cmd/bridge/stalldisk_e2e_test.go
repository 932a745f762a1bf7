package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/stallfs"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
)

// stalledJob runs the real binary with its spool on a stallfs mount, the
// child waiting for a file to exit 7, and stalls the spool's fsync (as a
// hard NFS mount whose server went away) once bridge has fsynced it. It
// returns when an fsync is blocked (args must make one due: --spool-sync
// 0, or no tracker to hold the samples); goFile lets the child exit (it
// writes its pid to exited first).
func stalledJob(t *testing.T, env []string, args ...string) (cmd *exec.Cmd, out *syncbuf.Buffer, spool string, goFile, exited string) {
	t.Helper()
	fs := stallfs.Mount(t)
	spool = filepath.Join(fs.Dir, "spool.jsonl")
	dir := t.TempDir()
	goFile, exited = filepath.Join(dir, "go"), filepath.Join(dir, "exited")
	args = append([]string{"--interval=200ms", "--spool=" + spool}, args...)
	args = append(args, "--", "sh", "-c", `while [ ! -e "$0" ]; do sleep 0.1; done; echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exit 7`, goFile, exited)
	cmd = exec.Command(testbin.Bridge(t), args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv(env...)
	out = &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() }) // before the mount's cleanup releases the stall
	waitfor.Cond(t, 60*time.Second, "bridge to fsync its spool", func() bool { return fs.Syncs() >= 1 })
	fs.Stall(false)
	waitfor.Cond(t, 60*time.Second, "bridge's next fsync to stall", func() bool { return fs.Waiting() >= 1 })
	return cmd, out, spool, goFile, exited
}

// waitExit waits for cmd, killing it and failing t if it is still
// running after d.
func waitExit(t *testing.T, cmd *exec.Cmd, out fmt.Stringer, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		cmd.Process.Kill()
		<-done
		t.Fatalf("bridge still running after %v; output:\n%s", d, out)
		return nil
	}
}

// checkStallReported checks that bridge's log and end-of-run table name
// the spool and say that its disk stalled.
func checkStallReported(t *testing.T, out, spool string) {
	t.Helper()
	var logged, row bool
	for _, l := range strings.Split(out, "\n") {
		logged = logged || strings.Contains(l, "disk under the spool does not answer") && strings.Contains(l, spool)
		row = row || strings.Contains(l, spool) && strings.Contains(l, "the disk stalled (its fsync had not returned")
	}
	if !logged || !row {
		t.Errorf("the log (%v) or the end-of-run table (%v) does not name %s and the stall:\n%s", logged, row, spool, out)
	}
}

// The spool's disk stalls during the job: samples still reach MLflow from
// memory, and once the child exits bridge ends within --flush-timeout (plus
// the documented second) with the child's status, saying what the disk
// did not take.
func TestStalledSpoolDiskEndsInTime(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := srv.CreateExperiment(t, "bridge-e2e-stalldisk-"+fmt.Sprint(time.Now().UnixNano()))
	id := srv.CreateRun(t, exp, "stalled-disk")
	const key = "system/node_memory_used_megabytes"
	// --spool-sync=0: every write is fsynced, so the stall comes at once,
	// whatever MLflow acknowledges.
	cmd, out, spool, goFile, exited := stalledJob(t, []string{"MLFLOW_TRACKING_URI=" + srv.URL, "MLFLOW_RUN_ID=" + id},
		"--spool-sync=0", "--flush-timeout=3s")
	before := len(srv.History(t, id, key))
	waitfor.Cond(t, 60*time.Second, "samples reaching MLflow while the spool's fsync is stalled", func() bool {
		return len(srv.History(t, id, key)) >= before+3
	})
	os.WriteFile(goFile, nil, 0o600)
	at := waitfor.File(t, 60*time.Second, exited)
	err := waitExit(t, cmd, out, 60*time.Second)
	// 3s of flush timeout and a documented 1s, with 4s of margin for a
	// loaded machine; before, bridge waited for the disk without end.
	t.Logf("bridge exited %v after the child (--flush-timeout=3s, spool fsync stalled)", time.Since(at))
	if d := time.Since(at); d > 8*time.Second {
		t.Errorf("bridge exited %v after the child, want within --flush-timeout=3s (+1s)", d)
	}
	if code := exitCode(t, err); code != 7 {
		t.Errorf("exit %d, want the child's 7; output:\n%s", code, out)
	}
	checkStallReported(t, out.String(), spool)
}

// A second SIGTERM after the child's exit ends the wait for a stalled
// spool at once, with the child's status, however long --flush-timeout.
func TestStalledSpoolDiskSecondSignal(t *testing.T) {
	cmd, out, spool, goFile, exited := stalledJob(t, nil, "--trackers=none", "--spool-sync=100ms", "--flush-timeout=10m")
	os.WriteFile(goFile, nil, 0o600)
	waitfor.File(t, 60*time.Second, exited)
	waitGone(t, exited)
	took, werr := termUntilExit(t, cmd, out)
	t.Logf("bridge exited %v after the first signal that followed the child's exit (--flush-timeout=10m)", took)
	if took > 10*time.Second {
		t.Errorf("bridge took %v to exit after the second signal (flush timeout 10m)", took)
	}
	if code := exitCode(t, werr); code != 7 {
		t.Errorf("exit %d, want the child's 7; output:\n%s", code, out)
	}
	checkStallReported(t, out.String(), spool)
}

// A spool whose disk answers nothing from the start (a hung NFS mount: not
// even the open returns) does not hold the child back: bridge gives up on
// it after the documented bound, starts the child, sends the samples to
// MLflow from memory, passes the child's status through, and says why.
func TestStalledSpoolDiskAtStart(t *testing.T) {
	t.Parallel()
	srv := mlflowtest.Shared(t)
	exp := srv.CreateExperiment(t, "bridge-e2e-stallstart-"+fmt.Sprint(time.Now().UnixNano()))
	id := srv.CreateRun(t, exp, "stalled-at-start")
	const key = "system/node_memory_used_megabytes"
	fs := stallfs.Mount(t)
	fs.StallAll()
	spool := filepath.Join(fs.Dir, "spool.jsonl")
	dir := t.TempDir()
	goFile, started := filepath.Join(dir, "go"), filepath.Join(dir, "started")
	cmd := exec.Command(testbin.Bridge(t), "--interval=200ms", "--spool="+spool, "--",
		"sh", "-c", `: > "$1"; while [ ! -e "$0" ]; do sleep 0.1; done; exit 7`, goFile, started)
	cmd.Dir = dir
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_RUN_ID="+id)
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() }) // before the mount's cleanup releases the stall
	at := waitfor.File(t, 60*time.Second, started)
	t.Logf("the child started %v after bridge (the spool's open gives up after 5s without an answer)", at.Sub(begin))
	waitfor.Cond(t, 60*time.Second, "samples reaching MLflow from memory", func() bool {
		return len(srv.History(t, id, key)) >= 3
	})
	if fs.Waiting() < 1 {
		t.Errorf("no call is blocked on the stalled disk: the test did not stall the spool's open")
	}
	os.WriteFile(goFile, nil, 0o600)
	exitAt := time.Now()
	err := waitExit(t, cmd, out, 60*time.Second)
	t.Logf("bridge exited %v after the child was let go", time.Since(exitAt))
	if code := exitCode(t, err); code != 7 {
		t.Errorf("exit %d, want the child's 7; output:\n%s", code, out)
	}
	var logged, row bool
	for _, l := range strings.Split(out.String(), "\n") {
		logged = logged || strings.Contains(l, "the disk under the spool does not answer") && strings.Contains(l, spool)
		row = row || strings.Contains(l, "spool") && strings.Contains(l, "none: it could not be opened")
	}
	if !logged || !row {
		t.Errorf("the log (%v) or the end-of-run table's spool row (%v) does not say the spool's disk did not answer:\n%s", logged, row, out)
	}
}
