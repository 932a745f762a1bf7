package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
)

// mountTmpfs mounts a small tmpfs on a fresh directory, unmounted at cleanup.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Skipf("SKIPPED: the disk-full test needs to mount a tmpfs (root, CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", path, err)
			}
			break
		}
	}
	// The last bytes a page could hold.
	for {
		if _, err := f.Write(chunk[:1]); err != nil {
			return
		}
	}
}

// The spool's filesystem is full from the start: bridge says so once, the
// samples still reach MLflow, writing resumes by itself once space returns
// (said once), every sample ends in the file, and the end-of-run table counts
// the failures.
func TestDiskFullSpoolRecovers(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := srv.CreateExperiment(t, "bridge-e2e-diskfull-"+fmt.Sprint(time.Now().UnixNano()))
	id := srv.CreateRun(t, exp, "disk-full")
	mnt := mountTmpfs(t, "256k")
	filler := filepath.Join(mnt, "filler")
	fill(t, filler)
	path := filepath.Join(mnt, "spool.jsonl")

	work := t.TempDir()
	var out syncbuf.Buffer
	cmd := exec.Command(testbin.Bridge(t), "--interval=200ms", "--", "sh", "-c",
		"while [ ! -e go ]; do sleep 0.1; done; sleep 1")
	cmd.Dir = work
	cmd.Env = cleanEnv("BRIDGE_SPOOL="+path, "MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_RUN_ID="+id)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })

	const key = "system/node_memory_used_megabytes"
	waitfor.Cond(t, 60*time.Second, "the write failure message", func() bool {
		return strings.Contains(out.String(), "cannot write the spool")
	})
	waitfor.Cond(t, 60*time.Second, "samples reaching MLflow while the disk is full", func() bool {
		return len(srv.History(t, id, key)) >= 3
	})
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("the spool was written on a full disk: %v %v", fi, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, 60*time.Second, "the recovery message", func() bool {
		return strings.Contains(out.String(), "writable again")
	})
	os.WriteFile(filepath.Join(work, "go"), nil, 0o600)
	if code := exitCode(t, cmd.Wait()); code != 0 {
		t.Fatalf("exit %d:\n%s", code, &out)
	}
	stderr := out.String()
	if n := strings.Count(stderr, "cannot write the spool"); n != 1 {
		t.Errorf("%d write-failure messages, want 1:\n%s", n, stderr)
	}
	if n := strings.Count(stderr, "writable again"); n != 1 {
		t.Errorf("%d recovery messages, want 1:\n%s", n, stderr)
	}
	if strings.Count(stderr, "level=ERROR") != 1 {
		t.Errorf("want exactly one ERROR line (the write failure):\n%s", stderr)
	}
	var row string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "spool") && strings.Contains(l, "samples written") {
			row = l
		}
	}
	if !strings.Contains(row, "writing to it failed") || !strings.Contains(row, "in 1 outage") {
		t.Errorf("the end-of-run table does not count the failures (row %q):\n%s", row, stderr)
	}
	// Every sample is in the file (written late, in order) and in MLflow once.
	seqs := spooledSeqs(t, path)
	for i, s := range seqs {
		if s != int64(i) {
			t.Fatalf("spooled seqs %v, want 0..%d in order", seqs, len(seqs)-1)
		}
	}
	requireHistory(t, srv, &job{spool: path}, id, key)
	t.Logf("%d samples, all spooled after the outage and in MLflow once", len(seqs))
}
