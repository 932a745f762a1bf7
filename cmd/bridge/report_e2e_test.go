package main

// `bridge report` on runs it cannot trust, through the real binary and a
// real MLflow server: tag values that hold terminal escapes and line
// breaks, a forged first failure, nodes the job expected that never
// recorded, a server whose paging never ends, one that never answers.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/mocks/faultproxy"
	"github.com/bridge-dev/bridge/report"
)

// reportOut runs `bridge report RUN args...` against uri and returns its
// exit status, stdout and stderr. It never waits past a minute.
func reportOut(t *testing.T, uri, run string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testbin.Bridge(t), append([]string{"report", run}, args...)...)
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI=" + uri)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("bridge report %v did not end within a minute:\n%s\n%s", args, &out, &errb)
	}
	return exitCode(t, err), out.String(), errb.String()
}

// untrustedRun creates a job's run as other code than bridge could leave
// it: four nodes expected, two recorded (node-0 failed, node-1 running),
// a first-failure tag naming a node that does not exist, and the values
// in tags.
func untrustedRun(t *testing.T, srv *mlflowtest.Server, tags map[string]string) string {
	t.Helper()
	exp := srv.CreateExperiment(t, fmt.Sprintf("bridge-e2e-%s-%d", t.Name(), time.Now().UnixNano()))
	id := srv.CreateRun(t, exp, "untrusted")
	ms := strconv.FormatInt(time.Now().UnixMilli(), 10)
	all := map[string]string{
		report.TagJobKey: "e2e:" + id, report.TagNodes: "4",
		"bridge.node.node-0.started": ms, "bridge.node.node-0.ended": ms, "bridge.node.node-0.status": "FAILED",
		"bridge.node.node-0.exit_code": "1", "bridge.node.node-0.exit_reason": "app_error",
		"bridge.failed.node-0":       "FAILED: exit 1, attempt 0",
		"bridge.node.node-1.started": ms,
		report.TagFirstFailure:       "node-9: cgroup_oom_kill at 2020-01-01T00:00:00.000Z (forged)",
	}
	for k, v := range tags {
		all[k] = v
	}
	srv.LogBatch(t, id, all, nil)
	return id
}

// Terminal escapes (a title, a screen clear, a C1 CSI, a bidi override)
// and line breaks in a node's tags are shown as text: no control byte
// reaches the terminal in the text, Markdown or JSON, and each row stays
// one line. The forged first failure is not shown as one (the tag is
// said to disagree), and the two missing nodes are listed.
func TestReportUntrustedTags(t *testing.T) {
	srv := mlflowtest.Shared(t)
	const nasty = "oom\x1b]0;pwned\x07\x1b[2J\r\n| forged | row |\u009b31m\u202eevil"
	id := untrustedRun(t, srv, map[string]string{
		"bridge.node.node-0.exit_reason":        nasty,
		"bridge.node.node-0.exit_reason_detail": nasty,
		"bridge.node.node-1.ended_clock":        nasty,
	})
	if got := srv.GetRun(t, id).Tags["bridge.node.node-0.exit_reason"]; got != nasty {
		t.Fatalf("the server keeps the tag as %q, want it as sent", got)
	}
	controls := func(name, out string) {
		t.Helper()
		for i, r := range out {
			if (r < 0x20 && r != '\n') || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e' {
				t.Errorf("%s: raw %U at byte %d:\n%s", name, r, i, out)
				return
			}
		}
	}

	code, text, stderr := reportOut(t, srv.URL, id)
	if code != 0 {
		t.Fatalf("bridge report exited %d:\n%s", code, stderr)
	}
	controls("text", text)
	lines := strings.Split(text, "\n")
	head := lines[1]
	if !strings.Contains(head, "first failure: node-0: oom\\x1b]0;pwned\\x07\\x1b[2J\\r\\n| forged | row |\\u009b31m\\u202eevil at ") ||
		!strings.Contains(head, "disagrees with the nodes: bridge.job.first_failure names node-9, and no node of the run is node-9") ||
		!strings.Contains(head, "More nodes are expected: 2 of the 4 (bridge.nodes) have recorded nothing yet: node-2, node-3") {
		t.Errorf("headline %q", head)
	}
	var rows []string
	for _, l := range lines {
		if strings.HasPrefix(l, "node-") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 4 || !strings.Contains(rows[2], "MISSING") || !strings.Contains(rows[3], "MISSING") {
		t.Errorf("want 4 rows, one line each, node-2 and node-3 MISSING:\n%s", text)
	}
	t.Logf("bridge report:\n%s", text)

	code, md, stderr := reportOut(t, srv.URL, id, "--markdown")
	if code != 0 {
		t.Fatalf("bridge report --markdown exited %d:\n%s", code, stderr)
	}
	controls("markdown", md)
	var table []string
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "| ") {
			table = append(table, l)
		}
	}
	if len(table) != 1+4 {
		t.Fatalf("Markdown table of %d lines, want the header and 4 rows:\n%s", len(table), md)
	}
	for _, l := range table[1:] {
		if n := strings.Count(l, " | "); n != strings.Count(table[0], " | ") {
			t.Errorf("row of %d cells under a header of %d: %q", n+1, strings.Count(table[0], " | ")+1, l)
		}
	}
	if !strings.Contains(md, "**First failure:** node-0: ") || !strings.Contains(md, `\| forged \| row \|`) {
		t.Errorf("Markdown:\n%s", md)
	}

	code, js, stderr := reportOut(t, srv.URL, id, "--json")
	if code != 0 {
		t.Fatalf("bridge report --json exited %d:\n%s", code, stderr)
	}
	controls("json", js)
	var rep report.Report
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, js)
	}
	if rep.FirstFailure == nil || rep.FirstFailure.Node != "node-0" || rep.FirstFailure.Reason != nasty ||
		rep.FailureTagDisagrees == "" || rep.MissingNodes != 2 || rep.ExpectedNodes != 4 || len(rep.Nodes) != 4 {
		t.Errorf("--json: the values as recorded, the forged tag disagreeing, two missing nodes:\n%s", js)
	}
}

