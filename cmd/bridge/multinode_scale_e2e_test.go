package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
)

// scaleNodes is the size of the job TestMultinodeRestartIn300NodeJob
// restarts a node of (issue 39: at about 100 nodes of the earlier layout
// the job's run passed the 1 MiB a bridge reads of an answer, and a
// restarted node could not find it): 300, or BRIDGE_TEST_RESTART_NODES
// (bench/job_report.sh runs 1,024).
func scaleNodes(t *testing.T) int {
	v := os.Getenv("BRIDGE_TEST_RESTART_NODES")
	if v == "" {
		return 300
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 8 {
		t.Fatalf("BRIDGE_TEST_RESTART_NODES=%q: want a node count of at least 8", v)
	}
	return n
}

// TestMultinodeRestartIn300NodeJob: a job of 300 nodes whose run holds
// every node's state line and has a run a node under it (two real
// bridges, node-0 and node-7, and 298 nodes' ends written as a bridge
// writes them). Node 7, requeued (attempt 1), finds the job's run and its
// own run: its child gets the job's run, its steps continue its first
// attempt's in its own run, and its line says attempt 1. Its end is the
// last of 300 clean ones: from one read of the job's run it sets the run
// FINISHED and writes the report, which `bridge report` reads back with a
// row for each of the 300 nodes. The job's runs/get stays far under the
// 1 MiB a bridge reads.
func TestMultinodeRestartIn300NodeJob(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	id, exp := fmt.Sprint(mnJobs.Add(1)), fmt.Sprintf("restart-300-%d", mnJobs.Add(1))
	key := "slurm:e2e:" + id + ".0"
	scaleNodes := scaleNodes(t)
	env := slurmJob(id, 1000, scaleNodes, 0)
	first := []*mnNode{startMN(t, srv.URL, exp, env(0)), startMN(t, srv.URL, exp, env(7))}
	first[0].id, first[1].id = "node-0", "node-7"
	wait(t, first...)
	for _, n := range first {
		if n.code != 0 {
			t.Fatalf("%s's first attempt exited %d", n.id, n.code)
		}
	}
	expID := srv.ExperimentID(t, exp)
	job := checkJobRun(t, srv, exp, key)
	own7 := nodeRun(t, srv, expID, job, "node-7").Info.RunID
	s := steps(t, srv, own7, "system/node_memory_used_megabytes")
	firstLast := s[len(s)-1]

	// The other 298 nodes: a run each under the job's run, and each one's
	// end line on the job's run, as their bridges write them.
	seedNodes(t, srv, expID, job, key, scaleNodes)

	again := startMNIn(t, srv.URL, exp, t.TempDir(), slurmJob(id, 2000, scaleNodes, 1)(7))
	again.id = "node-7"
	wait(t, again)
	if again.code != 0 {
		t.Fatalf("node 7's second attempt exited %d", again.code)
	}
	if got, node, _ := again.seen(t); got != job || node != "-" {
		t.Errorf("the restarted node's child saw MLFLOW_RUN_ID=%s MLFLOW_SYSTEM_METRICS_NODE_ID=%s, want the job's run %s and none", got, node, job)
	}
	if r := nodeRun(t, srv, expID, job, "node-7").Info.RunID; r != own7 {
		t.Errorf("the restarted node writes to run %s, want its first attempt's %s", r, own7)
	}
	if seqs := spooledSeqs(t, filepath.Join(again.dir, "spool.jsonl")); len(seqs) == 0 || seqs[0] != firstLast+1 {
		t.Errorf("the restarted node's steps %v, want them to follow its first attempt's last, %d", seqs, firstLast)
	}
	run := srv.GetRun(t, job)
	lines := 0
	for k := range run.Tags {
		if strings.HasPrefix(k, tracker.TagStatePrefix) {
			lines++
		}
	}
	if l := line(run, "node-7"); l["attempt"] != "1" || l["status"] != mlflow.StatusFinished || lines != scaleNodes {
		t.Errorf("node 7's line %v, %d lines; want attempt 1 FINISHED, %d lines", l, lines, scaleNodes)
	}
	// The report: artifacts, or the summary tag where the server takes
	// no artifacts; never a claim left.
	if rt := run.Tags[report.TagReport]; run.Info.Status != mlflow.StatusFinished || !strings.Contains(rt, "written by node-7") || strings.HasPrefix(rt, "being written") {
		t.Errorf("after the last of %d clean nodes: %s, report %q; want FINISHED with the report written", scaleNodes, run.Info.Status, run.Tags[report.TagReport])
	}

	size := runsGetSize(t, srv.URL, job)
	if size >= 1<<20 {
		t.Errorf("the job's runs/get is %d bytes, want under 1 MiB", size)
	}
	began := time.Now()
	cmd := exec.Command(testbin.Bridge(t), "report", "--json", job)
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI=" + srv.URL)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if code := exitCode(t, cmd.Run()); code != 0 {
		t.Fatalf("bridge report exited %d: %s", code, &errb)
	}
	took := time.Since(began)
	var rep report.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("bridge report --json: %v\n%s\nits stderr: %s", err, &out, &errb)
	}
	rows := rowsByNode(&rep)
	for i := range scaleNodes {
		if r, ok := rows[fmt.Sprintf("node-%d", i)]; !ok || r.Status != mlflow.StatusFinished {
			t.Errorf("the report's row of node-%d: %+v, want FINISHED", i, r)
			break
		}
	}
	// A figure, not an assertion: bench/ measures.
	t.Logf("a %d-node job's run: runs/get %d bytes; bridge report: %d rows in %v", scaleNodes, size, len(rep.Nodes), took.Round(time.Millisecond))
}

