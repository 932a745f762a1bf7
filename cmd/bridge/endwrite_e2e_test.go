package main

// The end of a run, retried (docs/reliability.md, "The end, retried"): the
// real binary behind mocks/faultproxy, in front of a real MLflow server (or
// the W&B mock), with faults on the writes that record the end. Each test
// checks what the tracker holds afterwards and the end-of-run table's
// "<tracker> end" row.
//
// Knobs of TestEndUnderFailuresMultinode, for bench/endfault.sh (CI: one
// round of 16): BRIDGE_TEST_ENDFAULT_NODES, BRIDGE_TEST_ENDFAULT_ROUNDS,
// BRIDGE_TEST_ENDFAULT_SEED (the fault draws' seed; a new one each round).

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/mocks/faultproxy"
	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker/mlflow"
)

var endRecorded = regexp.MustCompile(`(?m)^  mlflow end +recorded on the run$`)

// endJob is a job through p that exits 0 after a second, in an experiment
// of its own.
func endJob(t *testing.T, p *faultproxy.Proxy, flush string) (*job, string) {
	t.Helper()
	exp := uniqueName(t)
	j := newJob(t, p.URL(), "--interval=300ms", "--flush-timeout="+flush, "--", "sh", "-c", `echo "run=$MLFLOW_RUN_ID"; sleep 1`)
	j.env("MLFLOW_EXPERIMENT_NAME="+exp, "MLFLOW_HTTP_REQUEST_TIMEOUT=3")
	return j, exp
}

// (a) One 503 on runs/update: the end is tried again, the run FINISHED,
// and the table says it was recorded. Refused for longer than the flush
// timeout: the table says after how many tries over how long, with the
// last answer, and `bridge sync` records it.
func TestEndRetriedSingleNode(t *testing.T) {
	srv := mlflowtest.Shared(t)
	t.Run("refused once", func(t *testing.T) {
		t.Parallel()
		p := newProxy(t, srv)
		p.Schedule(faultproxy.Fault{Path: "runs/update", Kind: faultproxy.Status, Code: http.StatusServiceUnavailable, Times: 1})
		j, _ := endJob(t, p, "40s")
		if code := j.run(t); code != 0 {
			t.Fatalf("bridge exited %d; stderr:\n%s", code, &j.err)
		}
		run := srv.GetRun(t, j.runID(t))
		if run.Info.Status != mlflow.StatusFinished || p.Hits(faultproxy.Status) != 1 || p.Count("runs/update") != 2 {
			t.Errorf("run %s, %d faults on %d runs/update: want FINISHED after one refused and one taken", run.Info.Status, p.Hits(faultproxy.Status), p.Count("runs/update"))
		}
		if !endRecorded.MatchString(j.err.String()) || strings.Contains(j.err.String(), "records it later") {
			t.Errorf("the table does not say the end was recorded; stderr:\n%s", &j.err)
		}
	})
	t.Run("refused past the flush timeout", func(t *testing.T) {
		t.Parallel()
		p := newProxy(t, srv)
		p.Schedule(faultproxy.Fault{Path: "runs/update", Kind: faultproxy.Status, Code: http.StatusServiceUnavailable})
		j, exp := endJob(t, p, "4s")
		if code := j.run(t); code != 0 {
			t.Fatalf("bridge exited %d; stderr:\n%s", code, &j.err)
		}
		id := j.runID(t)
		left := regexp.MustCompile(`(?m)^  mlflow end +not recorded \(after (\d+) tries over [0-9.]+m?s: MLflow at \S+ answered 503 .*\); record it later with: bridge sync /\S+spool.jsonl$`)
		m := left.FindStringSubmatch(j.err.String())
		if m == nil {
			t.Fatalf("the table does not say why the end was not recorded; stderr:\n%s", &j.err)
		}
		if n, _ := strconv.Atoi(m[1]); n < 2 || n != p.Count("runs/update") {
			t.Errorf("the table says %s tries, the proxy saw %d runs/update: want them equal, more than one", m[1], p.Count("runs/update"))
		}
		if st := srv.GetRun(t, id).Info.Status; st != mlflow.StatusRunning {
			t.Fatalf("run %s after every runs/update was refused, want RUNNING", st)
		}
		if code, out := syncCmd(t, srv, exp, j.spool); code != 0 || srv.GetRun(t, id).Info.Status != mlflow.StatusFinished {
			t.Errorf("bridge sync exited %d, run %s: want it FINISHED\n%s", code, srv.GetRun(t, id).Info.Status, out)
		}
	})
}

