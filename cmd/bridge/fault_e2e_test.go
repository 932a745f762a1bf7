package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/mocks/faultproxy"
	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
)

// These tests put mocks/faultproxy between the real bridge binary and a real
// MLflow server and check, for each fault a tracker or the network can
// produce, that the child runs and its exit status is kept, that bridge
// exits within its documented bound, and that once the fault clears every
// sample is in MLflow's own metric history exactly once.

const (
	faultChildExit = 3
	// faultBound is bridge's documented bound after the child exits
	// (--flush-timeout 40s here, plus 15 s to record the end), with a
	// generous margin for a loaded machine: a bound, not a speed claim.
	faultBound = 40*time.Second + 15*time.Second + 45*time.Second
	faultKey   = "system/node_memory_used_megabytes"
)

// faultJob runs `bridge -- sh -c 'echo run=$MLFLOW_RUN_ID; sleep N; exit 3'`
// through the proxy, in an experiment of its own.
func faultJob(t *testing.T, srv *mlflowtest.Server, p *faultproxy.Proxy, sleep string) (*job, string) {
	t.Helper()
	exp := fmt.Sprintf("bridge-fault-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
	j := newJob(t, p.URL(), "--interval=300ms", "--flush-timeout=40s", "--",
		"sh", "-c", fmt.Sprintf(`echo "run=$MLFLOW_RUN_ID"; sleep %s; exit %d`, sleep, faultChildExit))
	j.env("MLFLOW_EXPERIMENT_NAME="+exp, "MLFLOW_HTTP_REQUEST_TIMEOUT=3")
	return j, exp
}

// runTimed runs the job and checks the exit status and the bound.
func runTimed(t *testing.T, j *job, childFor time.Duration) {
	t.Helper()
	start := time.Now()
	code := j.run(t)
	took := time.Since(start)
	if code != faultChildExit {
		t.Fatalf("bridge exited %d, want the child's %d; stderr:\n%s", code, faultChildExit, &j.err)
	}
	// Start timeout (5 s) + the child + the end-of-run bound.
	if bound := config.DefaultStartTimeout + childFor + faultBound; took > bound {
		t.Errorf("bridge took %s, over its bound %s; stderr:\n%s", took, bound, &j.err)
	}
}

func childRunID(j *job) string {
	for _, l := range strings.Split(j.out.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "run="); ok {
			return v
		}
	}
	return "<child printed nothing>"
}

