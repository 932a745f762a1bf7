package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
)

// spooledSeqs are the seqs of the complete sample records in a spool file.
func spooledSeqs(t *testing.T, path string) []int64 {
	t.Helper()
	ss, _, _, err := spooltest.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, s := range ss {
		seqs = append(seqs, s.Seq)
	}
	return seqs
}

// bridge is killed with SIGKILL at random moments while it samples every 100 ms,
// and the file is sometimes left torn as by a kill mid-write; every restart
// on the same spool samples normally and keeps every complete sample, and
// `bridge sync` then puts each of them in MLflow exactly once.
func TestCrashAnywhereLosesNothing(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.Shared(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	path := filepath.Join(dir, "spool.jsonl")
	bin := testbin.Bridge(t)
	start := func(args ...string) (*exec.Cmd, *syncbuf.Buffer) {
		var out syncbuf.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = cleanEnv("BRIDGE_SPOOL=" + path)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	var kept []int64 // complete samples so far: none may disappear
	torn := false    // the last attempt left a torn tail
	for i := range 6 {
		before := len(kept)
		cmd, out := start("--interval=100ms", "--trackers=none", "--", "sleep", "3")
		waitfor.Cond(t, 60*time.Second, fmt.Sprintf("attempt %d sampling", i), func() bool {
			if _, err := os.Stat(path); err != nil {
				return false // not created yet
			}
			return len(spooledSeqs(t, path)) > before+2
		})
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		if strings.Contains(out.String(), "without sampling") {
			t.Fatalf("attempt %d ran without sampling:\n%s", i, out)
		}
		if torn && !strings.Contains(out.String(), "torn last line") && !strings.Contains(out.String(), "repaired the spool's last line") {
			t.Fatalf("attempt %d did not report the repair of the torn tail:\n%s", i, out)
		}
		torn = i%3 != 0
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		switch i % 3 {
		case 1: // a kill mid-write: a torn copy of the last record follows it
			last := data[bytes.LastIndexByte(data[:len(data)-1], '\n')+1 : len(data)-1]
			part := last[:1+rng.IntN(len(last)-2)]
			f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			f.Write(part)
			f.Close()
			t.Logf("attempt %d: left %d torn bytes", i, len(part))
		case 2: // a full disk cut the last record short
			cut := len(data) - 1 - rng.IntN(20)
			os.Truncate(path, int64(cut))
			t.Logf("attempt %d: cut the last record at byte %d of %d", i, cut, len(data))
		}
		seqs := spooledSeqs(t, path)
		for _, s := range kept {
			if !slices.Contains(seqs, s) {
				t.Fatalf("attempt %d: sample %d was lost", i, s)
			}
		}
		kept = seqs
	}

	// The next bridge on that spool samples normally.
	cmd, out := start("--interval=100ms", "--trackers=none", "--", "sleep", "1")
	if code := exitCode(t, cmd.Wait()); code != 0 {
		t.Fatalf("bridge after the crashes: exit %d:\n%s", code, out)
	}
	seqs := spooledSeqs(t, path)
	for _, s := range kept {
		if !slices.Contains(seqs, s) {
			t.Fatalf("sample %d was lost by the restart", s)
		}
	}
	if len(seqs) < len(kept)+2 || seqs[len(seqs)-1] <= slices.Max(kept) {
		t.Fatalf("the restarted bridge did not sample: %d samples before, %d after:\n%s", len(kept), len(seqs), out)
	}
	sorted := slices.Clone(seqs)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(seqs) {
		t.Fatalf("a seq appears twice in the spool: %v", seqs)
	}

	// bridge sync delivers every complete sample exactly once.
	sync := exec.Command(bin, "sync", path)
	sync.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME=bridge-e2e-crash")
	so, err := sync.CombinedOutput()
	if code := exitCode(t, err); code != 0 {
		t.Fatalf("sync: exit %d:\n%s", code, so)
	}
	if !strings.Contains(string(so), fmt.Sprintf("%d samples sent", len(seqs))) {
		t.Fatalf("sync did not send all %d samples:\n%s", len(seqs), so)
	}
	_, _, attempts, _ := spooltest.ReadFile(path)
	id := attempts[len(attempts)-1].Start.Runs["mlflow"]
	requireHistory(t, srv, &job{spool: path}, id, "system/node_memory_used_megabytes")
	t.Logf("%d samples over %d attempts, each in MLflow once", len(seqs), len(attempts))
}