// (b) A job of BRIDGE_TEST_ENDFAULT_NODES real bridges (16) behind a proxy
// that fails about 20% of all calls, from the election to the end (503s,
// resets before and after the server applied the request): one run, every
// node's samples in it, every node's end recorded, the run FINISHED. The
// draws' seed is logged; BRIDGE_TEST_ENDFAULT_SEED replays one.
func TestEndUnderFailuresMultinode(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	n := envInt("BRIDGE_TEST_ENDFAULT_NODES", 16)
	for r := range envInt("BRIDGE_TEST_ENDFAULT_ROUNDS", 1) {
		seed := uint64(time.Now().UnixNano())
		if v, err := strconv.ParseUint(os.Getenv("BRIDGE_TEST_ENDFAULT_SEED"), 10, 64); err == nil {
			seed = v
		}
		endUnderFailures(t, srv, n, r, seed)
		if t.Failed() {
			return
		}
	}
}

func endUnderFailures(t *testing.T, srv *mlflowtest.Server, n, round int, seed uint64) {
	t.Helper()
	p := newProxy(t, srv)
	p.Seed(seed)
	p.Schedule(
		faultproxy.Fault{Kind: faultproxy.Status, Code: http.StatusServiceUnavailable, Share: 0.1},
		faultproxy.Fault{Kind: faultproxy.Reset, Share: 0.05 / 0.9},
		faultproxy.Fault{Kind: faultproxy.AppliedThenReset, Share: 0.05 / 0.85},
	)
	id := fmt.Sprintf("%d%d", time.Now().UnixNano(), mnJobs.Add(1))
	exp := fmt.Sprintf("endfault-%d-%s", n, id)
	began := time.Now()
	nodes := startNodes(t, p.URL(), exp, n, slurmJob(id, time.Now().Unix(), n, 0))
	wait(t, nodes...)
	faults := p.Hits(faultproxy.Status) + p.Hits(faultproxy.Reset) + p.Hits(faultproxy.AppliedThenReset)
	t.Logf("round %d (seed %d): %d nodes ended %s after they started; %d faults in %d calls: %d 503, %d resets, %d applied then reset",
		round, seed, n, time.Since(began).Round(time.Second), faults, p.Count(""), p.Hits(faultproxy.Status), p.Hits(faultproxy.Reset), p.Hits(faultproxy.AppliedThenReset))
	for _, nd := range nodes {
		if nd.code != 0 {
			t.Errorf("round %d: %s's bridge exited %d", round, nd.id, nd.code)
		}
		if !endRecorded.MatchString(nd.stderr.String()) {
			t.Errorf("round %d: %s: the table does not say its end was recorded", round, nd.id)
		}
	}
	if t.Failed() {
		return
	}
	run := checkJob(t, srv, exp, "slurm:e2e:"+id+".0", nodes)
	for _, nd := range nodes {
		if l := line(run, nd.id); l["ended"] == "" || l["status"] != mlflow.StatusFinished {
			t.Errorf("round %d: %s's end is not on the job's run: its line %v", round, nd.id, l)
		}
		if own := nodeRun(t, srv, run.Info.ExperimentID, run.Info.RunID, nd.id); own.Info.Status != mlflow.StatusFinished || own.Tags["bridge.exit_code"] != "0" {
			t.Errorf("round %d: %s's run is %s, tags %v; want FINISHED with its end", round, nd.id, own.Info.Status, own.Tags)
		}
	}
	if run.Info.Status != mlflow.StatusFinished {
		t.Errorf("round %d: the job's run is %s, want FINISHED", round, run.Info.Status)
	}
	// `bridge report` lists every node, from the job's run's lines.
	began = time.Now()
	rep := (&rjob{bridge: testbin.Bridge(t), srv: srv}).report(t, run.Info.RunID)
	if rows := rowsByNode(rep); len(rows) != n {
		t.Errorf("round %d: bridge report has %d rows, want %d", round, len(rows), n)
	}
	t.Logf("round %d: bridge report of %d nodes in %v; the job's run: %d bytes of runs/get", round, n, time.Since(began).Round(time.Millisecond), runsGetSize(t, srv.URL, run.Info.RunID))
	if faults == 0 {
		t.Errorf("round %d: no fault was applied", round)
	}
}