// seedNodes writes the nodes of a job other than node-0 and node-7: a
// run each under the job's run, tagged as bridge tags it, and an end line
// each on the job's run (report.EndLine of a clean end with figures).
func seedNodes(t *testing.T, srv *mlflowtest.Server, expID, job, key string, scaleNodes int) {
	t.Helper()
	ended := time.Now()
	lines := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range scaleNodes {
		if i == 0 || i == 7 {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			node := fmt.Sprintf("node-%d", i)
			own := srv.CreateRun(t, expID, node)
			srv.LogBatch(t, own, map[string]string{mlflow.TagParentRun: job, mlflow.TagNodeID: node, mlflow.TagJob: key,
				"bridge.exit_code": "0", "bridge.status": mlflow.StatusFinished}, nil)
			srv.EndRun(t, own, mlflow.StatusFinished, ended)
			figs := `{"samples":360,"cpu_mean_cores":95.967,"cpu_peak_cores":110.97,"gpu_utilization_percentage":97.312,"gpu_sm_active_ratio":0.781,"network_megabytes_per_second":12.345}`
			l := report.EndLine(map[string]string{"bridge.exit_code": "0", "bridge.exit_reason": "success", "bridge.ended_clock": "tsc, synchronized (max error 16 ms)",
				"bridge.peak_working_set_megabytes": "412611", "bridge.memory_limit_megabytes": "1717987", "bridge.cpu_limit_cores": "112",
				"bridge.energy_gpus_joules": "8623841", "bridge.energy_node_cpu_joules": "1234568", report.TagFigures: figs},
				report.Ending{Status: mlflow.StatusFinished, Ended: ended, Attempt: 0, Run: own})
			mu.Lock()
			lines[tracker.StateTag(node, "")] = l
			mu.Unlock()
		})
	}
	wg.Wait()
	srv.LogBatch(t, job, lines, nil)
}

// runsGetSize is the size of the runs/get answer for run.
func runsGetSize(t *testing.T, uri, run string) int {
	t.Helper()
	resp, err := http.Get(uri + "/api/2.0/mlflow/runs/get?run_id=" + run)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("runs/get %s: %d %v", run, resp.StatusCode, err)
	}
	return len(b)
}

