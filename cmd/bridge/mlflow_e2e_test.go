package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/authproxy"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
)

// job is one run of the real bridge binary against an MLflow server.
type job struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	err    syncbuf.Buffer // read while bridge runs
	spool  string
	dir    string
	python string
}

func newJob(t *testing.T, trackingURI string, args ...string) *job {
	t.Helper()
	j := &job{dir: t.TempDir(), python: mlflowtest.Python(t)}
	j.spool = filepath.Join(j.dir, "spool.jsonl")
	j.cmd = exec.Command(testbin.Bridge(t), args...)
	j.cmd.Dir = j.dir
	j.cmd.Env = cleanEnv(
		"BRIDGE_SPOOL="+j.spool,
		"MLFLOW_TRACKING_URI="+trackingURI,
		"MLFLOW_EXPERIMENT_NAME=bridge-e2e-"+strings.ReplaceAll(t.Name(), "/", "-"),
	)
	j.cmd.Stdout, j.cmd.Stderr = &j.out, &j.err
	return j
}

func (j *job) env(kv ...string) *job { j.cmd.Env = append(j.cmd.Env, kv...); return j }

func (j *job) run(t *testing.T) int {
	t.Helper()
	return exitCode(t, j.cmd.Run())
}

// runID is the MLflow run recorded in the spool's first start record.
func (j *job) runID(t *testing.T) string {
	t.Helper()
	_, _, attempts, err := spooltest.ReadFile(j.spool)
	if err != nil || len(attempts) == 0 {
		t.Fatalf("reading spool %s: %v (%d attempts)\nstderr:\n%s", j.spool, err, len(attempts), &j.err)
	}
	id := attempts[0].Start.Runs["mlflow"]
	if id == "" {
		t.Fatalf("no MLflow run in the spool; stderr:\n%s", &j.err)
	}
	return id
}

// samples are the sample seqs the spool holds.
func (j *job) samples(t *testing.T) []int64 {
	t.Helper()
	ss, _, _, err := spooltest.ReadFile(j.spool)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, s := range ss {
		seqs = append(seqs, s.Seq)
	}
	return seqs
}

