package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/mocks/faultproxy"
	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
	"github.com/bridge-dev/bridge/pipeline"
)

// hungAfterStart is a real MLflow run behind mocks/faultproxy that answers
// bridge's start (runs/get of MLFLOW_RUN_ID) and then never answers a
// runs/log-batch: a tracker that was reached and then hangs, so the end of
// the run is held by --flush-timeout (one never reached is let go after 2 s).
// It returns MLFLOW_TRACKING_URI and MLFLOW_RUN_ID.
func hungAfterStart(t *testing.T) (uri, run string) {
	t.Helper()
	srv := mlflowtest.Shared(t)
	run = srv.CreateRun(t, srv.CreateExperiment(t, uniqueName(t)), "hung")
	p, err := faultproxy.Start(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.Schedule(faultproxy.Fault{Path: "runs/log-batch", Kind: faultproxy.Hang})
	return p.URL(), run
}

// waitGone waits (generously) until the process whose pid pidFile holds
// is gone: bridge reaped its child.
func waitGone(t *testing.T, pidFile string) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	proc := "/proc/" + strings.TrimSpace(string(b))
	waitfor.Cond(t, 60*time.Second, "bridge to reap the child "+proc, func() bool {
		_, err := os.Stat(proc)
		return err != nil
	})
}

// termUntilExit sends cmd SIGTERM every half second until it exits, so
// that one landing between the child's reap and the flush's own
// subscription cannot make a test flaky, and returns how long it took from
// the first signal and Wait's error. It fails t after 60 s.
func termUntilExit(t *testing.T, cmd *exec.Cmd, out fmt.Stringer) (time.Duration, error) {
	t.Helper()
	first := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(60 * time.Second)
	for {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			return time.Since(first), err
		case <-tick.C:
		case <-giveUp:
			cmd.Process.Kill()
			t.Fatalf("bridge still running 60s after the signal that followed the child's exit; output:\n%s", out)
		}
	}
}

// badValues has one wrong value per option: every option must be covered.
var badValues = map[string]string{
	"interval": "ten", "fast-interval": "-1s", "fast-threshold": "NaN", "collect-timeout": "0",
	"window": "-1s", "scopes": "cpu", "no-container": "maybe", "node-id": "a/b", "log-level": "loud",
	"trackers": "neptune", "run-name": "a\nb", "spool": "/", "spool-max-size": "12xb", "spool-sync": "2m",
	"keep-spool": "perhaps", "flush-timeout": "-1s", "start-timeout": "0", "kill-after": "-1s",
	"proc-root": "/nonexistent", "cgroup-root": "/nonexistent",
	"rootfs": "/nonexistent", "sys-root": "/etc/passwd", "gpus": "0,\x07", "gpu-match-cuda-visible": "2",
	"metrics-addr": "70000", "scrape": "ftp://x/metrics", "scrape-include": "(", "scrape-exclude": "[z-a]",
	"scrape-passthrough": "sometimes", "scrape-timeout": "1ms",
	"job-key": "it's", "nodes": "-1", "job-settle": "10ms",
	"run-tick": "0", "price-per-gpu-hour": "cheap", "price-per-node-hour": "-1", "analysis-window": "500ms",
}

// Every option, as a flag, a variable and a file key, with a wrong value:
// exit 2 naming it, and the child never runs.
func TestEveryOptionExit2BeforeChild(t *testing.T) {
	for _, k := range config.Keys(pipeline.Choices()) {
		if _, ok := badValues[k]; !ok {
			t.Errorf("option %s has no bad value in this test", k)
		}
	}
	type tc struct {
		name string
		args []string
		env  []string
		want string
	}
	var cases []tc
	for _, k := range config.Keys(pipeline.Choices()) {
		v := badValues[k]
		cases = append(cases,
			tc{"flag " + k, []string{"--" + k + "=" + v}, nil, "--" + k},
			tc{"env " + k, nil, []string{config.EnvName(k) + "=" + v}, config.EnvName(k)})
	}
	file := filepath.Join(t.TempDir(), "bridge.yaml")
	if err := os.WriteFile(file, []byte("nodes: 1.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases = append(cases,
		tc{"file key", []string{"--config", file}, nil, "nodes (in " + file},
		tc{"huge node count", []string{"--nodes=99999999999"}, nil, "--nodes"},
		tc{"the flag that is gone", []string{"--queue-size=1024"}, nil, "--queue-size"},
	)
	// Other tools' variables (MLFLOW_TRACKING_URI=http://, a node id with
	// a slash) never stop the job: TestForeignVariablesTrackersNone.
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			cmd, _, errb := bridgeCmd(t, append(c.args, "--", "touch", marker)...)
			cmd.Env = append(cmd.Env, c.env...)
			if code := exitCode(t, cmd.Run()); code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, errb)
			}
			if !strings.Contains(errb.String(), c.want) {
				t.Errorf("message does not name %q:\n%s", c.want, errb)
			}
			if strings.Contains(errb.String(), "goroutine ") {
				t.Errorf("a Go stack trace instead of a message:\n%s", errb)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("the child ran despite the usage error")
			}
		})
	}
}