func newProxy(t *testing.T, srv *mlflowtest.Server) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// Faults while the job runs, on the requests that carry samples.
func TestFaultDuringRun(t *testing.T) {
	srv := mlflowtest.Shared(t)
	const batch = "runs/log-batch"
	for _, tc := range []struct {
		name  string
		fault faultproxy.Fault
	}{
		{"500", faultproxy.Fault{Path: batch, Kind: faultproxy.Status, Code: http.StatusInternalServerError, Times: 2}},
		{"502", faultproxy.Fault{Path: batch, Kind: faultproxy.Status, Code: http.StatusBadGateway, Times: 2}},
		{"503", faultproxy.Fault{Path: batch, Kind: faultproxy.Status, Code: http.StatusServiceUnavailable, Times: 2}},
		{"429 Retry-After 0", faultproxy.Fault{Path: batch, Kind: faultproxy.Status, Code: http.StatusTooManyRequests, RetryAfter: "0", Times: 4}},
		{"429 Retry-After 2", faultproxy.Fault{Path: batch, Kind: faultproxy.Status, Code: http.StatusTooManyRequests, RetryAfter: "2", Times: 1}},
		{"429 Retry-After date", faultproxy.Fault{Path: batch, Kind: faultproxy.Status, Code: http.StatusTooManyRequests,
			RetryAfter: time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), Times: 3}},
		{"slow answer", faultproxy.Fault{Path: batch, Kind: faultproxy.Slow, Delay: 2 * time.Second, Times: 2}},
		{"timeout", faultproxy.Fault{Path: batch, Kind: faultproxy.Hang, Times: 1}},
		{"reset mid-body", faultproxy.Fault{Path: batch, Kind: faultproxy.ResetMidBody, Times: 2}},
		{"applied then reset", faultproxy.Fault{Path: batch, Kind: faultproxy.AppliedThenReset, Times: 2}},
		{"endless body", faultproxy.Fault{Path: batch, Kind: faultproxy.Endless, Times: 1}},
		{"200 HTML", faultproxy.Fault{Path: batch, Kind: faultproxy.Answer, Body: "<html><body>Please log in</body></html>", Times: 3}},
		{"200 not JSON", faultproxy.Fault{Path: batch, Kind: faultproxy.Answer, ContentType: "text/plain", Body: "OK", Times: 2}},
		{"200 wrong-typed JSON", faultproxy.Fault{Path: batch, Kind: faultproxy.Answer, ContentType: "application/json", Body: `["accepted"]`, Times: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newProxy(t, srv)
			p.Schedule(tc.fault)
			j, _ := faultJob(t, srv, p, "4")
			runTimed(t, j, 4*time.Second)
			if p.Hits(tc.fault.Kind) == 0 {
				t.Fatalf("the fault was never hit; stderr:\n%s", &j.err)
			}
			id := j.runID(t)
			if got := childRunID(j); got != id {
				t.Errorf("child got MLFLOW_RUN_ID=%q, bridge's run is %s", got, id)
			}
			requireHistory(t, srv, j, id, faultKey)
			run := srv.GetRun(t, id)
			if run.Info.Status != "FAILED" || run.Tags["bridge.exit_code"] != fmt.Sprint(faultChildExit) {
				t.Errorf("run %s status %s, exit tag %q; want FAILED and %d", id, run.Info.Status, run.Tags["bridge.exit_code"], faultChildExit)
			}
			// One outage, one warning: never one per attempt.
			if n := strings.Count(j.err.String(), "cannot send to the tracker"); n > 1 {
				t.Errorf("the outage was reported %d times; stderr:\n%s", n, &j.err)
			}
		})
	}
}

// The tracker refuses connections for a few seconds in the middle of the job.
func TestFaultRefusedDuringRun(t *testing.T) {
	srv := mlflowtest.Shared(t)
	p := newProxy(t, srv)
	j, _ := faultJob(t, srv, p, "6")
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitfor.Cond(t, 60*time.Second, "a first log-batch through the proxy", func() bool {
		return p.Count("runs/log-batch") > 0
	})
	if err := p.Down(); err != nil {
		t.Fatal(err)
	}
	// The outage lasts until bridge has found it.
	waitfor.Cond(t, 60*time.Second, "bridge to report the outage", func() bool {
		return strings.Contains(j.err.String(), "cannot send to the tracker")
	})
	if err := p.Up(); err != nil {
		t.Fatal(err)
	}
	code := exitCode(t, j.cmd.Wait())
	if code != faultChildExit {
		t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
	}
	if took, bound := time.Since(start), config.DefaultStartTimeout+6*time.Second+faultBound; took > bound {
		t.Errorf("bridge took %s, over %s", took, bound)
	}
	requireHistory(t, srv, j, j.runID(t), faultKey)
	if !strings.Contains(j.err.String(), "tracker reachable again") {
		t.Errorf("the end of the outage was not reported; stderr:\n%s", &j.err)
	}
}