// A server whose metrics/get-history pages never end (a new
// next_page_token on every answer): bridge report follows a bounded
// number of pages, leaves that series' figures out with a note, and
// prints the report.
func TestReportPagingBounded(t *testing.T) {
	srv := mlflowtest.Shared(t)
	id := untrustedRun(t, srv, nil)
	srv.LogBatch(t, id, nil, map[string][]float64{"system/node-1/container_memory_working_set_megabytes": {10, 30, 20}})
	p := newProxy(t, srv)
	p.Schedule(faultproxy.Fault{Path: "metrics/get-history", Kind: faultproxy.EndlessPages})
	code, out, stderr := reportOut(t, p.URL(), id)
	if code != 0 {
		t.Fatalf("bridge report exited %d:\n%s\n%s", code, out, stderr)
	}
	n := p.Count("metrics/get-history")
	if !strings.Contains(out, "note: node-1: series system/node-1/container_memory_working_set_megabytes: more points than bridge report reads") || n > 200 {
		t.Errorf("%d pages read; report:\n%s", n, out)
	}
	t.Logf("%d pages read before giving the series up", n)
}

// --timeout bounds bridge report as a whole. A server that never answers
// the series reads: the report read so far is printed (every row from the
// run's tags; the figures not read named in a note), and bridge exits 1
// naming --timeout. One that never answers runs/get: nothing to print,
// exit 1 naming --timeout.
func TestReportTimeout(t *testing.T) {
	srv := mlflowtest.Shared(t)
	id := untrustedRun(t, srv, nil)
	srv.LogBatch(t, id, nil, map[string][]float64{"system/node-1/container_memory_working_set_megabytes": {10, 30, 20}})
	p := newProxy(t, srv)
	p.Schedule(faultproxy.Fault{Path: "metrics/get-history", Kind: faultproxy.Hang})
	code, out, stderr := reportOut(t, p.URL(), id, "--timeout", "2s")
	if code != 1 || !strings.Contains(stderr, "the report above is partial: --timeout 2s passed") ||
		!strings.Contains(out, "note: the series of node-1 were not read: --timeout 2s passed") || strings.Count(out, "\nnode-") != 4 {
		t.Errorf("series never answered: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}

	p.Clear()
	p.Schedule(faultproxy.Fault{Path: "runs/get", Kind: faultproxy.Hang})
	code, out, stderr = reportOut(t, p.URL(), id, "--timeout", "2s")
	if code != 1 || out != "" || !strings.Contains(stderr, "bridge: report: --timeout 2s passed") {
		t.Errorf("runs/get never answered: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if code, _, stderr := reportOut(t, p.URL(), id, "--timeout", "0s"); code != exitUsage || !strings.Contains(stderr, "--timeout=0s") {
		t.Errorf("--timeout 0s: exit %d, %s", code, stderr)
	}
}