// A --config that is not a regular file of sane size (/dev/zero read
// without end, a FIFO that blocks its reader forever, a directory, a huge
// file) is exit 2 naming it, promptly, and the child never runs.
func TestConfigFileNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.yaml")
	if err := os.WriteFile(huge, bytes.Repeat([]byte("# padding\n"), config.MaxConfigBytes/10+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"dev-zero": "/dev/zero", "fifo": fifo, "directory": dir, "huge": huge} {
		t.Run(name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			cmd, _, errb := bridgeCmd(t, "--config", path, "--", "touch", marker)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				cmd.Process.Kill()
				t.Fatalf("bridge --config %s still runs after a minute", path)
			}
			if code := exitCode(t, err); code != 2 || !strings.Contains(errb.String(), path) || !strings.Contains(errb.String(), "--config") {
				t.Fatalf("exit %d, want 2 naming %s and --config; stderr:\n%s", code, path, errb)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("the child ran despite the bad config file")
			}
		})
	}
}

// attach without --pid would sample until killed: it is a usage error.
func TestAttachNeedsPID(t *testing.T) {
	cmd, _, errb := bridgeCmd(t, "attach", "--trackers=none")
	if code := exitCode(t, cmd.Run()); code != 2 || !strings.Contains(errb.String(), "--pid") {
		t.Fatalf("exit %d, want 2 naming --pid; stderr:\n%s", code, errb)
	}
}

// A tracker that accepts connections and never answers does not hold the
// child back past --start-timeout (plus bridge's own start-up).
func TestStartTimeoutHungTracker(t *testing.T) {
	uri, _ := acceptingTracker(t)
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	cmd, _, errb := bridgeCmd(t, "--start-timeout=2s", "--flush-timeout=2s", "--trackers=mlflow", "--", "touch", started)
	cmd.Env = append(cmd.Env, "MLFLOW_TRACKING_URI="+uri)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	at := waitfor.File(t, 60*time.Second, started)
	code := exitCode(t, cmd.Wait())
	// Bound, not speed: 2s of start timeout and 6s for bridge's own start
	// on a loaded machine; the old fixed wait was 15s.
	t.Logf("child started %v after bridge (--start-timeout=2s, tracker hung)", at.Sub(t0))
	if d := at.Sub(t0); d > 8*time.Second {
		t.Errorf("the child started %v after bridge, want within --start-timeout=2s (+6s)", d)
	}
	if code != 0 {
		t.Errorf("exit %d; stderr:\n%s", code, errb)
	}
}

