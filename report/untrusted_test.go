package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// A first-failure tag that does not agree with the nodes' records (a
// node that does not exist, one that recorded no failure, no failure at
// all) is not shown as the first failure; the report says it disagrees.
func TestFirstFailureTagMustAgree(t *testing.T) {
	ends := []nodeEndSpec{oom("node-1", 10*time.Second), term("node-0", 11*time.Second), {"node-2", "FINISHED", "success", "", 0, time.Minute}}
	cases := []struct {
		name, tag  string
		want       string // the first failure's node
		disagrees  string // in FailureTagDisagrees; "" when it agrees
		recordedOK bool   // RecordedFailureOf is not nil
	}{
		{"a node that does not exist", "node-9: app_error at 2026-12-06T17:00:00.000Z (forged)", "node-1", "no node of the run is node-9", false},
		{"a node that recorded no failure", "node-2: app_error at 2026-12-06T17:00:00.000Z (forged)", "node-1", "node-2, which recorded no failure (its status is FINISHED)", false},
		{"not a failure tag", "\x1b]0;pwned\x07", "node-1", "is not a failure as bridge records it", false},
		{"the records' own failure", "node-1: cgroup_oom_kill at 2026-12-06T18:00:10.000Z (cgroup_oom_kill detail)", "node-1", "", true},
		{"an earlier failure of a failed node", "node-0: app_error at 2026-12-06T18:00:01.000Z (exit 1)", "node-0", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tags := jobTags(ends...)
			tags[TagFirstFailure] = tc.tag
			run := Run{ID: "r", Status: "FAILED", Tags: tags}
			rep, err := Build(context.Background(), run, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.FirstFailure == nil || rep.FirstFailure.Node != tc.want {
				t.Fatalf("first failure %+v, want %s", rep.FirstFailure, tc.want)
			}
			if (tc.disagrees == "") != (rep.FailureTagDisagrees == "") || !strings.Contains(rep.FailureTagDisagrees, tc.disagrees) {
				t.Errorf("disagreement %q, want %q", rep.FailureTagDisagrees, tc.disagrees)
			}
			if got := RecordedFailureOf(run) != nil; got != tc.recordedOK {
				t.Errorf("RecordedFailureOf: %v, want %v", got, tc.recordedOK)
			}
			var text bytes.Buffer
			if err := rep.Text(&text); err != nil {
				t.Fatal(err)
			}
			head := strings.SplitN(text.String(), "\n", 3)[1]
			if !strings.Contains(head, "first failure: "+tc.want+": ") || (tc.disagrees != "") != strings.Contains(head, "disagrees with the nodes") {
				t.Errorf("headline %q", head)
			}
		})
	}
	// No failure recorded at all: the forged tag is no failure either.
	tags := jobTags(nodeEndSpec{"node-0", "FINISHED", "success", "", 0, time.Minute})
	tags[TagFirstFailure] = "node-7: app_error at 2026-12-06T17:00:00.000Z (forged)"
	rep, _ := Build(context.Background(), Run{Status: "FINISHED", Tags: tags}, nil)
	if rep.FirstFailure != nil || !strings.Contains(rep.headline(), "no node failed. The run's first failure tag disagrees") {
		t.Errorf("first failure %+v, headline %q", rep.FirstFailure, rep.headline())
	}
}

// A row that failed with no end time (a node's end tag lost, a run ended
// with no end time) is never under "no node failed".
func TestHeadlineNeverNoFailureAboveAFailedRow(t *testing.T) {
	tags := jobTags(nodeEndSpec{"node-0", "FINISHED", "success", "", 0, time.Minute}, oom("node-1", time.Second))
	delete(tags, "bridge.node.node-1.ended")
	single := map[string]string{"bridge.hostname": "box", "bridge.exit_code": "1"}
	for _, run := range []Run{{Status: "FAILED", Tags: tags}, {Status: "FAILED", Tags: single}} {
		rep, err := Build(context.Background(), run, nil)
		if err != nil {
			t.Fatal(err)
		}
		var failedRow bool
		for _, n := range rep.Nodes {
			failedRow = failedRow || n.Status == "FAILED"
		}
		h := rep.headline()
		if !failedRow || strings.Contains(h, "no node failed") || !strings.Contains(h, "first failure not known: ") {
			t.Errorf("rows %s\nheadline %q", mustJSON(rep.Nodes), h)
		}
	}
}

