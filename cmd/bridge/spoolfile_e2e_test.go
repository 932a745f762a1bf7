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
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
)

// defaultSpools lists the spools bridge left at its default path in dir.
func defaultSpools(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "bridge-spool-*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A spool at the default path is removed when every sample reached MLflow
// and the run ended cleanly, in a run bridge created or one given to it (a
// later bridge on that run continues its steps from the run); with nothing
// delivered (no tracker) it stays, private to the user, and the table says
// where.
func TestDefaultSpoolRemovedOnlyWhenDelivered(t *testing.T) {
	srv := mlflowtest.Shared(t)
	run := func(env ...string) (string, string) {
		dir := t.TempDir()
		cmd := exec.Command(testbin.Bridge(t), "--interval=200ms", "--", "sleep", "1")
		cmd.Dir = dir
		cmd.Env = cleanEnv(env...)
		out, err := cmd.CombinedOutput()
		if code := exitCode(t, err); code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		return dir, string(out)
	}

	dir, out := run("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME=bridge-e2e-spoolfile")
	if left := defaultSpools(t, dir); len(left) != 0 {
		t.Errorf("a delivered spool was left behind: %v\n%s", left, out)
	}
	if !strings.Contains(out, "so the file was removed") || strings.Contains(out, "never written") {
		t.Errorf("the table does not say the spool was removed, or says records were never written:\n%s", out)
	}

	exp := srv.CreateExperiment(t, "bridge-e2e-spoolfile-given-"+fmt.Sprint(time.Now().UnixNano()))
	id := srv.CreateRun(t, exp, "given")
	dir, out = run("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_RUN_ID="+id)
	if left := defaultSpools(t, dir); len(left) != 0 {
		t.Errorf("the delivered spool of a given run was left behind: %v\n%s", left, out)
	}

	dir, out = run() // no tracker configured
	left := defaultSpools(t, dir)
	if len(left) != 1 {
		t.Fatalf("want the undelivered spool kept, found %v:\n%s", left, out)
	}
	if fi, err := os.Stat(left[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("spool mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if !strings.Contains(out, filepath.Base(left[0])) || len(spooledSeqs(t, left[0])) == 0 {
		t.Errorf("the kept spool is not named in the output or holds no sample:\n%s", out)
	}
}

// A tracker down when the job starts, up later: bridge creates its run in
// the background and sends it every sample; that late start is not giving
// up, so the default spool is removed at the end as when MLflow answered
// at once (before, it was always kept).
func TestDefaultSpoolRemovedAfterLateStart(t *testing.T) {
	srv := mlflowtest.Shared(t)
	p := newProxy(t, srv)
	if err := p.Down(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(testbin.Bridge(t), "--interval=200ms", "--start-timeout=300ms", "--", "sleep", "3")
	cmd.Dir = dir
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+p.URL(), "MLFLOW_EXPERIMENT_NAME=bridge-e2e-spoolfile-late")
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The start record is written once the child started without the run.
	waitfor.Cond(t, 90*time.Second, "the start record in the default spool", func() bool {
		left := defaultSpools(t, dir)
		if len(left) != 1 {
			return false
		}
		_, _, at, err := spooltest.ReadFile(left[0])
		return err == nil && len(at) > 0
	})
	if err := p.Up(); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd.Wait()); code != 0 {
		t.Fatalf("exit %d:\n%s", code, &out)
	}
	if !strings.Contains(out.String(), "tracker answered after the job started") {
		t.Fatalf("the tracker did not start late:\n%s", &out)
	}
	if left := defaultSpools(t, dir); len(left) != 0 || !strings.Contains(out.String(), "so the file was removed") {
		t.Errorf("the delivered spool of a late run was kept: %v\n%s", left, &out)
	}
}