// After the child exits, bridge exits within --flush-timeout (+ a small
// constant) even when the tracker, reached at the start, never answers
// again.
func TestFlushTimeoutIsTotal(t *testing.T) {
	uri, run := hungAfterStart(t)
	dir := t.TempDir()
	exited := filepath.Join(dir, "exiting")
	cmd, _, errb := bridgeCmd(t, "--interval=200ms", "--start-timeout=1s", "--flush-timeout=3s", "--trackers=mlflow",
		"--", "sh", "-c", `sleep 1; touch "$0"; exit 4`, exited)
	cmd.Env = append(cmd.Env, "MLFLOW_TRACKING_URI="+uri, "MLFLOW_RUN_ID="+run)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	at := waitfor.File(t, 60*time.Second, exited)
	code := exitCode(t, cmd.Wait())
	// 3s of flush timeout and a documented 1s constant, with 3s more of
	// margin for a loaded machine; the old end-of-run step alone could add 15s.
	t.Logf("bridge exited %v after the child (--flush-timeout=3s, tracker hung)", time.Since(at))
	if d := time.Since(at); d > 7*time.Second {
		t.Errorf("bridge exited %v after the child, want within --flush-timeout=3s (+1s)", d)
	} else if d < 2500*time.Millisecond {
		t.Errorf("bridge exited %v after the child: a tracker that was reached keeps --flush-timeout=3s", d)
	}
	if code != 4 {
		t.Errorf("exit %d, want the child's 4; stderr:\n%s", code, errb)
	}
	if !strings.Contains(errb.String(), "spool") {
		t.Errorf("stderr does not say the unsent samples stay in the spool:\n%s", errb)
	}
}

// A second SIGTERM, once the child has exited, ends the flush at once with
// the child's status, and says the unsent samples stay in the spool.
func TestSecondSignalEndsFlush(t *testing.T) {
	uri, run := hungAfterStart(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	cmd, _, errb := bridgeCmd(t, "--interval=200ms", "--start-timeout=1s", "--flush-timeout=120s", "--trackers=mlflow",
		"--", "sh", "-c", `echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; while :; do sleep 0.1; done`, pidFile)
	cmd.Env = append(cmd.Env, "MLFLOW_TRACKING_URI="+uri, "MLFLOW_RUN_ID="+run)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitfor.File(t, 60*time.Second, pidFile)
	cmd.Process.Signal(syscall.SIGTERM) // forwarded: the child dies of it
	waitGone(t, pidFile)                // reaped by bridge: it is flushing now
	took, werr := termUntilExit(t, cmd, errb)
	t.Logf("bridge exited %v after the first signal that followed the child's exit (--flush-timeout=120s)", took)
	if took > 10*time.Second {
		t.Errorf("bridge took %v to exit after the second signal (flush timeout 120s)", took)
	}
	if code := exitCode(t, werr); code != 143 {
		t.Errorf("exit %d, want the child's 143; stderr:\n%s", code, errb)
	}
	if !strings.Contains(errb.String(), "stay in the spool") {
		t.Errorf("stderr does not say the unsent samples stay in the spool:\n%s", errb)
	}
}

// --kill-after: a child that ignores SIGTERM is killed after the grace;
// bridge exits 137 and the verdict says why.
func TestKillAfterBinary(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	cmd, _, errb := bridgeCmd(t, "--trackers=none", "--kill-after=1s", "--",
		"sh", "-c", `trap "" TERM; touch "$0"; while :; do sleep 0.1; done`, ready)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitfor.File(t, 60*time.Second, ready)
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("a child that ignores SIGTERM was waited for past --kill-after; stderr:\n%s", errb)
	}
	if code := exitCode(t, err); code != 137 {
		t.Fatalf("exit %d, want 137; stderr:\n%s", code, errb)
	}
	if !strings.Contains(errb.String(), "--kill-after") {
		t.Errorf("the verdict does not say bridge killed it after --kill-after:\n%s", errb)
	}
	// The end record (and so the run's tags) carries the rule.
	for _, kv := range cmd.Env {
		if p, ok := strings.CutPrefix(kv, "BRIDGE_SPOOL="); ok {
			raw, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(raw), "kill_after") {
				t.Errorf("the spool's end record does not carry the kill_after verdict:\n%s", raw)
			}
		}
	}
}

// syncCmd runs `bridge sync` with args against srv.
func syncCmd(t *testing.T, srv *mlflowtest.Server, exp string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(testbin.Bridge(t), append([]string{"sync"}, args...)...)
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	return exitCode(t, err), string(out)
}

func uniqueName(t *testing.T) string {
	return "bridge-e2e-" + strings.ReplaceAll(t.Name(), "/", "-") + fmt.Sprint(time.Now().UnixNano())
}