// bridge.nodes=4 and two nodes recorded: the other two are rows, named by
// index, MISSING; nodes named otherwise (host names) are counted; a count
// far past the nodes recorded costs one line.
func TestMissingNodes(t *testing.T) {
	cases := []struct {
		name     string
		nodes    []string
		count    string
		missing  int
		rows     []string // the MISSING rows
		headline string
	}{
		{"named by index", []string{"node-0", "node-3"}, "4", 2, []string{"node-1", "node-2"}, "More nodes are expected: 2 of the 4 (bridge.nodes) have recorded nothing yet: node-1, node-2."},
		{"host names", []string{"gpu-a", "gpu-b"}, "4", 2, nil, "More nodes are expected: 2 of the 4 (bridge.nodes) have recorded nothing yet."},
		{"a count far past", []string{"node-0", "node-1"}, "1000000000", 999999998, nil, "999999998 of the 1000000000 (bridge.nodes)"},
		{"every node recorded", []string{"node-0", "node-1"}, "2", 0, nil, ""},
		{"no count", []string{"node-0"}, "", 0, nil, ""},
		{"a count that is no number", []string{"node-0"}, "four", 0, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ends []nodeEndSpec
			for _, id := range tc.nodes {
				ends = append(ends, nodeEndSpec{id, "FINISHED", "success", "", 0, time.Second})
			}
			tags := jobTags(ends...)
			if tc.count != "" {
				tags[TagNodes] = tc.count
			}
			rep, err := Build(context.Background(), Run{Status: "RUNNING", Tags: tags}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var rows []string
			for _, n := range rep.Nodes {
				if n.Status == StatusMissing {
					rows = append(rows, n.Node)
				}
			}
			if rep.MissingNodes != tc.missing || fmt.Sprint(rows) != fmt.Sprint(tc.rows) || len(rep.Nodes) != len(tc.nodes)+len(tc.rows) {
				t.Errorf("missing %d, rows %v (of %d), want %d, %v", rep.MissingNodes, rows, len(rep.Nodes), tc.missing, tc.rows)
			}
			if h := rep.headline(); !strings.Contains(h, tc.headline) || (tc.headline == "") == strings.Contains(h, "recorded nothing") {
				t.Errorf("headline %q, want %q", h, tc.headline)
			}
			if rep.FirstFailure != nil {
				t.Errorf("a missing node taken as a failure: %+v", rep.FirstFailure)
			}
		})
	}
	// A run that is no job's ignores the count.
	rep, _ := Build(context.Background(), Run{Status: "RUNNING", Tags: map[string]string{"bridge.hostname": "box", TagNodes: "4"}}, nil)
	if rep.MissingNodes != 0 || len(rep.Nodes) != 1 {
		t.Errorf("a single run: %s", rep.JSON())
	}
}

// Over SummaryMax the summary keeps whole lines and says how many it left
// out, in characters (a node id of 3-byte runes counts once a rune).
func TestSummaryCutAtALine(t *testing.T) {
	var ends []nodeEndSpec
	for i := range 400 {
		ends = append(ends, nodeEndSpec{fmt.Sprintf("節点-%03d", i), "FINISHED", "success", "", 0, time.Second})
	}
	rep, _ := Build(context.Background(), Run{ID: "abc", Status: "FINISHED", Tags: jobTags(ends...)}, nil)
	full := within(strings.Split(strings.TrimSuffix(rep.Summary(), "\n"), "\n"), 1<<30, "abc")
	all := strings.Split(strings.TrimSuffix(full, "\n"), "\n")
	sum := rep.Summary()
	if n := utf8.RuneCountInString(sum); n > SummaryMax || n < SummaryMax-200 {
		t.Fatalf("summary of %d characters, want at most %d and near it", n, SummaryMax)
	}
	lines := strings.Split(strings.TrimSuffix(sum, "\n"), "\n")
	last := lines[len(lines)-1]
	kept := lines[:len(lines)-1]
	var left int
	if _, err := fmt.Sscanf(last, "... %d more lines (bridge report abc shows them all)", &left); err != nil {
		t.Fatalf("last line %q: %v", last, err)
	}
	if left != 401-len(kept) || left < 100 {
		t.Errorf("%d lines kept, %d said left of %d", len(kept), left, 401)
	}
	for i, l := range kept {
		if l != all[i] {
			t.Fatalf("line %d cut: %q, want %q", i, l, all[i])
		}
	}
	// Under the limit nothing is said.
	small, _ := Build(context.Background(), Run{ID: "abc", Tags: jobTags(ends[:3]...)}, nil)
	if strings.Contains(small.Summary(), "more lines") || strings.Count(small.Summary(), "\n") != 4 {
		t.Errorf("summary of 3 nodes:\n%s", small.Summary())
	}
	// A headline longer than the limit alone is cut, and the rest counted.
	if got := within([]string{strings.Repeat("x", 9000), "node-0: a"}, SummaryMax, "abc"); utf8.RuneCountInString(got) > SummaryMax ||
		!strings.HasSuffix(got, "...\n... 1 more lines (bridge report abc shows them all)\n") {
		t.Errorf("a long headline: %d characters, ending %q", utf8.RuneCountInString(got), got[len(got)-80:])
	}
}