// requireHistory checks that key holds exactly one point per spooled sample
// that carried it: steps equal to the sample seqs, none twice.
func requireHistory(t *testing.T, srv *mlflowtest.Server, j *job, runID, key string) []mlflowtest.Metric {
	t.Helper()
	ss, _, _, err := spooltest.ReadFile(j.spool)
	if err != nil {
		t.Fatal(err)
	}
	var want []int64
	name := strings.TrimPrefix(key, "system/")
	if i := strings.Index(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	for _, s := range ss {
		if _, ok := s.Value(name); ok {
			want = append(want, s.Seq)
		}
	}
	hist := srv.History(t, runID, key)
	var got []int64
	for _, m := range hist {
		got = append(got, m.Step)
	}
	slices.Sort(got)
	if len(want) == 0 {
		t.Fatalf("no spooled sample has %s", name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: steps in MLflow %v, want one per spooled sample %v", key, got, want)
	}
	return hist
}

// requireSteadyLine checks that a steady series (metrics.Desc.Steady) is
// stored as the line the spooled samples draw: their first and last steps,
// both ends of each change, and between two stored points only their
// common value.
func requireSteadyLine(t *testing.T, srv *mlflowtest.Server, j *job, runID, key string) {
	t.Helper()
	ss, _, _, err := spooltest.ReadFile(j.spool)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(key, "system/")
	var steps []int64
	want := map[int64]float64{}
	for _, s := range ss {
		if v, ok := s.Value(name); ok {
			steps = append(steps, s.Seq)
			want[s.Seq] = v
		}
	}
	if len(steps) == 0 {
		t.Fatalf("no spooled sample has %s", name)
	}
	stored := map[int64]bool{}
	for _, m := range srv.History(t, runID, key) {
		if v, ok := want[m.Step]; !ok || v != m.Value {
			t.Errorf("%s: stored %v at step %d, the spool has %v (%v)", key, m.Value, m.Step, v, ok)
		}
		stored[m.Step] = true
	}
	if !stored[steps[0]] || !stored[steps[len(steps)-1]] {
		t.Fatalf("%s: first (%d) or last (%d) spooled step not stored: %v", key, steps[0], steps[len(steps)-1], stored)
	}
	for i := 1; i < len(steps); i++ {
		if p, s := steps[i-1], steps[i]; want[s] != want[p] && (!stored[p] || !stored[s]) {
			t.Errorf("%s: the value changes from step %d to %d, and an end of the change is not stored", key, p, s)
		}
	}
}

// (1) bridge creates the run; the Python child's mlflow.start_run() attaches
// to it; the run holds the child's metric and bridge's system histories.
func TestMLflowRunCreatedAndSharedWithChild(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.Shared(t)
	script := `import mlflow, time
run = mlflow.start_run()
print("child run", run.info.run_id)
mlflow.log_metric("loss", 0.5, step=0)
time.sleep(1.5)
mlflow.log_metric("loss", 0.25, step=1)
mlflow.end_run()
`
	j := newJob(t, srv.URL, "--interval=300ms", "--run-name=e2e-shared", "--", "PYTHON", "-c", script)
	j.cmd.Args[len(j.cmd.Args)-3] = j.python
	if code := j.run(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
	}
	id := j.runID(t)
	if !strings.Contains(j.out.String(), "child run "+id) {
		t.Fatalf("the child attached to another run: stdout %q, bridge's run %s", j.out.String(), id)
	}
	run := srv.GetRun(t, id)
	if run.Info.Status != "FINISHED" || run.Info.RunName != "e2e-shared" {
		t.Errorf("run %+v, want FINISHED named e2e-shared", run.Info)
	}
	if loss := srv.History(t, id, "loss"); len(loss) != 2 {
		t.Errorf("child's loss history = %+v, want 2 points", loss)
	}
	keys := []string{
		"system/container_memory_working_set_megabytes", "system/container_memory_usage_megabytes",
		"system/node_memory_used_megabytes", "system/node_memory_usage_megabytes", "system/node_cpu_utilization_percentage",
	}
	if cpuAtRoot(t) {
		// The host's figures are not sent as a container's; the run says why.
		if !strings.Contains(run.Tags["bridge.cgroup.at_root"], "cpu") {
			t.Errorf("bridge runs in the root cpu cgroup, and bridge.cgroup.at_root = %q does not say so", run.Tags["bridge.cgroup.at_root"])
		}
	} else {
		keys = append(keys, "system/container_cpu_utilization_percentage")
	}
	for _, k := range keys {
		requireHistory(t, srv, j, id, k)
	}
	requireSteadyLine(t, srv, j, id, "system/node_memory_total_megabytes")
	for k, want := range map[string]string{"bridge.version": version, "bridge.exit_code": "0", "bridge.cgroup.version": "hybrid"} {
		if k == "bridge.cgroup.version" && run.Tags[k] == "" {
			t.Errorf("tag %s missing", k)
			continue
		}
		if k != "bridge.cgroup.version" && run.Tags[k] != want {
			t.Errorf("tag %s = %q, want %q", k, run.Tags[k], want)
		}
	}
	for _, k := range []string{"bridge.memory_limit_megabytes", "bridge.cpu_limit_cores", "bridge.cgroup.path", "bridge.hostname"} {
		if run.Tags[k] == "" {
			t.Errorf("tag %s missing; tags: %v", k, run.Tags)
		}
	}
}

// (2) MLFLOW_RUN_ID given: bridge writes into that run and leaves its
// status to its owner.
func TestMLflowRunIDGiven(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := srv.CreateExperiment(t, "bridge-e2e-given-"+fmt.Sprint(time.Now().UnixNano()))
	id := srv.CreateRun(t, exp, "owned-by-someone")
	j := newJob(t, srv.URL, "--interval=300ms", "--", "sh", "-c", `echo "$MLFLOW_RUN_ID"; sleep 1`).env("MLFLOW_RUN_ID=" + id)
	if code := j.run(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
	}
	if got := strings.TrimSpace(j.out.String()); got != id {
		t.Errorf("child saw MLFLOW_RUN_ID=%q, want %q", got, id)
	}
	if j.runID(t) != id {
		t.Errorf("spool records run %s", j.runID(t))
	}
	requireHistory(t, srv, j, id, "system/container_memory_working_set_megabytes")
	if st := srv.GetRun(t, id).Info.Status; st != "RUNNING" {
		t.Errorf("status = %s: bridge must not end a run it did not create", st)
	}
}

// (3) A node id puts every key under system/<node_id>/.
func TestMLflowNodeID(t *testing.T) {
	srv := mlflowtest.Shared(t)
	j := newJob(t, srv.URL, "--interval=300ms", "--node-id=worker-1", "--", "sleep", "1")
	if code := j.run(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
	}
	id := j.runID(t)
	keys := srv.MetricKeys(t, id, "system/")
	if len(keys) < 10 {
		t.Fatalf("only %d system keys: %v", len(keys), keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "system/worker-1/") {
			t.Errorf("key %s is not under system/worker-1/", k)
		}
	}
	requireHistory(t, srv, j, id, "system/worker-1/node_memory_used_megabytes")
	if tag := srv.GetRun(t, id).Tags["bridge.node_id"]; tag != "worker-1" {
		t.Errorf("bridge.node_id tag = %q", tag)
	}
}

// (4) Exit codes and signals set the terminal status of a run bridge
// created, and the exit status is the child's.
func TestMLflowTerminalStatus(t *testing.T) {
	srv := mlflowtest.Shared(t)
	cases := []struct {
		name   string
		script string
		term   bool // send SIGTERM to bridge once the child is up
		code   int
		status string
	}{
		{"exit 0", "sleep 0.5", false, 0, "FINISHED"},
		{"exit 1", "sleep 0.5; exit 1", false, 1, "FAILED"},
		{"SIGKILL", "sleep 0.5; kill -KILL $$", false, 137, "KILLED"},
		{"SIGTERM to bridge", "touch ready; while :; do sleep 0.05; done", true, 143, "KILLED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, srv.URL, "--interval=300ms", "--", "sh", "-c", tc.script)
			if err := j.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if tc.term {
				waitfor.File(t, 30*time.Second, filepath.Join(j.dir, "ready"))
				j.cmd.Process.Signal(syscall.SIGTERM)
			}
			if code := exitCode(t, j.cmd.Wait()); code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, &j.err)
			}
			run := srv.GetRun(t, j.runID(t))
			if run.Info.Status != tc.status || run.Info.EndTime == 0 {
				t.Errorf("status %s end %d, want %s with an end time", run.Info.Status, run.Info.EndTime, tc.status)
			}
			if run.Tags["bridge.exit_code"] != fmt.Sprint(tc.code) {
				t.Errorf("bridge.exit_code = %q", run.Tags["bridge.exit_code"])
			}
		})
	}
}