// Both documented argument orders work; the run's owner keeps its status.
func TestSyncArgumentOrder(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := uniqueName(t)
	expID := srv.CreateExperiment(t, exp)
	for _, order := range []string{"file first", "flags first"} {
		t.Run(order, func(t *testing.T) {
			j := newJob(t, "", "--interval=250ms", "--trackers=none", "--", "sleep", "0.6")
			if code := j.run(t); code != 0 {
				t.Fatalf("offline run: exit %d; stderr:\n%s", code, &j.err)
			}
			id := srv.CreateRun(t, expID, "owned")
			args := []string{j.spool, "--run-id", id}
			if order == "flags first" {
				args = []string{"--run-id", id, j.spool}
			}
			code, out := syncCmd(t, srv, exp, args...)
			if code != 0 {
				t.Fatalf("sync %v: exit %d:\n%s", args, code, out)
			}
			if !strings.Contains(out, "not created by bridge, its status is left as it is") || strings.Contains(out, "end recorded") {
				t.Errorf("sync to a run bridge did not create should say its status is left alone:\n%s", out)
			}
			requireHistory(t, srv, j, id, "system/node_memory_used_megabytes")
			if st := srv.GetRun(t, id).Info.Status; st != "RUNNING" {
				t.Errorf("sync changed the status of a run it did not create to %s", st)
			}
		})
	}
}

// A spool that does not exist is exit 2, creates no file and no run.
func TestSyncMissingFile(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := uniqueName(t)
	missing := filepath.Join(t.TempDir(), "nope.jsonl")
	code, out := syncCmd(t, srv, exp, missing)
	if code != 2 || !strings.Contains(out, missing) {
		t.Fatalf("exit %d, want 2 naming the file:\n%s", code, out)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("sync created the missing spool file")
	}
	if id := srv.ExperimentID(t, exp); id != "" {
		t.Errorf("sync created experiment %s (and a run) for a missing file", id)
	}
}

// sync ends the runs left RUNNING: one it creates for an offline spool takes
// the status of the spool's end record; one whose bridge was SIGKILLed is
// KILLED.
func TestSyncEndsRuns(t *testing.T) {
	srv := mlflowtest.Shared(t)
	t.Run("offline run exit 3", func(t *testing.T) {
		j := newJob(t, "", "--interval=250ms", "--trackers=none", "--", "sh", "-c", "sleep 0.6; exit 3")
		if code := j.run(t); code != 3 {
			t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
		}
		code, out := syncCmd(t, srv, uniqueName(t), j.spool)
		if code != 0 {
			t.Fatalf("sync: exit %d:\n%s", code, out)
		}
		if !strings.Contains(out, "end recorded (exit code 3, FAILED)") {
			t.Errorf("sync output does not say it recorded the end:\n%s", out)
		}
		_, _, attempts, _ := spooltest.ReadFile(j.spool)
		id := attempts[len(attempts)-1].Start.Runs["mlflow"]
		if run := srv.GetRun(t, id); run.Info.Status != "FAILED" || run.Info.EndTime == 0 {
			t.Errorf("status %s end %d, want FAILED with an end time", run.Info.Status, run.Info.EndTime)
		}
	})
	t.Run("bridge SIGKILLed", func(t *testing.T) {
		j := newJob(t, srv.URL, "--interval=250ms", "--", "sh", "-c", `echo $$ > pid.tmp; mv pid.tmp pid; while :; do sleep 0.1; done`)
		if err := j.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitfor.File(t, 60*time.Second, filepath.Join(j.dir, "pid"))
		b, err := os.ReadFile(filepath.Join(j.dir, "pid"))
		if err != nil {
			t.Fatal(err)
		}
		var childPID int
		fmt.Sscan(string(b), &childPID)
		// The child has a process group of its own: it outlives bridge
		// (as when bridge alone is OOM-killed) until the test ends it.
		t.Cleanup(func() { syscall.Kill(-childPID, syscall.SIGKILL) })
		waitSamples(t, j.spool, 3, 60*time.Second)
		j.cmd.Process.Signal(syscall.SIGKILL)
		syscall.Kill(-childPID, syscall.SIGKILL)
		j.cmd.Wait()
		id := j.runID(t)
		if st := srv.GetRun(t, id).Info.Status; st != "RUNNING" {
			t.Fatalf("precondition: a SIGKILLed bridge's run is %s, want still RUNNING", st)
		}
		if code, out := syncCmd(t, srv, uniqueName(t), j.spool); code != 0 {
			t.Fatalf("sync: exit %d:\n%s", code, out)
		}
		if run := srv.GetRun(t, id); run.Info.Status != "KILLED" || run.Info.EndTime == 0 {
			t.Errorf("status %s end %d, want KILLED with an end time", run.Info.Status, run.Info.EndTime)
		}
	})
}