// Tag values with terminal escapes, line breaks, bidi overrides and pipes
// render as text: no control byte in the text, one line a row in the text,
// the Markdown table and the summary.
func TestUntrustedTagsRenderAsText(t *testing.T) {
	nasty := "x\x1b]0;pwned\x07\x1b[2J\r\nforged row | a | b\u202edcba\u009b31m"
	tags := jobTags(oom("node-1", time.Second), term("node-0", 2*time.Second))
	tags["bridge.node.node-1.exit_reason"] = nasty
	tags["bridge.node.node-1.exit_reason_detail"] = nasty
	tags["bridge.node.node-0.ended_clock"] = nasty
	tags["bridge.node.evil\x1b[31m\u202e.started"] = "1"
	tags[TagFirstFailure] = "node-5: " + nasty
	rep, _ := Build(context.Background(), Run{ID: "r", Status: "FAILED\x1b[2J", Tags: tags}, nil)
	var text, md bytes.Buffer
	if err := rep.Text(&text); err != nil {
		t.Fatal(err)
	}
	if err := rep.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"text": text.String(), "markdown": md.String(), "summary": rep.Summary()} {
		for i, r := range out {
			if (r < 0x20 && r != '\n') || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e' {
				t.Errorf("%s: %U at byte %d:\n%s", name, r, i, out)
				break
			}
		}
		shown := `\x1b]0;pwned\x07`
		if name == "markdown" {
			shown = `\\x1b]0;pwned\\x07` // the backslash escaped: it renders as the text's
		}
		if !strings.Contains(out, shown) {
			t.Errorf("%s does not show the escape as text:\n%s", name, out)
		}
	}
	// One line a row: the header and three rows, whatever the values.
	rows := 0
	for _, l := range strings.Split(text.String(), "\n") {
		if strings.HasPrefix(l, "node-") || strings.HasPrefix(l, "evil") {
			rows++
		}
	}
	if rows != 3 {
		t.Errorf("%d text rows, want 3:\n%s", rows, &text)
	}
	var mdRows []string
	for _, l := range strings.Split(md.String(), "\n") {
		if strings.HasPrefix(l, "| ") {
			mdRows = append(mdRows, l)
		}
	}
	cols := strings.Count(mdRows[0], " | ")
	for _, l := range mdRows[1:] {
		if n := strings.Count(l, " | "); n != cols {
			t.Errorf("Markdown row with %d cells, want %d: %q", n+1, cols+1, l)
		}
	}
	if len(mdRows) != 1+3 {
		t.Errorf("%d Markdown table lines, want the header and 3 rows:\n%s", len(mdRows), &md)
	}
	if n := strings.Count(rep.Summary(), "\n"); n != 4 {
		t.Errorf("summary of %d lines, want 4:\n%s", n, rep.Summary())
	}
}

// When ctx ends while series are read, Build returns every row with the
// figures read so far, notes the nodes not read and why, and an error
// that wraps ctx's.
func TestBuildStopsWhenContextEnds(t *testing.T) {
	tags := jobTags(nodeEndSpec{id: "node-0"}, nodeEndSpec{id: "node-1"}, nodeEndSpec{id: "node-2"})
	latest := map[string]float64{}
	for _, n := range []string{"node-0", "node-1", "node-2"} {
		latest["system/"+n+"/container_memory_working_set_megabytes"] = 5
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	why := errors.New("bridge report's --timeout 1s passed")
	reads := 0
	history := func(ctx context.Context, key string) ([]Point, error) {
		reads++
		if strings.HasPrefix(key, "system/node-1/") {
			cancel(why) // the deadline passes during this read
			return nil, ctx.Err()
		}
		return []Point{{Time: t0, Value: 4}, {Time: t0.Add(time.Second), Value: 6}}, nil
	}
	rep, err := Build(ctx, Run{ID: "r", Status: "RUNNING", Tags: tags, Latest: latest}, history)
	if !errors.Is(err, context.Canceled) || rep == nil {
		t.Fatalf("Build: %v, report %v; want the report so far and ctx's error", err, rep)
	}
	if len(rep.Nodes) != 3 || rep.Nodes[0].PeakWorkingSetMB == nil || rep.Nodes[1].PeakWorkingSetMB != nil || rep.Nodes[2].PeakWorkingSetMB != nil || reads != 2 {
		t.Errorf("%d reads, rows %s", reads, mustJSON(rep.Nodes))
	}
	if len(rep.Notes) != 1 || rep.Notes[0] != "the series of node-1, node-2 were not read: "+why.Error() {
		t.Errorf("notes %q", rep.Notes)
	}
}

// A job still running says how many of its nodes run, and that more are
// expected where the count says so, not only "no node failed".
func TestRunningJobSaysMoreNodesExpected(t *testing.T) {
	tags := map[string]string{TagJobKey: "k", TagNodes: "3",
		"bridge.node.node-0.started": "1000", "bridge.node.node-1.started": "1000"}
	rep, err := Build(context.Background(), Run{Status: "RUNNING", Tags: tags}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "Status RUNNING; no node failed. 2 nodes still running. More nodes are expected: 1 of the 3 (bridge.nodes) has recorded nothing yet: node-2."
	if h := rep.headline(); h != want {
		t.Errorf("headline %q\nwant     %q", h, want)
	}
}
