package main

import (
	"errors"
	"github.com/bridge-dev/bridge/mocks/faultproxy"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/spool"
)

const memKey = "system/node_memory_used_megabytes"

// bridgeIn is the real bridge binary run in dir against srv's experiment exp.
func bridgeIn(t *testing.T, dir string, srv *mlflowtest.Server, exp string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(testbin.Bridge(t), args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp)
	return cmd
}

// stepsOf is the steps MLflow holds for key in run, sorted.
func stepsOf(t *testing.T, srv *mlflowtest.Server, run, key string) []int64 {
	t.Helper()
	var steps []int64
	for _, m := range srv.History(t, run, key) {
		steps = append(steps, m.Step)
	}
	slices.Sort(steps)
	return steps
}

// seqsWith is the seqs of the samples that carry name, within [from, to].
func seqsWith(ss []metrics.Sample, name string, from, to int64) []int64 {
	var out []int64
	for _, s := range ss {
		if _, ok := s.Value(name); ok && s.Seq >= from && s.Seq <= to {
			out = append(out, s.Seq)
		}
	}
	return out
}

// offlineSpool runs a short job with no tracker and returns its spool.
func offlineSpool(t *testing.T, srv *mlflowtest.Server, exp string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	offline := bridgeIn(t, dir, srv, exp, "--interval=200ms", "--trackers=none", "--spool="+path, "--", "sleep", "0.8")
	if out, err := offline.CombinedOutput(); exitCode(t, err) != 0 {
		t.Fatalf("offline job:\n%s", out)
	}
	return path
}

// Two bridges given one --spool: the second never writes into it; its job
// runs with its exit status, its samples reach its own run from memory, and
// it says which file is taken and what to do. The file holds the first
// bridge's attempt alone, each sample once, all of them in its run.
func TestOneWriterTwoBridges(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := uniqueName(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "shared.jsonl")
	var out1 syncbuf.Buffer
	first := bridgeIn(t, dir, srv, exp, "--interval=200ms", "--", "sh", "-c", "while [ ! -e go ]; do sleep 0.1; done")
	first.Env = append(first.Env, "BRIDGE_SPOOL="+path)
	first.Stdout, first.Stderr = &out1, &out1
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Process.Kill() })
	waitfor.Cond(t, 60*time.Second, "the first bridge's samples in the spool", func() bool {
		ss, _, _, _ := spooltest.ReadFile(path)
		return len(ss) >= 2
	})

	second := bridgeIn(t, t.TempDir(), srv, exp, "--interval=200ms", "--", "sh", "-c", "sleep 1.5; exit 3")
	second.Env = append(second.Env, "BRIDGE_SPOOL="+path)
	out2, err := second.CombinedOutput()
	if code := exitCode(t, err); code != 3 {
		t.Fatalf("second bridge: exit %d, want its child's 3:\n%s", code, out2)
	}
	if !strings.Contains(string(out2), "another bridge is writing this spool") || !strings.Contains(string(out2), path) ||
		!strings.Contains(string(out2), "give each job its own --spool") {
		t.Errorf("the second bridge does not say the spool is taken, which, and what to do:\n%s", out2)
	}
	if strings.Contains(string(out2), "previous attempt") {
		t.Errorf("the second bridge took the live one for a lost attempt:\n%s", out2)
	}

	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, first.Wait()); code != 0 {
		t.Fatalf("first bridge: exit %d:\n%s", code, &out1)
	}
	ss, _, attempts, err := spooltest.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 1 || attempts[0].Start.PID != first.Process.Pid {
		t.Fatalf("the spool holds %d attempts (%+v), want the first bridge's alone", len(attempts), attempts)
	}
	for i := 1; i < len(ss); i++ {
		if ss[i].Seq <= ss[i-1].Seq {
			t.Fatalf("seqs in the spool repeat or go back: %d after %d", ss[i].Seq, ss[i-1].Seq)
		}
	}
	firstRun := attempts[0].Start.Runs["mlflow"]
	requireHistory(t, srv, &job{spool: path}, firstRun, memKey)
	var secondRun string
	for _, id := range srv.RunIDs(t, exp) {
		if id != firstRun {
			secondRun = id
		}
	}
	if secondRun == "" {
		t.Fatalf("the second bridge created no run:\n%s", out2)
	}
	if n := len(srv.History(t, secondRun, memKey)); n < 2 {
		t.Errorf("the second bridge's run holds %d samples, want its own, sent from memory:\n%s", n, out2)
	}
	if run := srv.GetRun(t, secondRun); run.Info.Status != "FAILED" || run.Tags["bridge.exit_code"] != "3" {
		t.Errorf("the second bridge's run is %s with exit code tag %q, want FAILED and 3", run.Info.Status, run.Tags["bridge.exit_code"])
	}
}

