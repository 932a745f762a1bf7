package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
)

// holdMemory is a child that holds about N MB in its resident memory
// (argv[1]) until the file "go" appears in its working directory.
const holdMemory = `import os, sys, time
held = b"x" * (int(sys.argv[1]) * 10**6)
while not os.path.exists("go"):
    time.sleep(0.02)
`

// The job's figures are run metrics at its end, one value each, that the
// runs table sorts by: two jobs holding 40 and 160 MB come back from
// runs/search ordered by system/process_memory_peak_rss_megabytes, each
// with the peak it held; the peak working set metric says what its tag
// says; a figure not measured (GPU-hours: no GPU) is not sent.
func TestEndFiguresSortable(t *testing.T) {
	t.Parallel()
	srv := mlflowtest.Shared(t)
	py := mlflowtest.Python(t)
	exp := "bridge-e2e-figures"
	run := func(mb int) string {
		dir := t.TempDir()
		spool := filepath.Join(dir, "s.jsonl")
		cmd := exec.Command(testbin.Bridge(t), "--interval=100ms", "--spool="+spool, "--", py, "-c", holdMemory, strconv.Itoa(mb))
		cmd.Dir, cmd.Env = dir, cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp)
		out := &syncbuf.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The memory is held until a sample has seen it.
		waitfor.Cond(t, 2*time.Minute, fmt.Sprintf("a sample of the process tree holding %d MB", mb), func() bool {
			ss, _, _, _ := spooltest.ReadFile(spool)
			for _, s := range ss {
				if v, ok := s.Value("process_memory_rss_megabytes"); ok && v >= float64(mb) {
					return true
				}
			}
			return false
		})
		os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
		if code := exitCode(t, cmd.Wait()); code != 0 {
			t.Fatalf("bridge exited %d\n%s", code, out)
		}
		_, _, attempts, err := spooltest.ReadFile(spool)
		if err != nil || len(attempts) == 0 || attempts[0].Start.Runs["mlflow"] == "" {
			t.Fatalf("no run in the spool (%v)\n%s", err, out)
		}
		return attempts[0].Start.Runs["mlflow"]
	}
	small, large := run(40), run(160)

	const rss = "system/process_memory_peak_rss_megabytes"
	runs := srv.OrderedRuns(t, srv.ExperimentID(t, exp), "metrics.`"+rss+"` DESC")
	if len(runs) != 2 || runs[0].Info.RunID != large || runs[1].Info.RunID != small {
		t.Fatalf("runs/search ordered by %s DESC: %v; want %s (160 MB) then %s (40 MB)", rss, runIDs(runs), large, small)
	}
	for i, want := range []float64{160, 40} {
		r := runs[i]
		if m, ok := r.Latest[rss]; !ok || m.Value < want || m.Step != 0 {
			t.Errorf("run %s: %s = %+v (present %v); want one value at step 0, at least %v", r.Info.RunID, rss, m, ok, want)
		}
		ws, ok := r.Latest["system/container_memory_peak_working_set_megabytes"]
		if tag := r.Tags["bridge.peak_working_set_megabytes"]; !ok || tag != strconv.FormatFloat(ws.Value, 'f', 1, 64) {
			t.Errorf("run %s: peak working set metric %v (present %v), tag %q: the figure and its tag differ", r.Info.RunID, ws.Value, ok, tag)
		}
		if _, ok := r.Latest["system/gpu_hours"]; ok {
			t.Errorf("run %s: gpu_hours sent on a machine whose job had no GPU", r.Info.RunID)
		}
	}
}

func runIDs(runs []mlflowtest.Run) []string {
	var ids []string
	for _, r := range runs {
		ids = append(ids, r.Info.RunID)
	}
	return ids
}
