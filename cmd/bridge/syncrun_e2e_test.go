package main

import (
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/testbin"
)

// syncOnly are the tags only a run `bridge sync` made has, and the one
// that differs on every run bridge creates.
var syncOnly = []string{"bridge.synced_from", "bridge.end_recorded_by", "bridge.start_id"}

// A run `bridge sync` makes after an outage is the run a live upload
// would have made: the same job run twice, once with MLflow up and once
// with it down for the whole job (then synced), gives two runs of the same
// name, each starting when its job started and ending when its child
// exited (as its spool recorded them: no negative duration), with the same
// tags (exit code, reason, command, cgroup, peaks, provenance...), the
// same values where the job decides them, the same status, and the job's
// figures as metrics.
func TestSyncedRunIsTheLiveRun(t *testing.T) {
	t.Parallel()
	srv := mlflowtest.Shared(t)
	exp := "bridge-e2e-synced-run"
	job := func(uri string) (spool string) {
		dir := t.TempDir()
		spool = filepath.Join(dir, "s.jsonl")
		cmd := exec.Command(testbin.Bridge(t), "--interval=200ms", "--spool="+spool, "--", "sh", "-c", "sleep 0.6; exit 3")
		cmd.Dir, cmd.Env = dir, cleanEnv("MLFLOW_TRACKING_URI="+uri, "MLFLOW_EXPERIMENT_NAME="+exp, "LOGNAME=trainer")
		if out, err := cmd.CombinedOutput(); exitCode(t, err) != 3 {
			t.Fatalf("bridge: want the child's exit 3\n%s", out)
		}
		return spool
	}
	recorded := func(spool string) (start, end int64) {
		_, _, attempts, err := spooltest.ReadFile(spool)
		if err != nil || len(attempts) == 0 || attempts[0].End == nil {
			t.Fatalf("spool %s: %v, %d attempts", spool, err, len(attempts))
		}
		start, _ = strconv.ParseInt(attempts[0].Start.Info["bridge.start.time_ms"], 10, 64)
		return start, attempts[0].End.Time
	}

	liveSpool := job(srv.URL)
	_, _, attempts, _ := spooltest.ReadFile(liveSpool)
	live := srv.GetRun(t, attempts[0].Start.Runs["mlflow"])

	downSpool := job(refusedURL(t))
	sync := exec.Command(testbin.Bridge(t), "sync", downSpool)
	sync.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME=elsewhere")
	out, err := sync.CombinedOutput()
	if code := exitCode(t, err); code != 0 || !strings.Contains(string(out), "end recorded") {
		t.Fatalf("bridge sync: exit %d\n%s", code, out)
	}
	_, _, attempts, _ = spooltest.ReadFile(downSpool)
	synced := srv.GetRun(t, attempts[len(attempts)-1].Start.Runs["mlflow"])

	if synced.Info.ExperimentID != live.Info.ExperimentID {
		t.Errorf("synced run in experiment %s, the job's is %s", synced.Info.ExperimentID, live.Info.ExperimentID)
	}
	if synced.Info.RunName != live.Info.RunName || live.Info.RunName != "sleep 0.6" {
		t.Errorf("run names: live %q, synced %q; want the job's, sleep 0.6", live.Info.RunName, synced.Info.RunName)
	}
	if synced.Info.Status != "FAILED" || live.Info.Status != "FAILED" {
		t.Errorf("status: live %s, synced %s; want FAILED (exit 3)", live.Info.Status, synced.Info.Status)
	}
	for name, r := range map[string]struct {
		run   mlflowtest.Run
		spool string
	}{"live": {live, liveSpool}, "synced": {synced, downSpool}} {
		start, end := recorded(r.spool)
		if r.run.Info.StartTime != start || r.run.Info.EndTime != end || end < start {
			t.Errorf("%s run: start %d end %d; its spool recorded the job's start %d and the child's exit %d",
				name, r.run.Info.StartTime, r.run.Info.EndTime, start, end)
		}
	}
	strip := func(tags map[string]string) map[string]string {
		out := maps.Clone(tags)
		for _, k := range syncOnly {
			delete(out, k)
		}
		return out
	}
	lt, st := strip(live.Tags), strip(synced.Tags)
	if lk, sk := slices.Sorted(maps.Keys(lt)), slices.Sorted(maps.Keys(st)); !slices.Equal(lk, sk) {
		t.Errorf("tags differ:\nlive   %v\nsynced %v", lk, sk)
	}
	for _, k := range []string{"bridge.exit_code", "bridge.exit_reason", "bridge.command", "bridge.cgroup.path", "mlflow.user",
		"mlflow.source.name", "mlflow.source.type", "mlflow.runName"} {
		if lt[k] == "" || lt[k] != st[k] {
			t.Errorf("tag %s: live %q, synced %q", k, lt[k], st[k])
		}
	}
	if st["bridge.exit_code"] != "3" || st["bridge.peak_working_set_megabytes"] == "" {
		t.Errorf("synced run lacks the end's tags: %v", st)
	}
	for k := range live.Latest {
		if strings.HasPrefix(k, "system/container_memory_peak") || strings.HasPrefix(k, "system/process_memory_peak") {
			if _, ok := synced.Latest[k]; !ok {
				t.Errorf("the live run has the figure %s, the synced one does not", k)
			}
		}
	}
}
