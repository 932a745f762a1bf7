package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/pipeline"
)

// The tracker is down at start, so bridge creates its run later in the
// background; that run is recorded in the spool. bridge is then SIGKILLed
// with samples unsent (the tracker down again), and `bridge sync` of the
// spool finds that run (no new one) and puts every sample into it exactly
// once, ending it as KILLED (bridge created it).
func TestFaultLateRunSurvivesKill(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.Shared(t)
	p := newProxy(t, srv)
	exp := fmt.Sprintf("bridge-fault-laterun-%d", time.Now().UnixNano())
	srv.CreateExperiment(t, exp)
	if err := p.Down(); err != nil {
		t.Fatal(err)
	}
	// The child's pid goes to a file: bridge's output is not the test's to
	// read while bridge runs.
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	j := newJob(t, p.URL(), "--interval=300ms", "--", "sh", "-c", `echo $$ > "$0"; exec sleep 600`, pidFile)
	j.env("MLFLOW_EXPERIMENT_NAME="+exp, "MLFLOW_HTTP_REQUEST_TIMEOUT=3")
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// bridge is SIGKILLed below: its child (a process group of its own,
	// holding bridge's stdout, which Wait drains) is this test's to end.
	killChild := func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	t.Cleanup(func() {
		j.cmd.Process.Kill()
		killChild()
		j.cmd.Wait()
	})
	spooledRun := func() string {
		_, _, at, err := spooltest.ReadFile(j.spool)
		if err != nil || len(at) == 0 {
			return ""
		}
		return at[len(at)-1].Start.Runs["mlflow"]
	}
	waitfor.Cond(t, 90*time.Second, "the start record", func() bool {
		_, _, at, err := spooltest.ReadFile(j.spool)
		return err == nil && len(at) > 0
	})
	if id := spooledRun(); id != "" {
		t.Fatalf("the start record names run %q while the tracker was down", id)
	}
	// Samples spooled while the tracker is down: the late run gets them too.
	waitfor.Cond(t, 90*time.Second, "two samples spooled while the tracker is down", func() bool {
		ss, _, _, err := spooltest.ReadFile(j.spool)
		return err == nil && len(ss) >= 2
	})
	if err := p.Up(); err != nil {
		t.Fatal(err)
	}
	var run string
	waitfor.Cond(t, 120*time.Second, "the late run recorded in the spool", func() bool {
		run = spooledRun()
		return run != ""
	})
	// Some samples reach the run before the kill, so that sync must skip
	// what was acknowledged.
	waitfor.Cond(t, 120*time.Second, "acknowledgements for the late run", func() bool {
		_, acks, _, err := spooltest.ReadFile(j.spool)
		return err == nil && acks["mlflow\x00"+run] >= 2
	})
	if err := p.Down(); err != nil {
		t.Fatal(err)
	}
	n := len(j.samples(t))
	waitfor.Cond(t, 60*time.Second, "samples spooled while the tracker is down again", func() bool {
		return len(j.samples(t)) >= n+3
	})
	j.cmd.Process.Kill()
	killChild()
	j.cmd.Wait()
	_, acks, at, err := spooltest.ReadFile(j.spool)
	if err != nil {
		t.Fatal(err)
	}
	if at[0].Start.Info[pipeline.CreatedTag("mlflow")] != "true" {
		t.Errorf("the spool does not say bridge created run %s: %+v", run, at[0].Start.Info)
	}
	seqs := j.samples(t)
	if _, ok := acks["mlflow\x00"]; ok {
		t.Errorf("acknowledgements recorded under an empty run id: %v", acks)
	}
	if last := seqs[len(seqs)-1]; acks["mlflow\x00"+run] >= last {
		t.Fatalf("every sample was acknowledged before the kill (%d of up to %d): nothing left for sync", acks["mlflow\x00"+run], last)
	}

	cmd := exec.Command(testbin.Bridge(t), "sync", j.spool)
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp)
	out, err := cmd.CombinedOutput()
	if code := exitCode(t, err); code != 0 {
		t.Fatalf("sync: exit %d:\n%s", code, out)
	}
	if !strings.Contains(string(out), "mlflow run "+run+":") {
		t.Fatalf("sync did not upload to the late run %s:\n%s", run, out)
	}
	if ids := srv.RunIDs(t, exp); len(ids) != 1 || ids[0] != run {
		t.Errorf("runs in the experiment %v, want only bridge's late run %s", ids, run)
	}
	requireHistory(t, srv, j, run, faultKey)
	if st := srv.GetRun(t, run).Info.Status; st != "KILLED" {
		t.Errorf("run %s is %s after sync, want KILLED (bridge created it and was killed)", run, st)
	}
}