// Faults on runs/create that clear within the start timeout: the child still
// gets the run, and there is exactly one.
func TestFaultAtStartRecovers(t *testing.T) {
	srv := mlflowtest.Shared(t)
	const create = "runs/create"
	for _, tc := range []struct {
		name  string
		fault faultproxy.Fault
	}{
		{"503", faultproxy.Fault{Path: create, Kind: faultproxy.Status, Code: http.StatusServiceUnavailable, Times: 2}},
		{"429 Retry-After 0", faultproxy.Fault{Path: create, Kind: faultproxy.Status, Code: http.StatusTooManyRequests, RetryAfter: "0", Times: 2}},
		{"reset mid-body", faultproxy.Fault{Path: create, Kind: faultproxy.ResetMidBody, Times: 1}},
		{"applied then reset", faultproxy.Fault{Path: create, Kind: faultproxy.AppliedThenReset, Times: 1}},
		{"200 HTML", faultproxy.Fault{Path: create, Kind: faultproxy.Answer, Body: "<html>login</html>", Times: 1}},
		{"endless body", faultproxy.Fault{Path: create, Kind: faultproxy.Endless, Times: 1}},
		{"slow answer", faultproxy.Fault{Path: create, Kind: faultproxy.Slow, Delay: 1500 * time.Millisecond, Times: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newProxy(t, srv)
			p.Schedule(tc.fault)
			j, exp := faultJob(t, srv, p, "3")
			runTimed(t, j, 3*time.Second)
			if p.Hits(tc.fault.Kind) == 0 {
				t.Fatalf("the fault was never hit; stderr:\n%s", &j.err)
			}
			id := j.runID(t)
			if got := childRunID(j); got != id {
				t.Errorf("child got MLFLOW_RUN_ID=%q, bridge's run is %s; stderr:\n%s", got, id, &j.err)
			}
			if ids := srv.RunIDs(t, exp); len(ids) != 1 || ids[0] != id {
				t.Errorf("runs in the experiment: %v, want only %s", ids, id)
			}
			requireHistory(t, srv, j, id, faultKey)
		})
	}
}