// (c) The artifact store refuses the job's report (500 on every PUT), and
// the log-batch that carries its fallback, the summary tag, is reset once:
// the report is on the run, in the tag, and bridge.job.report says so.
func TestEndReportFallsBackToTheTag(t *testing.T) {
	srv := mlflowtest.Shared(t)
	p := newProxy(t, srv)
	p.Schedule(
		faultproxy.Fault{Path: jobrun.ReportMarkdown, Kind: faultproxy.Status, Code: http.StatusInternalServerError},
		faultproxy.Fault{Path: "runs/log-batch", BodyContains: report.TagReportSummary, Kind: faultproxy.Reset, Times: 1},
	)
	exp := uniqueName(t)
	srv.CreateExperimentAt(t, exp, "mlflow-artifacts:/"+exp)
	j, _ := endJob(t, p, "20s")
	j.env("MLFLOW_EXPERIMENT_NAME="+exp, "BRIDGE_JOB_KEY=e2e:"+exp, "BRIDGE_NODE_ID=node-0", "BRIDGE_NODES=1")
	if code := j.run(t); code != 0 {
		t.Fatalf("bridge exited %d; stderr:\n%s", code, &j.err)
	}
	// The spool records the node's run; the report is on the job's run,
	// its parent.
	run := srv.GetRun(t, srv.GetRun(t, j.runID(t)).Tags[mlflow.TagParentRun])
	if got := run.Tags[report.TagReport]; !strings.HasPrefix(got, "tag "+report.TagReportSummary+", written by node-0 at ") {
		t.Errorf("%s = %q, want the summary tag's", report.TagReport, got)
	}
	if sum := run.Tags[report.TagReportSummary]; !strings.Contains(sum, "node-0") {
		t.Errorf("%s = %q, want the report's summary", report.TagReportSummary, sum)
	}
	if p.Count(jobrun.ReportMarkdown) < 2 || p.Hits(faultproxy.Reset) != 1 {
		t.Errorf("%d PUTs of the report, %d resets: want the PUT retried and the tag's log-batch reset once", p.Count(jobrun.ReportMarkdown), p.Hits(faultproxy.Reset))
	}
	if run.Info.Status != mlflow.StatusFinished || !endRecorded.MatchString(j.err.String()) {
		t.Errorf("run %s; stderr:\n%s\nwant FINISHED and the end recorded", run.Info.Status, &j.err)
	}
}

// (d) W&B: the request that records the end on the run (UpsertBucket with
// the exit verdict) fails once: it is sent again, and the verdict is on
// the run.
func TestEndRetriedWandb(t *testing.T) {
	wb := wandbserver.StartTest(t, wandbserver.Options{APIKey: wbKey})
	p, err := faultproxy.Start(wb.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.Schedule(faultproxy.Fault{Path: "/graphql", BodyContains: "mutation UpsertBucket", Kind: faultproxy.Status, Code: http.StatusServiceUnavailable, Times: 1})
	const wbRun = "endretry"
	wb.CreateStartedRun("", wbProject, wbRun) // the child's wandb would create it
	dir := t.TempDir()
	spool := filepath.Join(dir, "spool.jsonl")
	j := newJob(t, "", "--trackers=wandb", "--interval=300ms", "--flush-timeout=20s", "--", "sleep", "1")
	j.cmd.Env = cleanEnv("BRIDGE_SPOOL="+spool, "HOME="+dir, "WANDB_BASE_URL="+p.URL(), "WANDB_API_KEY="+wbKey,
		"WANDB_PROJECT="+wbProject, "WANDB_RUN_ID="+wbRun)
	if code := j.run(t); code != 0 {
		t.Fatalf("bridge exited %d; stderr:\n%s", code, &j.err)
	}
	run, _ := runOf(t, wb, wbRun)
	if !slices.Contains(run.Tags, "bridge-exit-0") || !strings.Contains(run.Notes, "bridge.exit_code: 0") || p.Hits(faultproxy.Status) != 1 {
		t.Errorf("run tags %v, notes %q after %d faults: want the verdict after one refused UpsertBucket", run.Tags, run.Notes, p.Hits(faultproxy.Status))
	}
	if !regexp.MustCompile(`(?m)^  wandb end +recorded on the run$`).MatchString(j.err.String()) {
		t.Errorf("the table does not say the end was recorded; stderr:\n%s", &j.err)
	}
	_, _, attempts, err := spooltest.ReadFile(spool)
	if err != nil || len(attempts) != 1 || attempts[0].End == nil || attempts[0].End.Info[pipeline.EndRecordedTag("wandb")] != wbRun {
		t.Errorf("the spool's end record does not say W&B took the end (%v): %+v", err, attempts)
	}
}