// (5) The server goes away mid-run and comes back: every sample reaches it,
// once, in order.
func TestMLflowOutageLosesNothing(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.Start(t)
	j := newJob(t, srv.URL, "--interval=250ms", "--flush-timeout=90s", "--", "sh", "-c", "touch up; while [ ! -e back ]; do sleep 0.1; done; sleep 2")
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitfor.File(t, 30*time.Second, filepath.Join(j.dir, "up"))
	const key = "system/node_memory_used_megabytes"
	id := j.runID(t)
	waitfor.Cond(t, 60*time.Second, "samples in MLflow before the outage", func() bool {
		return len(srv.History(t, id, key)) > 0
	})
	srv.Stop(t)
	down := time.Now()
	before := len(j.samples(t))
	// The outage lasts until bridge has found it and sampled through it.
	waitfor.Cond(t, 60*time.Second, "bridge to report the outage and sample through it", func() bool {
		return strings.Contains(j.err.String(), "cannot send to the tracker") && len(j.samples(t)) >= before+3
	})
	srv.Restart(t)
	outage := time.Since(down)
	os.WriteFile(filepath.Join(j.dir, "back"), nil, 0o644)
	if code := exitCode(t, j.cmd.Wait()); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
	}
	seqs := j.samples(t)
	hist := requireHistory(t, srv, j, id, key)
	requireHistory(t, srv, j, id, "system/container_memory_working_set_megabytes")
	// Timestamps are those of the samples, not of the late upload.
	for i := 1; i < len(hist); i++ {
		if hist[i].Step > hist[i-1].Step && hist[i].Timestamp < hist[i-1].Timestamp {
			t.Errorf("timestamps out of step order at %d: %+v %+v", i, hist[i-1], hist[i])
		}
	}
	if !strings.Contains(j.err.String(), "cannot send to the tracker") || !strings.Contains(j.err.String(), "reachable again") {
		t.Errorf("stderr does not report the outage and the recovery:\n%s", &j.err)
	}
	t.Logf("outage %.1fs, %d samples, all in MLflow once", outage.Seconds(), len(seqs))
}

