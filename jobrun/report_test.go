package jobrun

// The job's first failure and report on its run, against a real MLflow
// server: the tag's rule (the earliest failure, never replaced by a later
// one) and the report's two places (artifacts through the server's proxy,
// else a tag), rewritten as later nodes end.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
)

// endAs records a node's end at a given time with forensics' tags.
func endAs(t *testing.T, n *node, at time.Time, code int, status, reason, signal string) {
	t.Helper()
	tags := map[string]string{"bridge.exit_code": fmt.Sprint(code), "bridge.exit_reason": reason,
		"bridge.exit_reason_detail": reason + " on " + n.id}
	if signal != "" {
		tags["bridge.exit_signal"] = signal
	}
	end := tracker.EndInfo{ExitCode: code, Time: at, Status: status, Tags: tags}
	if err := n.sink.Finish(context.Background(), end); err != nil {
		t.Fatalf("%s: Finish: %v", n.id, err)
	}
}

func TestJobReportOnTheRun(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	t0 := time.Now().Truncate(time.Millisecond)
	t.Run("artifacts rewritten as nodes end", func(t *testing.T) {
		exp, key := unique(t), "report:"+unique(t)
		srv.CreateExperimentAt(t, exp, "mlflow-artifacts:/"+exp)
		nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 3, nil)
		startTogether(t, nodes)
		win := oneRun(t, srv, exp, key, nodes)

		endAs(t, nodes[1], t0, 137, mlflow.StatusFailed, "cgroup_oom_kill", "SIGKILL")
		first := readReport(t, srv, win)
		if first.Status != mlflow.StatusFailed || first.FirstFailure == nil || first.FirstFailure.Node != "node-1" {
			t.Fatalf("report after the OOM kill: %s", first.JSON())
		}
		r := srv.GetRun(t, win)
		if !strings.HasPrefix(r.Tags[report.TagFirstFailure], "node-1: cgroup_oom_kill at ") || !strings.Contains(r.Tags[report.TagReport], "artifacts bridge-report.md") {
			t.Errorf("tags %s=%q %s=%q", report.TagFirstFailure, r.Tags[report.TagFirstFailure], report.TagReport, r.Tags[report.TagReport])
		}
		// The launcher stops the others.
		endAs(t, nodes[0], t0.Add(800*time.Millisecond), 143, mlflow.StatusKilled, "killed_by_signal", "SIGTERM")
		endAs(t, nodes[2], t0.Add(900*time.Millisecond), 143, mlflow.StatusKilled, "killed_by_signal", "SIGTERM")
		last := readReport(t, srv, win)
		for _, n := range last.Nodes {
			want := map[string]string{"node-0": mlflow.StatusKilled, "node-1": mlflow.StatusFailed, "node-2": mlflow.StatusKilled}[n.Node]
			if n.Status != want || (n.Node != "node-1") != (n.Consequence != "") {
				t.Errorf("rewritten report: %s %s (%q), want %s, a consequence but for node-1", n.Node, n.Status, n.Consequence, want)
			}
		}
		if md, ok := srv.Artifact(t, win, ReportMarkdown); !ok || !strings.Contains(string(md), "| node-2 | KILLED |") {
			t.Errorf("bridge-report.md:\n%s", md)
		}
		if r := srv.GetRun(t, win); !strings.HasPrefix(r.Tags[report.TagFirstFailure], "node-1: ") || r.Tags[report.TagReportSummary] != "" {
			t.Errorf("after the others ended: tags %v", r.Tags)
		}
	})
	t.Run("the earliest failure and never a later one", func(t *testing.T) {
		exp, key := unique(t), "first:"+unique(t)
		nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 3, nil)
		startTogether(t, nodes)
		win := oneRun(t, srv, exp, key, nodes)
		tag := func() string { return srv.GetRun(t, win).Tags[report.TagFirstFailure] }
		endAs(t, nodes[0], t0, 1, mlflow.StatusFailed, "app_error", "")
		if !strings.HasPrefix(tag(), "node-0: app_error") {
			t.Fatalf("after node-0 failed: %q", tag())
		}
		// Node 2 failed earlier, by its clock, but its record lands later.
		endAs(t, nodes[2], t0.Add(-2*time.Second), 1, mlflow.StatusFailed, "app_error", "")
		if !strings.HasPrefix(tag(), "node-2: app_error") {
			t.Errorf("an earlier failure learned later: %q, want node-2", tag())
		}
		endAs(t, nodes[1], t0.Add(time.Second), 134, mlflow.StatusFailed, "killed_by_signal", "SIGABRT")
		if !strings.HasPrefix(tag(), "node-2: ") {
			t.Errorf("a later failure took the place: %q", tag())
		}
		// This server's runs keep artifacts where only the client writes:
		// the summary is a tag, a line a node.
		r := srv.GetRun(t, win)
		sum := r.Tags[report.TagReportSummary]
		if !strings.Contains(r.Tags[report.TagReport], "tag "+report.TagReportSummary) || strings.Count(sum, "\nnode-") != 3 ||
			!strings.Contains(sum, "first failure: node-2: app_error") {
			t.Errorf("report tags: %s=%q\n%s", report.TagReport, r.Tags[report.TagReport], sum)
		}
		if _, ok := srv.Artifact(t, win, ReportMarkdown); ok {
			t.Errorf("%s uploaded where the server cannot serve it", ReportMarkdown)
		}
	})
	t.Run("a forged first failure does not stay", func(t *testing.T) {
		exp, key := unique(t), "forged:"+unique(t)
		nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, nil)
		startTogether(t, nodes)
		win := oneRun(t, srv, exp, key, nodes)
		// Earlier than any failure, naming a node the job does not have.
		srv.LogBatch(t, win, map[string]string{report.TagFirstFailure: "node-9: cgroup_oom_kill at 2020-01-01T00:00:00.000Z (forged)"}, nil)
		endAs(t, nodes[1], t0, 1, mlflow.StatusFailed, "app_error", "")
		r := srv.GetRun(t, win)
		if ff := r.Tags[report.TagFirstFailure]; !strings.HasPrefix(ff, "node-1: app_error at ") {
			t.Errorf("%s=%q, want node-1's failure in place of the forged one", report.TagFirstFailure, ff)
		}
		if sum := r.Tags[report.TagReportSummary]; !strings.Contains(sum, "first failure: node-1: app_error") || strings.Contains(sum, "disagrees") {
			t.Errorf("summary:\n%s", sum)
		}
	})
	t.Run("the summary cut at a line", func(t *testing.T) {
		exp, key := unique(t), "cut:"+unique(t)
		nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, nil)
		startTogether(t, nodes)
		win := oneRun(t, srv, exp, key, nodes)
		// 300 more nodes of the job ended cleanly: their lines do not fit
		// in the tag.
		tags := map[string]string{}
		for i := 2; i < 302; i++ {
			tags[tracker.StateTag(fmt.Sprintf("node-%d", i), "")] = report.EndLine(map[string]string{"bridge.exit_code": "0"},
				report.Ending{Status: mlflow.StatusFinished, Ended: t0, Attempt: 0})
		}
		srv.LogBatch(t, win, tags, nil)
		endAs(t, nodes[1], t0, 1, mlflow.StatusFailed, "app_error", "")
		sum := srv.GetRun(t, win).Tags[report.TagReportSummary]
		rep, err := Report(context.Background(), store(t, srv.URL), win)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(sum, "\n"), "\n")
		var left int
		_, err = fmt.Sscanf(lines[len(lines)-1], "... %d more lines (bridge report "+win+" shows them all)", &left)
		if n := utf8.RuneCountInString(sum); n > report.SummaryMax || err != nil || left < 100 || len(lines)-2+left != len(rep.Nodes) {
			t.Fatalf("summary of %d characters, %d lines, last %q (%v)", n, len(lines), lines[len(lines)-1], err)
		}
		for _, l := range lines[1 : len(lines)-1] {
			if !strings.HasPrefix(l, "node-") || !strings.Contains(l, ": status ") || !strings.Contains(l, "; ended (UTC) ") {
				t.Errorf("a line cut: %q", l)
			}
		}
	})
	t.Run("bridge report while the job runs", func(t *testing.T) {
		exp, key := unique(t), "live:"+unique(t)
		nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, nil)
		startTogether(t, nodes)
		win := oneRun(t, srv, exp, key, nodes)
		for i, n := range nodes {
			if _, err := n.sink.Send(context.Background(), systemSamples(4+i, t0)); err != nil {
				t.Fatal(err)
			}
		}
		rep, err := Report(context.Background(), store(t, srv.URL), win)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Status != mlflow.StatusRunning || len(rep.Nodes) != 2 || rep.FirstFailure != nil {
			t.Fatalf("report %s", rep.JSON())
		}
		for i, n := range rep.Nodes {
			// systemSamples' working set is i in sample i.
			if n.Status != mlflow.StatusRunning || n.Samples != 4+i || n.PeakWorkingSetMB == nil || n.PeakWorkingSetMB.Float64() != float64(3+i) {
				t.Errorf("%s: %s", n.Node, mustJSON(n))
			}
		}
	})
}

// readReport reads the run's bridge-report.json artifact; a run without
// one fails the test.
func readReport(t *testing.T, srv *mlflowtest.Server, run string) *report.Report {
	t.Helper()
	b, ok := srv.Artifact(t, run, ReportJSON)
	if !ok {
		t.Fatalf("run %s has no %s; tags %v", run, ReportJSON, srv.GetRun(t, run).Tags)
	}
	var rep report.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%s: %v\n%s", ReportJSON, err, b)
	}
	return &rep
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// `bridge report` with an id that is no run id (a path, a query) stops
// before it reaches a URL, and says which argument was wrong.
func TestReportRefusesBadRunID(t *testing.T) {
	var requests atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		io.WriteString(w, "{}")
	}))
	t.Cleanup(ts.Close)
	o := store(t, ts.URL)
	for _, id := range []string{"", "../runs/x", "a?b=c", "a b"} {
		_, err := Report(context.Background(), o, id)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("run id %q", id)) || !strings.Contains(err.Error(), "is not a valid id") {
			t.Errorf("Report(%q): %v", id, err)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests sent for invalid run ids", n)
	}
}