// The writer lock goes with the process, however it dies: after a kill -9
// of bridge the spool is free at once.
func TestSpoolLockReleasedByKill(t *testing.T) {
	srv := mlflowtest.Shared(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	cmd := bridgeIn(t, dir, srv, uniqueName(t), "--interval=100ms", "--trackers=none", "--spool="+path, "--",
		"sh", "-c", "echo $$ > pid.tmp; mv pid.tmp pid; exec sleep 600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitfor.File(t, 60*time.Second, filepath.Join(dir, "pid"))
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	t.Cleanup(func() { syscall.Kill(-child, syscall.SIGKILL) })
	waitfor.Cond(t, 60*time.Second, "samples in the spool", func() bool {
		ss, _, _, _ := spooltest.ReadFile(path)
		return len(ss) >= 2
	})
	if _, err := spooltest.Open(path); !errors.Is(err, spool.ErrLocked) {
		t.Fatalf("open while bridge runs: %v, want it locked", err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	// The child lives on (bridge alone was killed): it never held the lock.
	sp, err := spooltest.Open(path)
	if err != nil {
		t.Fatalf("open after kill -9: %v", err)
	}
	if len(sp.Attempts()) != 1 {
		t.Errorf("attempts %+v", sp.Attempts())
	}
	sp.Close()
}

// Two overlapping `bridge sync` of one spool: the second refuses at once,
// creating nothing; once the first has gone, a sync uploads everything to
// one run.
func TestOverlappingSyncs(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := uniqueName(t)
	path := offlineSpool(t, srv, exp)
	// The first sync's tracker accepts and never answers: it holds the
	// spool while it waits for its start timeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	})
	first := exec.Command(testbin.Bridge(t), "sync", "--start-timeout=10m", path)
	first.Env = cleanEnv("MLFLOW_TRACKING_URI=http://"+ln.Addr().String(), "MLFLOW_EXPERIMENT_NAME="+exp)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Process.Kill(); first.Wait() })
	select {
	case c := <-accepted:
		accepted <- c
	case <-time.After(60 * time.Second):
		t.Fatal("the first sync never reached its tracker")
	}

	code, out := syncCmd(t, srv, exp, path)
	if code != 1 || !strings.Contains(out, "is being written by a running bridge") || !strings.Contains(out, path) {
		t.Fatalf("second sync: exit %d, want 1 saying the spool is in use:\n%s", code, out)
	}
	if ids := srv.RunIDs(t, exp); len(ids) != 0 {
		t.Fatalf("the refused sync created runs %v", ids)
	}
	first.Process.Kill()
	first.Wait()
	code, out = syncCmd(t, srv, exp, path)
	if code != 0 {
		t.Fatalf("sync after the first was gone: exit %d:\n%s", code, out)
	}
	ids := srv.RunIDs(t, exp)
	if len(ids) != 1 {
		t.Fatalf("runs %v, want one", ids)
	}
	requireHistory(t, srv, &job{spool: path}, ids[0], memKey)
}

// A --spool reused by a second job: each run holds its own job's samples
// only (MLflow's metric history), and sync --run-id does not move them.
func TestReusedSpoolKeepsJobsApart(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := uniqueName(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "reused.jsonl")
	for _, name := range []string{"A", "B"} {
		cmd := bridgeIn(t, dir, srv, exp, "--interval=200ms", "--run-name="+name, "--spool="+path, "--", "sleep", "1")
		if out, err := cmd.CombinedOutput(); exitCode(t, err) != 0 {
			t.Fatalf("job %s:\n%s", name, out)
		}
	}
	ss, _, attempts, err := spooltest.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 2 || attempts[0].LastSample == nil {
		t.Fatalf("attempts %+v, want two jobs", attempts)
	}
	runA, runB := attempts[0].Start.Runs["mlflow"], attempts[1].Start.Runs["mlflow"]
	endA := attempts[0].LastSample.Seq
	name := strings.TrimPrefix(memKey, "system/")
	if got, want := stepsOf(t, srv, runA, memKey), seqsWith(ss, name, 0, endA); !slices.Equal(got, want) {
		t.Errorf("run A holds steps %v, want job A's %v", got, want)
	}
	if got, want := stepsOf(t, srv, runB, memKey), seqsWith(ss, name, endA+1, 1<<62); !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("run B holds steps %v, want job B's %v only", got, want)
	}

	other := srv.CreateRun(t, srv.ExperimentID(t, exp), "other")
	code, out := syncCmd(t, srv, exp, path, "--run-id", other)
	if code != 0 || !strings.Contains(out, "wrote to other runs") || !strings.Contains(out, "0 samples sent") {
		t.Errorf("sync --run-id: exit %d, want 0 naming the attempts of other runs and sending nothing:\n%s", code, out)
	}
	if h := srv.History(t, other, memKey); len(h) != 0 {
		t.Errorf("sync --run-id moved %d samples of other jobs into run %s", len(h), other)
	}
	code, out = syncCmd(t, srv, exp, path)
	if code != 0 || strings.Count(out, "its end was recorded by its bridge") != 2 {
		t.Errorf("sync of two delivered jobs: exit %d, want both left alone:\n%s", code, out)
	}
	if got := srv.GetRun(t, runA).Tags["bridge.end_recorded_by"]; got != "" {
		t.Errorf("sync recorded the end of run A again (%q)", got)
	}
}

// bridge sync keeps the node id the spool recorded: the advised command,
// run as printed, puts the samples under system/<node>/; a different
// --node-id is warned about and not used.
func TestSyncKeepsNodeID(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := uniqueName(t)
	bin := testbin.Bridge(t)
	offline := func() (string, string) {
		dir := t.TempDir()
		cmd := bridgeIn(t, dir, srv, exp, "--interval=200ms", "--trackers=none", "--node-id=n1", "--", "sleep", "0.8")
		out, err := cmd.CombinedOutput()
		if exitCode(t, err) != 0 {
			t.Fatalf("offline job:\n%s", out)
		}
		return dir, string(out)
	}
	check := func(what, spoolPath string) {
		t.Helper()
		_, _, attempts, _ := spooltest.ReadFile(spoolPath)
		run := attempts[len(attempts)-1].Start.Runs["mlflow"]
		keys := srv.MetricKeys(t, run, "system/")
		if len(keys) == 0 {
			t.Fatalf("%s: run %s has no system keys", what, run)
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, "system/n1/") {
				t.Fatalf("%s: key %s, want every key under system/n1/", what, k)
			}
		}
	}

	dir, out := offline()
	_, advice, ok := strings.Cut(out, "upload the samples to one with: ")
	advice, _, _ = strings.Cut(advice, "\n")
	if !ok || !strings.HasPrefix(advice, "bridge sync /") {
		t.Fatalf("the end-of-run table gives no upload command:\n%s", out)
	}
	sh := exec.Command("sh", "-c", advice)
	sh.Dir = t.TempDir() // the command works from anywhere
	sh.Env = append(cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	if sout, err := sh.CombinedOutput(); exitCode(t, err) != 0 {
		t.Fatalf("the advised %q: %s", advice, sout)
	}
	spools, _ := filepath.Glob(filepath.Join(dir, "bridge-spool-n1-*.jsonl"))
	if len(spools) != 1 {
		t.Fatalf("default spools %v, want one named after node n1", spools)
	}
	check("advised command", spools[0])

	dir, _ = offline()
	spools, _ = filepath.Glob(filepath.Join(dir, "bridge-spool-n1-*.jsonl"))
	code, sout := syncCmd(t, srv, exp, spools[0], "--node-id=n2")
	if code != 0 || !strings.Contains(sout, "differs from the node id the spool recorded") {
		t.Fatalf("sync --node-id=n2: exit %d, want 0 with a warning:\n%s", code, sout)
	}
	check("--node-id=n2", spools[0])
}

// mountReadOnly mounts an empty read-only tmpfs on a fresh directory,
// unmounted at cleanup.
func mountReadOnly(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_RDONLY, "size=64k,mode=0755"); err != nil {
		t.Skipf("SKIPPED: the read-only directory test needs to mount a tmpfs (root, CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// A read-only working directory (readOnlyRootFilesystem with workdir /),
// or a --spool in one: the job runs with its exit status, its samples
// reach MLflow from memory, forensics and the end are recorded on the run
// bridge created, and the message says where to point --spool.
func TestReadOnlyWorkdirStillSamples(t *testing.T) {
	srv := mlflowtest.Shared(t)
	ro := mountReadOnly(t)
	for _, tc := range []struct{ name, spool string }{
		{"default path", ""},
		{"--spool in it", filepath.Join(ro, "s.jsonl")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := uniqueName(t)
			args := []string{"--interval=200ms", "--", "sh", "-c", "sleep 1.2; exit 3"}
			if tc.spool != "" {
				args = append([]string{"--spool=" + tc.spool}, args...)
			}
			out, err := bridgeIn(t, ro, srv, exp, args...).CombinedOutput()
			if code := exitCode(t, err); code != 3 {
				t.Fatalf("exit %d, want the child's 3:\n%s", code, out)
			}
			for _, want := range []string{"cannot open the spool", "point --spool", "read-only file system", "none: it could not be opened"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			ids := srv.RunIDs(t, exp)
			if len(ids) != 1 {
				t.Fatalf("runs %v, want the one bridge created:\n%s", ids, out)
			}
			if n := len(srv.History(t, ids[0], memKey)); n < 2 {
				t.Errorf("%d samples in MLflow, want them sent from memory:\n%s", n, out)
			}
			run := srv.GetRun(t, ids[0])
			if run.Info.Status != "FAILED" || run.Tags["bridge.exit_code"] != "3" || run.Tags["bridge.exit_reason"] == "" {
				t.Errorf("run %s, tags %v: want FAILED with the exit code and the verdict", run.Info.Status, run.Tags)
			}
			if entries, _ := os.ReadDir(ro); len(entries) != 0 {
				t.Errorf("something was written in the read-only directory: %v", entries)
			}
		})
	}
}

// A spool with hand-made bad values: each costs only itself (not its
// sample's good values, not the sync's good samples), is counted and
// reported, and the run ends as its job did.
func TestSyncBadValues(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := uniqueName(t)
	path := filepath.Join(t.TempDir(), "bad.jsonl")
	ts := time.Now().UnixMilli()
	lines := []string{
		`{"type":"start","time":` + strconv.FormatInt(ts, 10) + `,"attempt":1,"pid":1,"version":"hand"}`,
		`{"type":"sample","seq":0,"ts":` + strconv.FormatInt(ts, 10) + `,"metrics":{"a":1,"b":10}}`,
		`{"type":"sample","seq":1,"ts":` + strconv.FormatInt(ts+1, 10) + `,"metrics":{"a":"oops","b":11}}`,
		`{"type":"sample","seq":2,"ts":-5,"metrics":{"a":2,"b":12}}`,
		`{"type":"sample","seq":3,"ts":` + strconv.FormatInt(ts+3, 10) + `,"metrics":{"a":1e999,"b":13}}`,
		`{"type":"sample","seq":4,"ts":` + strconv.FormatInt(ts+4, 10) + `,"metrics":{"a":4,"b":14}}`,
		`{"type":"end","time":` + strconv.FormatInt(ts+5, 10) + `,"exit_code":0}`,
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := syncCmd(t, srv, exp, path)
	if code != 0 {
		t.Fatalf("sync: exit %d:\n%s", code, out)
	}
	for _, want := range []string{"5 samples sent", "2 values", "not numbers", "2 points left out"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	ids := srv.RunIDs(t, exp)
	if len(ids) != 1 {
		t.Fatalf("runs %v, want one", ids)
	}
	if got := stepsOf(t, srv, ids[0], "system/a"); !slices.Equal(got, []int64{0, 4}) {
		t.Errorf("system/a steps %v, want [0 4]", got)
	}
	if got := stepsOf(t, srv, ids[0], "system/b"); !slices.Equal(got, []int64{0, 1, 3, 4}) {
		t.Errorf("system/b steps %v, want [0 1 3 4]", got)
	}
	run := srv.GetRun(t, ids[0])
	if run.Info.Status != "FINISHED" || run.Tags["bridge.sync_points_left_out"] != "2" {
		t.Errorf("run %s, tags %v: want FINISHED (every sample delivered) noting 2 points left out", run.Info.Status, run.Tags)
	}
}

// A sync that could not deliver every sample does not end the run as if it
// had: the run keeps its status, a tag says what is missing, sync exits 1,
// and the next sync delivers the rest and records the end.
func TestSyncIncompleteKeepsStatus(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := uniqueName(t)
	path := offlineSpool(t, srv, exp)
	p, err := faultproxy.Start(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.Schedule(faultproxy.Fault{Path: "runs/log-batch", Kind: faultproxy.Status, Code: http.StatusForbidden, Times: 1})
	cmd := exec.Command(testbin.Bridge(t), "sync", path)
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+p.URL(), "MLFLOW_EXPERIMENT_NAME="+exp)
	out, err := cmd.CombinedOutput()
	if code := exitCode(t, err); code != 1 || !strings.Contains(string(out), "status left as it is") {
		t.Fatalf("sync refused by the tracker: exit %d, want 1 saying the status is left:\n%s", code, out)
	}
	ids := srv.RunIDs(t, exp)
	if len(ids) != 1 {
		t.Fatalf("runs %v, want one", ids)
	}
	if run := srv.GetRun(t, ids[0]); run.Info.Status != "RUNNING" || run.Tags["bridge.sync_incomplete"] == "" {
		t.Fatalf("run %s with tags %v: want RUNNING and bridge.sync_incomplete", run.Info.Status, run.Tags)
	}
	if code, out := syncCmd(t, srv, exp, path); code != 0 || !strings.Contains(out, "end recorded (exit code 0, FINISHED)") {
		t.Fatalf("second sync: exit %d:\n%s", code, out)
	}
	if ids2 := srv.RunIDs(t, exp); !slices.Equal(ids2, ids) {
		t.Fatalf("runs %v after the second sync, want %v", ids2, ids)
	}
	requireHistory(t, srv, &job{spool: path}, ids[0], memKey)
	if st := srv.GetRun(t, ids[0]).Info.Status; st != "FINISHED" {
		t.Errorf("status %s after every sample was delivered, want FINISHED", st)
	}
}