// Answers to runs/create that are invalid: the sink is not used, the child
// runs (without MLFLOW_RUN_ID) and exits as it would, samples stay spooled.
func TestFaultInvalidRunAtStart(t *testing.T) {
	srv := mlflowtest.Shared(t)
	const create = "runs/create"
	for _, tc := range []struct {
		name  string
		fault faultproxy.Fault
	}{
		{"NUL byte", faultproxy.Fault{Path: create, Kind: faultproxy.RewriteRunID, RunID: "abc\x00def"}},
		{"200 KB", faultproxy.Fault{Path: create, Kind: faultproxy.RewriteRunID, RunID: strings.Repeat("a", 200<<10)}},
		{"empty", faultproxy.Fault{Path: create, Kind: faultproxy.RewriteRunID, RunID: ""}},
		{"not an id", faultproxy.Fault{Path: create, Kind: faultproxy.RewriteRunID, RunID: "../../etc/passwd"}},
		{"wrong-typed JSON", faultproxy.Fault{Path: create, Kind: faultproxy.Answer, ContentType: "application/json", Body: `{"run":{"info":{"run_id":12345}}}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newProxy(t, srv)
			p.Schedule(tc.fault)
			j, _ := faultJob(t, srv, p, "1")
			runTimed(t, j, time.Second)
			if got := childRunID(j); got != "" {
				t.Errorf("child got MLFLOW_RUN_ID=%q from an invalid answer", shortened(got))
			}
			if !strings.Contains(j.err.String(), "not used") {
				t.Errorf("the refused tracker is not reported; stderr:\n%s", shortened(j.err.String()))
			}
			if len(j.samples(t)) == 0 {
				t.Error("no samples in the spool")
			}
			if p.Count("runs/log-batch") != 0 {
				t.Error("bridge sent samples to a run it could not validate")
			}
		})
	}
}

func shortened(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "..."
	}
	return s
}

// The tracker is down for longer than the start timeout: the child starts
// without MLFLOW_RUN_ID; once the tracker answers, bridge creates its run in
// the background and every sample reaches it. The child's own
// mlflow.start_run() (the real client, which retries while the server is
// down) creates a separate run: two runs, bridge's tagged bridge.start_id.
func TestFaultTrackerDownAtStart(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.Shared(t)
	p := newProxy(t, srv)
	exp := fmt.Sprintf("bridge-fault-down-%d", time.Now().UnixNano())
	srv.CreateExperiment(t, exp)
	if err := p.Down(); err != nil {
		t.Fatal(err)
	}
	script := `import os, mlflow, time
print("run=" + os.environ.get("MLFLOW_RUN_ID", ""), flush=True)
with mlflow.start_run() as run:
    print("child run", run.info.run_id, flush=True)
    mlflow.log_metric("loss", 1.0)
time.sleep(3)
`
	j := newJob(t, p.URL(), "--interval=300ms", "--flush-timeout=40s", "--", "PYTHON", "-c", script)
	j.cmd.Args[len(j.cmd.Args)-3] = j.python
	j.env("MLFLOW_EXPERIMENT_NAME="+exp, "MLFLOW_HTTP_REQUEST_TIMEOUT=3")
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The start record is written once the start timeout has passed and the
	// child's environment is settled: only then may the tracker come back.
	waitfor.Cond(t, 90*time.Second, "the start record", func() bool {
		_, _, at, err := spooltest.ReadFile(j.spool)
		return err == nil && len(at) > 0
	})
	if err := p.Up(); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, j.cmd.Wait()); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
	}
	if got := childRunID(j); got != "" {
		t.Errorf("child got MLFLOW_RUN_ID=%q while the tracker was down", got)
	}
	ids := srv.RunIDs(t, exp)
	var bridgeRun, childRun string
	for _, id := range ids {
		if srv.GetRun(t, id).Tags["bridge.start_id"] != "" {
			bridgeRun = id
		} else {
			childRun = id
		}
	}
	if len(ids) != 2 || bridgeRun == "" || childRun == "" {
		t.Fatalf("runs %v (bridge's %q, child's %q), want one of each; stdout:\n%s\nstderr:\n%s", ids, bridgeRun, childRun, &j.out, &j.err)
	}
	if !strings.Contains(j.out.String(), "child run "+childRun) {
		t.Errorf("child's run is not %s: %s", childRun, &j.out)
	}
	requireHistory(t, srv, j, bridgeRun, faultKey)
	if !strings.Contains(j.err.String(), bridgeRun) {
		t.Errorf("bridge did not say which run got its samples; stderr:\n%s", &j.err)
	}
	if st := srv.GetRun(t, bridgeRun).Info.Status; st != "FINISHED" {
		t.Errorf("bridge's run is %s, want FINISHED", st)
	}
}

// W&B through the proxy: the child's wandb and bridge both talk to the mock
// through it; the faults hit bridge's file_stream requests only (its
// User-Agent), and every spooled sample ends up in the run once
// (checkWandbRun), with the child's exit status kept.
func TestFaultWandb(t *testing.T) {
	wbPython(t)
	const stream = "/file_stream"
	bridgeOnly := faultproxy.FromUserAgent("bridge")
	for _, tc := range []struct {
		name  string
		fault faultproxy.Fault
	}{
		{"200 HTML", faultproxy.Fault{Path: stream, Kind: faultproxy.Answer, Body: "<html>Sign in</html>", Times: 2}},
		{"429 Retry-After 0", faultproxy.Fault{Path: stream, Kind: faultproxy.Status, Code: http.StatusTooManyRequests, RetryAfter: "0", Times: 3}},
		{"500", faultproxy.Fault{Path: stream, Kind: faultproxy.Status, Code: http.StatusInternalServerError, Times: 2}},
		{"applied then reset", faultproxy.Fault{Path: stream, Kind: faultproxy.AppliedThenReset, Times: 2}},
		{"endless body", faultproxy.Fault{Path: stream, Kind: faultproxy.Endless, Times: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: wbKey})
			p, err := faultproxy.Start(srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			tc.fault.Match = bridgeOnly
			p.Schedule(tc.fault)
			const exit = 4
			began := time.Now()
			j := startWBEnv(ctx, t, srv, "", []string{"WANDB_BASE_URL=" + p.URL()}, []string{"--node-id", "node-f", "--flush-timeout", "40s"}, wbProject, fmt.Sprint(exit))
			runID := strings.TrimPrefix(j.expect(ctx, t, "ready "), "ready ")
			for range 3 {
				j.step(ctx, t)
			}
			if err := wandbserver.Wait(ctx, func() bool { return p.Hits(tc.fault.Kind) > 0 }); err != nil {
				t.Fatalf("the fault was never hit: %v", err)
			}
			if code := j.end(t); code != exit {
				t.Fatalf("bridge exited %d, want the child's %d", code, exit)
			}
			if took, bound := time.Since(began), 2*time.Minute; took > bound {
				t.Errorf("bridge took %s, over %s", took, bound)
			}
			checkWandbRun(t, srv, runID, "node-f", exit, j)
		})
	}
}