// (6) A wrong token on an authenticating endpoint: one clear error, no
// secret printed, and the child's own exit status.
func TestMLflowWrongToken(t *testing.T) {
	srv := mlflowtest.Shared(t)
	proxy := authproxy.Start(t, srv.URL, "the-right-token")
	const secret = "s3cr3t-wrong-token"
	j := newJob(t, proxy.URL, "--interval=300ms", "--", "sh", "-c", "sleep 1; exit 4").env("MLFLOW_TRACKING_TOKEN=" + secret)
	if code := j.run(t); code != 4 {
		t.Fatalf("exit %d, want the child's 4; stderr:\n%s", code, &j.err)
	}
	stderr := j.err.String()
	if strings.Contains(stderr, secret) {
		t.Fatalf("the token was printed:\n%s", stderr)
	}
	var errs []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "level=ERROR") {
			errs = append(errs, l)
		}
	}
	if len(errs) != 1 || !strings.Contains(errs[0], "401") || !strings.Contains(errs[0], "MLFLOW_TRACKING_TOKEN") {
		t.Fatalf("want one error line naming 401 and MLFLOW_TRACKING_TOKEN, got %d:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	if len(j.samples(t)) == 0 {
		t.Error("samples must still be spooled")
	}
}

// (7) bridge sync uploads an offline spool; a second sync logs nothing twice.
func TestMLflowSyncTwice(t *testing.T) {
	srv := mlflowtest.Shared(t)
	j := newJob(t, "", "--interval=250ms", "--trackers=none", "--", "sleep", "1.2")
	if code := j.run(t); code != 0 {
		t.Fatalf("offline run: exit %d; stderr:\n%s", code, &j.err)
	}
	n := len(j.samples(t))
	syncOnce := func() string {
		cmd := exec.Command(testbin.Bridge(t), "sync", j.spool)
		cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME=bridge-e2e-sync")
		out, err := cmd.CombinedOutput()
		if code := exitCode(t, err); code != 0 {
			t.Fatalf("sync: exit %d:\n%s", code, out)
		}
		return string(out)
	}
	first := syncOnce()
	if !strings.Contains(first, fmt.Sprintf("%d samples sent", n)) {
		t.Fatalf("first sync did not send all %d samples:\n%s", n, first)
	}
	_, _, attempts, _ := spooltest.ReadFile(j.spool)
	id := attempts[len(attempts)-1].Start.Runs["mlflow"]
	h1 := requireHistory(t, srv, j, id, "system/node_memory_used_megabytes")
	second := syncOnce()
	if !strings.Contains(second, "0 samples sent") {
		t.Fatalf("second sync sent something:\n%s", second)
	}
	_, _, attempts, _ = spooltest.ReadFile(j.spool)
	if id2 := attempts[len(attempts)-1].Start.Runs["mlflow"]; id2 != id {
		t.Fatalf("second sync used run %s, the first %s", id2, id)
	}
	h2 := requireHistory(t, srv, j, id, "system/node_memory_used_megabytes")
	if len(h1) != len(h2) {
		t.Fatalf("history grew from %d to %d points", len(h1), len(h2))
	}
}

// A non-HTTP tracking URI is explained and falls back to the spool.
func TestMLflowNonHTTPURIFallsBack(t *testing.T) {
	mlflowtest.Python(t)
	j := newJob(t, "sqlite:///mlflow.db", "--interval=300ms", "--", "sh", "-c", "sleep 0.5; exit 0")
	if code := j.run(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
	}
	if !strings.Contains(j.err.String(), "mlflow server") || !strings.Contains(j.err.String(), "sqlite:") {
		t.Errorf("stderr does not explain that bridge needs mlflow server:\n%s", &j.err)
	}
	if len(j.samples(t)) == 0 {
		t.Error("no samples spooled")
	}
}

