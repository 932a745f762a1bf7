package main

// bridge sync end to end: the real binary on spools real jobs left, against
// a real MLflow server.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/internal/mlflowtest"
	"github.com/bridge-dev/bridge/internal/testbin"
	"github.com/bridge-dev/bridge/spool/spooltest"
)

// bridge sync never drops a sample it has yet to send, whatever the spool's
// size and whatever --spool-max-size the environment carries (a job's
// BRIDGE_ variables are usually still set where sync runs): a spool many
// times that cap, none of it sent, reaches MLflow whole, and the file keeps
// every sample.
func TestSyncLargerThanCapSendsEverything(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := uniqueName(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "big.jsonl")
	offline := bridgeIn(t, dir, srv, exp, "--interval=100ms", "--trackers=none", "--spool-max-size=0", "--spool="+path, "--", "sleep", "1.5")
	if out, err := offline.CombinedOutput(); exitCode(t, err) != 0 {
		t.Fatalf("offline job:\n%s", out)
	}
	const capBytes = 4 << 10
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < 4*capBytes {
		t.Fatalf("the spool holds %d bytes, want well over the %d-byte cap", fi.Size(), capBytes)
	}
	before := spooledSeqs(t, path)
	copied := filepath.Join(t.TempDir(), "before.jsonl") // what MLflow must hold
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(testbin.Bridge(t), "sync", path)
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp, "BRIDGE_SPOOL_MAX_SIZE=4KiB")
	out, err := cmd.CombinedOutput()
	if code := exitCode(t, err); code != 0 {
		t.Fatalf("sync: exit %d:\n%s", code, out)
	}
	if strings.Contains(string(out), "size cap") {
		t.Errorf("sync applied a size cap:\n%s", out)
	}
	if after := spooledSeqs(t, path); len(after) != len(before) {
		t.Errorf("the spool held %d samples before sync and %d after: sync removed samples", len(before), len(after))
	}
	_, _, attempts, err := spooltest.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	run := attempts[len(attempts)-1].Start.Runs["mlflow"]
	requireHistory(t, srv, &job{spool: copied}, run, memKey)
}