// A plain script's run is named after the script, not its interpreter,
// and records its command as typed, on the real MLflow run: the script's
// name and an ordinary option's value (a project's name) do not read like
// words, and the allowlist kept neither (issue 40).
func TestScriptRunNameAndCommandKept(t *testing.T) {
	srv := mlflowtest.Shared(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mytrain.py"), []byte("import sys\nprint('args', sys.argv[1:])\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spoolPath := filepath.Join(dir, "spool.jsonl")
	argv := []string{"python3", "mytrain.py", "--lr", "0.1", "--wandb_project=myproj"}
	cmd := exec.Command(testbin.Bridge(t), append([]string{"--interval=250ms", "--trackers=mlflow", "--spool", spoolPath, "--"}, argv...)...)
	cmd.Dir = dir
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+uniqueName(t))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if code := exitCode(t, cmd.Run()); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &errb)
	}
	if !strings.Contains(out.String(), "args ['--lr', '0.1', '--wandb_project=myproj']") {
		t.Fatalf("the script did not run as given: stdout %q", &out)
	}
	_, _, attempts, _ := spooltest.ReadFile(spoolPath)
	if len(attempts) == 0 || attempts[0].Start.Runs["mlflow"] == "" {
		t.Fatalf("no MLflow run recorded; stderr:\n%s", &errb)
	}
	run := srv.GetRun(t, attempts[0].Start.Runs["mlflow"])
	if run.Info.RunName != "mytrain.py" {
		t.Errorf("run name %q, want mytrain.py", run.Info.RunName)
	}
	if want := strings.Join(argv, " "); run.Tags["bridge.command"] != want {
		t.Errorf("bridge.command = %q, want the command as typed, %q", run.Tags["bridge.command"], want)
	}
	// MLflow's client records the script's sys.argv[0].
	if run.Tags["mlflow.source.name"] != "mytrain.py" {
		t.Errorf("mlflow.source.name = %q, want the script, mytrain.py", run.Tags["mlflow.source.name"])
	}
}