// bridge attach samples into an existing run until the given pid exits.
func TestMLflowAttach(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := srv.CreateExperiment(t, "bridge-e2e-attach-"+fmt.Sprint(time.Now().UnixNano()))
	id := srv.CreateRun(t, exp, "notebook")
	target := exec.Command("sleep", "1.5")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	go target.Wait()
	j := newJob(t, srv.URL, "attach", "--interval=300ms", "--run-id", id, "--pid", fmt.Sprint(target.Process.Pid))
	if code := j.run(t); code != 0 {
		t.Fatalf("attach: exit %d; stderr:\n%s", code, &j.err)
	}
	requireHistory(t, srv, j, id, "system/container_memory_working_set_megabytes")
	if st := srv.GetRun(t, id).Info.Status; st != "RUNNING" {
		t.Errorf("attach changed the run's status to %s", st)
	}
	if !strings.Contains(j.err.String(), "exited") {
		t.Errorf("attach did not say the process exited:\n%s", &j.err)
	}
}

// steps are the steps of key in the run, sorted; a step twice fails.
func steps(t *testing.T, srv *mlflowtest.Server, runID, key string) []int64 {
	t.Helper()
	var got []int64
	for _, m := range srv.History(t, runID, key) {
		got = append(got, m.Step)
	}
	slices.Sort(got)
	for i := 1; i < len(got); i++ {
		if got[i] == got[i-1] {
			t.Fatalf("%s: step %d twice in %v", key, got[i], got)
		}
	}
	return got
}

// A restarted attempt on a run given to bridge (MLFLOW_RUN_ID), whose spool
// is gone (another pod, another working directory): its steps continue
// after those the run holds for the node, as MLflow's own monitor does when
// it resumes a run, instead of starting again at 0 under the same keys.
// Each attempt's spool is removed at the end (every sample delivered): the
// steps come from the run.
func TestMLflowRunIDGivenStepsContinue(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.Shared(t)
	exp := srv.CreateExperiment(t, "bridge-e2e-steps-"+fmt.Sprint(time.Now().UnixNano()))
	id := srv.CreateRun(t, exp, "restarted")
	for _, node := range []string{"", "worker-1"} {
		key := "system/container_memory_working_set_megabytes"
		args := []string{"--interval=300ms", "--", "sleep", "1"}
		if node != "" {
			key = "system/" + node + "/container_memory_working_set_megabytes"
			args = append([]string{"--node-id=" + node}, args...)
		}
		var last int64 = -1
		for attempt := range 2 {
			dir := t.TempDir() // a fresh working directory: no spool of the attempt before
			cmd := exec.Command(testbin.Bridge(t), args...)
			cmd.Dir = dir
			cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_RUN_ID="+id)
			out, err := cmd.CombinedOutput()
			if code := exitCode(t, err); code != 0 {
				t.Fatalf("node %q attempt %d: exit %d:\n%s", node, attempt, code, out)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "bridge-spool-*.jsonl")); len(left) != 0 {
				t.Errorf("node %q attempt %d: a delivered spool of a given run was kept: %v\n%s", node, attempt, left, out)
			}
			all := steps(t, srv, id, key)
			var mine []int64
			for _, s := range all {
				if s > last {
					mine = append(mine, s)
				}
			}
			if len(mine) == 0 || len(all) != int(last)+1+len(mine) || mine[0] != last+1 {
				t.Fatalf("node %q attempt %d: steps %v after the earlier attempts' last %d: want this attempt's to follow on at %d\n%s",
					node, attempt, all, last, last+1, out)
			}
			last = all[len(all)-1]
		}
	}
}