// TestMultinodeLiveLines: while a 3-node job runs (--run-tick=1s), every
// node's line on the job's run carries its figures so far and moves (at),
// each node writing its own, and the evaluators (the three nodes' leads,
// in turn) write which nodes differ now (bridge.job.differs: none here). The children end once the
// test has seen that; the job ends FINISHED.
func TestMultinodeLiveLines(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	id, exp := fmt.Sprint(mnJobs.Add(1)), fmt.Sprintf("live-%d", mnJobs.Add(1))
	env := slurmJob(id, time.Now().Unix(), 3, 0)
	shared := t.TempDir()
	child := `i=0; while [ ! -e "$SHARED/go" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done`
	nodes := startLiveNodes(t, srv.URL, exp, shared, child, "node", env)
	key := "slurm:e2e:" + id + ".0"
	var run mlflowtest.Run
	first := map[string]string{}
	waitfor.Cond(t, 3*time.Minute, "every node's line with its figures, moving, and the job's differs tag", func() bool {
		expID := srv.ExperimentID(t, exp)
		if expID == "" {
			return false // no bridge made it yet
		}
		runs := srv.SearchRuns(t, expID, fmt.Sprintf("tags.`%s` = '%s'", mlflow.TagJobKey, key), "ACTIVE_ONLY")
		if len(runs) != 1 {
			return false
		}
		run = runs[0]
		for _, n := range nodes {
			l := line(run, n.id)
			if l["status"] != "RUNNING" || l["samples"] == "" || l["at"] == "" {
				return false
			}
			if first[n.id] == "" {
				first[n.id] = l["at"]
			}
			if l["at"] == first[n.id] {
				return false
			}
		}
		return run.Tags[jobrun.TagDiffers] != ""
	})
	if d := run.Tags[jobrun.TagDiffers]; d != "none" {
		t.Errorf("%s = %q, want none: three alike nodes", jobrun.TagDiffers, d)
	}
	if err := os.WriteFile(filepath.Join(shared, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wait(t, nodes...)
	for _, n := range nodes {
		if n.code != 0 {
			t.Errorf("%s exited %d", n.id, n.code)
		}
	}
	if r := srv.GetRun(t, run.Info.RunID); r.Info.Status != mlflow.StatusFinished || line(r, "node-1")["status"] != mlflow.StatusFinished {
		t.Errorf("the job's run %s, node 1's line %v; want FINISHED", r.Info.Status, line(r, "node-1"))
	}
}

// TestMultinodeLiveEvaluationHandover: a 3-node job (--run-tick=1s: a
// "minute" of the rotation is a second) whose three nodes are the
// evaluators. Their lines carry the nodes' latest values, and the job's
// run gets the job's series (system/job_*: min, median and max of the
// values, nodes reporting) and bridge.job.evaluated. When rank 0's bridge
// and its child are SIGKILLed, the job's series go on, rank 0's minutes
// (step mod 3 == 0) evaluated by another node.
func TestMultinodeLiveEvaluationHandover(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	id, exp := fmt.Sprint(mnJobs.Add(1)), fmt.Sprintf("handover-%d", mnJobs.Add(1))
	env := slurmJob(id, time.Now().Unix(), 3, 0)
	shared := t.TempDir()
	child := `echo $$ > child.pid; i=0; while [ ! -e "$SHARED/go" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done`
	nodes := startLiveNodes(t, srv.URL, exp, shared, child, "node,netns", env)
	key := "slurm:e2e:" + id + ".0"
	var run mlflowtest.Run
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the job's run last read: tags %v, series %v", run.Tags, run.Latest)
		}
	})
	waitfor.Cond(t, 40*time.Second, "the job's series and bridge.job.evaluated on the job's run", func() bool {
		expID := srv.ExperimentID(t, exp)
		if expID == "" {
			return false
		}
		runs := srv.SearchRuns(t, expID, fmt.Sprintf("tags.`%s` = '%s'", mlflow.TagJobKey, key), "ACTIVE_ONLY")
		if len(runs) != 1 {
			return false
		}
		run = runs[0]
		for _, n := range nodes {
			if l := line(run, n.id); l["l_nrx"] == "" || l["l_ntx"] == "" {
				return false // its latest network rates
			}
		}
		return run.Tags[jobrun.TagEvaluated] != "" && run.Latest[jobrun.KeyReporting].Value == 3 &&
			run.Latest["system/job_network_receive_megabytes_per_second_median"].Key != ""
	})
	job := run.Info.RunID
	for _, suffix := range []string{"_min", "_median", "_max"} {
		if _, ok := run.Latest["system/job_network_transmit_megabytes_per_second"+suffix]; !ok {
			t.Errorf("no series system/job_network_transmit_megabytes_per_second%s on the job's run", suffix)
		}
	}

	pid, err := os.ReadFile(filepath.Join(nodes[0].dir, "child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if p, err := strconv.Atoi(strings.TrimSpace(string(pid))); err == nil {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	_ = nodes[0].cmd.Wait()                 // once the child, which holds its stderr, is gone too
	killed := time.Now().UnixMilli() / 1000 // the minute (a second here) rank 0 died in
	var adopted int64
	var steps []int64
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rank 0 killed in minute %d; the minutes evaluated: %v", killed, steps)
		}
	})
	waitfor.Cond(t, 2*time.Minute, "rank 0's minutes evaluated by another node after it was killed", func() bool {
		steps = steps[:0]
		for _, p := range srv.History(t, job, jobrun.KeyReporting) {
			steps = append(steps, p.Step)
		}
		for _, p := range srv.History(t, job, jobrun.KeyReporting) {
			if p.Step%3 == 0 && p.Step > killed+3 {
				adopted = p.Step
				return true
			}
		}
		return false
	})
	e, by, _ := strings.Cut(srv.GetRun(t, job).Tags[jobrun.TagEvaluated], " by=")
	if m, err := strconv.ParseInt(e, 10, 64); err != nil || m < adopted || by == "node-0" {
		t.Errorf("%s = %q after rank 0 died (minute %d evaluated by another), want a later minute by node-1 or node-2", jobrun.TagEvaluated, e+" by="+by, adopted)
	}
	if err := os.WriteFile(filepath.Join(shared, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wait(t, nodes[1:]...)
	for _, n := range nodes[1:] {
		if n.code != 0 {
			t.Errorf("%s exited %d", n.id, n.code)
		}
	}
}

// startLiveNodes starts a 3-node job's bridges (env(i): node i's launcher
// variables) with a short interval and a 1 s run tick, each child running
// child with SHARED=shared, the scopes given (BRIDGE_SCOPES); each is
// killed at cleanup, its stderr logged when the test failed.
func startLiveNodes(t *testing.T, uri, exp, shared, child, scopes string, env func(int) []string) []*mnNode {
	t.Helper()
	var nodes []*mnNode
	for i := range 3 {
		n := &mnNode{id: fmt.Sprintf("node-%d", i), dir: t.TempDir()}
		n.cmd = exec.Command(testbin.Bridge(t), "--interval", "250ms", "--run-tick", "1s", "--start-timeout", "3m", "--flush-timeout", "1m",
			"--", "/bin/sh", "-c", child)
		n.cmd.Dir = n.dir
		n.cmd.Env = cleanEnv(append([]string{"MLFLOW_TRACKING_URI=" + uri, "MLFLOW_EXPERIMENT_NAME=" + exp, "TMPDIR=" + n.dir,
			"BRIDGE_SCOPES=" + scopes, "SHARED=" + shared}, env(i)...)...)
		n.cmd.Stderr = &n.stderr
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = n.cmd.Process.Kill()
			if t.Failed() {
				t.Logf("%s: bridge's stderr:\n%s", n.id, n.stderr.String())
			}
		})
		nodes = append(nodes, n)
	}
	return nodes
}