// Secrets given to bridge or its child (environment, argv in every form,
// URIs) appear nowhere bridge writes: its output, the spool, the MLflow run
// (its bridge.command, mlflow.source.name and run name) read back through
// the REST API, the W&B mock's recorded requests. The argv holds the forms
// that leaked before the allowlist rule (issue 30), each with a secret that
// looks like a plain word.
func TestSecretsNeverRecorded(t *testing.T) {
	srv := mlflowtest.Shared(t)
	wb := wandbserver.StartTest(t, wandbserver.Options{})
	secrets := []string{"envsecret-hf-1", "argvsecret-2", "argvsecret-3", "argvsecret-4", "urlsecret-5", "urlsecret-6", "argvsecret-7", "urlsecret-8", "wbsecret-9",
		"leakword-10", "leakword-11", "leakword-12", "leakword-13", "leakword-14", "leakword-15", "leakword-16", "leakword-17", "leakword-18", "leakword-19"}
	dir := t.TempDir()
	spoolPath := filepath.Join(dir, "spool.jsonl")
	trackingURI := strings.Replace(srv.URL, "http://", "http://bridge:"+secrets[7]+"@", 1)
	cmd := exec.Command(testbin.Bridge(t), "--log-level=debug", "--interval=250ms", "--flush-timeout=5s", "--trackers=mlflow,wandb", "--spool", spoolPath, "--",
		"sh", "-c", `sleep 1`, "train.py",
		"--password="+secrets[1], "--api-key", secrets[2], "--token", secrets[3],
		"https://user:"+secrets[4]+"@example.com/data?token="+secrets[5], "db.password="+secrets[6], secrets[0],
		"--secretkey="+secrets[9], "--privatekey", secrets[10], "--accesskey="+secrets[11], "--api-key2="+secrets[12],
		"--token_2", secrets[13], "--passcode", secrets[14], "--cfg.secrets.0="+secrets[15],
		"env:\n- value: "+secrets[16]+"\n  name: HF_TOKEN\n", "printf", "[auth]\npassword="+secrets[17]+"\n",
		"python", "-c", "import os; os.environ['HF_TOKEN']='"+secrets[18]+"'")
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(wb.ClientEnv(dir, strings.Repeat("k", 32)+secrets[8])...),
		"HF_TOKEN="+secrets[0], "MLFLOW_TRACKING_URI="+trackingURI, "MLFLOW_EXPERIMENT_NAME="+uniqueName(t), "WANDB_PROJECT=bridge-e2e")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if code := exitCode(t, cmd.Run()); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &errb)
	}
	places := map[string]string{"stdout": out.String(), "stderr": errb.String()}
	raw, err := os.ReadFile(spoolPath)
	if err != nil {
		t.Fatal(err)
	}
	places["spool"] = string(raw)
	_, _, attempts, _ := spooltest.ReadFile(spoolPath)
	id := attempts[0].Start.Runs["mlflow"]
	if id == "" {
		t.Fatalf("no MLflow run; stderr:\n%s", &errb)
	}
	resp, err := http.Get(srv.URL + "/api/2.0/mlflow/runs/get?run_id=" + id)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	places["mlflow run"] = string(body)
	var wbReqs strings.Builder
	for _, r := range wb.Requests() {
		fmt.Fprintf(&wbReqs, "%s %s\n%s\n", r.Method, r.Path, r.Body)
	}
	places["wandb requests"] = wbReqs.String()
	for where, text := range places {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("secret %q found in %s", s, where)
			}
		}
	}
	// The command line is still recorded, redacted: the check above looked
	// where it is.
	run := srv.GetRun(t, id)
	if run.Tags["mlflow.source.name"] != "train.py" {
		t.Errorf("mlflow.source.name %q, want the script the command names", run.Tags["mlflow.source.name"])
	}
	for _, tag := range []string{"bridge.command"} {
		for _, want := range []string{"sh -c <code: 7 bytes> train.py", "--password=***", "--api-key ***", "--token ***", "user:***@example.com", "db.password=***",
			"--secretkey=*** --privatekey *** --accesskey=*** --api-key2=*** --token_2 *** --passcode *** --cfg.secrets.0=***",
			"*** printf *** python -c <code: "} {
			if !strings.Contains(run.Tags[tag], want) {
				t.Errorf("%s %q lacks %q", tag, run.Tags[tag], want)
			}
		}
	}
	if c := attempts[0].Start.Info["bridge.command"]; c != run.Tags["bridge.command"] {
		t.Errorf("the spool records the command %q, the run %q", c, run.Tags["bridge.command"])
	}
	if run.Info.RunName != "train.py" {
		t.Errorf("run name %q, want the script the command names", run.Info.RunName)
	}
	if wbReqs.Len() == 0 {
		t.Error("the W&B mock received nothing: the check above looked at nothing")
	}
}