// `bridge attach` twice for the same process and run: the second names the
// first and does nothing (one monitor, each point once). When the run's
// owner ends the run (here through the REST API, as mlflow.end_run() from
// another process does), the monitor finds it at its next post, as MLflow's
// own monitor does, and stops by itself: what it took after the end is
// left out, no tag is written at its end, and its delivered spool is
// removed.
func TestAttachTwiceAndRunEnd(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := srv.CreateExperiment(t, "bridge-e2e-attach-twice-"+fmt.Sprint(time.Now().UnixNano()))
	id := srv.CreateRun(t, exp, "notebook")
	target := exec.Command("sleep", "600")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Process.Kill(); target.Wait() })
	attach := func() (*exec.Cmd, *syncbuf.Buffer, string) {
		dir := t.TempDir()
		cmd := exec.Command(testbin.Bridge(t), "attach", "--interval=300ms", "--run-id", id, "--pid", fmt.Sprint(target.Process.Pid))
		cmd.Dir = dir
		cmd.Env = cleanEnv("MLFLOW_TRACKING_URI=" + srv.URL)
		var errb syncbuf.Buffer
		cmd.Stderr = &errb
		return cmd, &errb, dir
	}
	key := "system/container_memory_working_set_megabytes"
	first, firstErr, firstDir := attach()
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, 90*time.Second, "two points of the first attach in the run", func() bool { return len(srv.History(t, id, key)) >= 2 })

	second, secondErr, _ := attach()
	if code := exitCode(t, second.Run()); code != 0 {
		t.Errorf("second attach: exit %d; stderr:\n%s", code, secondErr)
	}
	if want := fmt.Sprintf("monitored already by bridge attach pid %d", first.Process.Pid); !strings.Contains(secondErr.String(), want) {
		t.Errorf("the second attach does not name the first (%q):\n%s", want, secondErr)
	}

	srv.EndRun(t, id, "FINISHED", time.Now())
	ended := srv.GetRun(t, id).Info
	// Bounded: attach must stop on its own once its run has ended.
	if code := exitCode(t, waitExit(t, first, firstErr, 2*time.Minute)); code != 0 {
		t.Errorf("first attach: exit %d; stderr:\n%s", code, firstErr)
	}
	log := firstErr.String()
	if !regexp.MustCompile(`(?m)^  ended +bridge stopped sampling: the run was ended by its owner$`).MatchString(log) {
		t.Errorf("attach did not stop because the run ended:\n%s", log)
	}
	// The last count is the table's: a warning said an earlier one.
	var left []string
	for _, m := range regexp.MustCompile(`bridge left out the ([1-9]\d*) samples? taken after that`).FindAllStringSubmatch(log, -1) {
		left = m
	}
	if left == nil {
		t.Errorf("the sample taken at the stop, after the run's end, was not left out:\n%s", log)
	}
	// The table tells sent from left out, and records no end of its own.
	taken := regexp.MustCompile(`(?m)^  duration .*; (\d+) samples? taken$`).FindStringSubmatch(log)
	sent := regexp.MustCompile(`(?m)^  mlflow +(\d+) samples? sent to run`).FindStringSubmatch(log)
	if left != nil && (taken == nil || sent == nil || atoi(t, sent[1])+atoi(t, left[1]) != atoi(t, taken[1])) {
		t.Errorf("sent (%q) and left out (%q) do not add up to the samples taken (%q):\n%s", sent, left, taken, log)
	}
	if !regexp.MustCompile(`(?m)^  mlflow end +left as its owner ended it`).MatchString(log) {
		t.Errorf("the table does not say the run was left as its owner ended it:\n%s", log)
	}
	run := srv.GetRun(t, id)
	if _, ok := run.Tags["bridge.attach_end"]; ok || run.Info.Status != "FINISHED" || run.Info.EndTime != ended.EndTime {
		t.Errorf("after its end the run got status %s end %d (owner's: %d), tags %v: bridge wrote into it",
			run.Info.Status, run.Info.EndTime, ended.EndTime, run.Tags)
	}
	for i, s := range steps(t, srv, id, key) { // each point once
		if s != int64(i) {
			t.Fatalf("steps of one monitor are not 0, 1, 2...: %v", steps(t, srv, id, key))
		}
	}
	if left, _ := filepath.Glob(filepath.Join(firstDir, "bridge-spool-*.jsonl")); len(left) != 0 {
		t.Errorf("the delivered spool was left in the working directory: %v\n%s", left, log)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}