// Every URL bridge prints goes through one redaction rule: tracker
// addresses whose secrets sit in the user name, the query or a SAS
// signature never show in bridge's output or the spool, also where the
// HTTP client's own errors (*url.Error) quote the request URL, for a
// refused connection and for an error answer, at debug level.
func TestTrackerURLSecretsNeverPrinted(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	notFound := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(notFound.Close)
	answers := strings.TrimPrefix(notFound.URL, "http://")
	for _, tc := range []struct {
		name, secret string
		env          func(secret string) []string
	}{
		{"mlflow user-name token", "usertok-1", func(s string) []string { return []string{"MLFLOW_TRACKING_URI=http://" + s + "@" + refused} }},
		{"mlflow query token", "querytok-2", func(s string) []string { return []string{"MLFLOW_TRACKING_URI=http://" + refused + "/?token=" + s} }},
		{"mlflow SAS signature, 404", "sigtok-3", func(s string) []string {
			return []string{"MLFLOW_TRACKING_URI=http://" + answers + "/p?sv=2022-11-02&sig=" + s}
		}},
		{"mlflow password, 404", "passtok-4", func(s string) []string { return []string{"MLFLOW_TRACKING_URI=http://u:" + s + "@" + answers} }},
		{"wandb query token", "wbtok-5", func(s string) []string {
			return []string{"WANDB_BASE_URL=http://" + refused + "/?api_key=" + s, "WANDB_API_KEY=" + strings.Repeat("k", 40), "WANDB_PROJECT=p"}
		}},
		{"wandb user-name token, 404", "wbtok-6", func(s string) []string {
			return []string{"WANDB_BASE_URL=http://" + s + "@" + answers, "WANDB_API_KEY=" + strings.Repeat("k", 40), "WANDB_PROJECT=p"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, out, errb := bridgeCmd(t, "--log-level=debug", "--start-timeout=1s", "--flush-timeout=1s", "--", "true")
			cmd.Env = append(cmd.Env, tc.env(tc.secret)...)
			if code := exitCode(t, cmd.Run()); code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", code, errb)
			}
			raw, _ := os.ReadFile(filepath.Join(cmd.Dir, "spool.jsonl")) // bridgeCmd's BRIDGE_SPOOL
			for where, text := range map[string]string{"stdout": out.String(), "stderr": errb.String(), "spool": string(raw)} {
				if strings.Contains(text, tc.secret) {
					t.Errorf("secret %q in %s:\n%s", tc.secret, where, text)
				}
			}
			// The failure was reported, naming the server: the check above
			// looked at the messages that quote the URL.
			if !strings.Contains(errb.String(), "127.0.0.1") || !strings.Contains(errb.String(), "***") {
				t.Errorf("no message names the tracker with its secret hidden:\n%s", errb)
			}
		})
	}
}

// In a terminal, Ctrl-C after the child has exited reaches bridge (which
// takes the terminal back from the child's group) and ends the flush.
func TestCtrlCInTerminalEndsFlush(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("script(1) not installed: no pseudo-terminal to test Ctrl-C with")
	}
	uri, run := hungAfterStart(t)
	bin := testbin.Bridge(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	child := `echo $$ > ` + pidFile + `.tmp; mv ` + pidFile + `.tmp ` + pidFile + `; sleep 0.5; exit 5`
	// exec: the shell script(1) runs (dash when SHELL is unset, as in CI)
	// would otherwise stay in bridge's process group, take the Ctrl-C and
	// die of it, and script would report its 130 instead of bridge's status.
	cmd := exec.Command("script", "-qec", "exec "+bin+" --trackers=mlflow --start-timeout=1s --flush-timeout=120s --spool "+
		filepath.Join(dir, "s.jsonl")+" -- sh -c '"+child+"' 2>"+filepath.Join(dir, "err"), "/dev/null")
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+uri, "MLFLOW_RUN_ID="+run)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitfor.File(t, 60*time.Second, pidFile)
	waitGone(t, pidFile)
	// Not termUntilExit: the signal under test is the terminal's ^C, not
	// a SIGTERM sent to bridge.
	first := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
wait:
	for {
		stdin.Write([]byte{3}) // ^C, repeated: the terminal may not be handed back yet
		select {
		case werr = <-done:
			break wait
		case <-time.After(500 * time.Millisecond):
		}
		if time.Since(first) > 60*time.Second {
			cmd.Process.Kill()
			errOut, _ := os.ReadFile(filepath.Join(dir, "err"))
			t.Fatalf("Ctrl-C during the flush was ignored for 60s (flush timeout 120s); bridge's stderr:\n%s", errOut)
		}
	}
	errOut, _ := os.ReadFile(filepath.Join(dir, "err"))
	if d := time.Since(first); d > 10*time.Second {
		t.Errorf("bridge took %v to exit after Ctrl-C", d)
	}
	if code := exitCode(t, werr); code != 5 {
		t.Errorf("exit %d, want the child's 5; stderr:\n%s", code, errOut)
	}
	if !strings.Contains(string(errOut), "stay in the spool") {
		t.Errorf("stderr does not say the unsent samples stay in the spool:\n%s", errOut)
	}
}
