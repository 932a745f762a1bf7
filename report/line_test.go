package report

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/forensics"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
)

// endTagsOf is what a node's bridge records at its end, as the writers
// write it: forensics' verdict and figures, the energy, the clock, the
// exit, and the figures it accumulated (a GPU node's here).
func endTagsOf(t *testing.T, reason string, code int, signal string) map[string]string {
	t.Helper()
	v := forensics.Verdict{Reason: reason, Summary: reason + ": what happened, in a sentence " + strings.Repeat("long ", 80),
		Evidence: map[string]string{"peak_usage_megabytes": "250.0"}}
	var e forensics.Evidence
	e.ExitCode = code
	e.Memory.PeakWorkingSet = summary.Figure{Value: 250, Known: true, Expected: true,
		Source: summary.SourceKernelPeak + " memory.peak at the OOM kill", SharePercent: 97.5, ShareKnown: true}
	if reason == "success" {
		e.Memory.PeakWorkingSet.Source = summary.SourceSampled
	}
	e.ThrottledShare = forensics.Reading{Value: 12.5, Known: true, Expected: true}
	tags := v.Tags(e)
	tags[summary.TagEnergyGPUs], tags[summary.TagEnergyNodeCPU] = "8623841.5", "not sampled"
	tags["bridge.memory_limit_megabytes"], tags["bridge.cpu_limit_cores"] = "256.4", "no limit"
	tags[TagEndedClock] = "tsc, synchronized (max error 16 ms)"
	if signal != "" {
		tags["bridge.exit_signal"] = signal
	}
	f := Figures{Samples: 360, CPUMeanCores: num(95.967), CPUPeakCores: num(110.97), GPUUtilizationPercent: num(97.312),
		GPUSMActiveRatio: num(0.781), NetworkMBps: num(12.345), InfinibandMBps: num(18235), GPUXidErrors: num(0), GPUECCUncorrected: num(2),
		NodeCPUEnergyJoules: num(1234568), CPULimitCores: num(112), PeakWorkingSetMB: num(240)}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	tags[TagFigures] = string(b)
	return tags
}

// A node's end line carries what the report reads of the node: its row
// from the line on a job's run is its row from its end tags on a run of
// its own (a single run), the sentence cut to whyMax.
func TestEndLineReadsAsTheTags(t *testing.T) {
	ended := t0.Add(90 * time.Second)
	for _, tc := range []struct {
		name, status, reason, signal string
		code                         int
	}{
		{"clean", "FINISHED", "success", "", 0},
		{"OOM-killed", "FAILED", forensics.ReasonCgroupOOMKill, "SIGKILL", 137},
		{"stopped", "KILLED", "killed_by_signal", "SIGTERM", 143},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tags := endTagsOf(t, tc.reason, tc.code, tc.signal)
			single := maps(tags, map[string]string{"bridge.status": tc.status, "bridge.ended": strconv.FormatInt(ended.UnixMilli(), 10), "bridge.node_id": "node-7"})
			want, err := Build(context.Background(), Run{ID: "own", Status: tc.status, Tags: single}, nil)
			if err != nil {
				t.Fatal(err)
			}
			line := EndLine(tags, Ending{Status: tc.status, Ended: ended, Attempt: 2, Run: "0123456789abcdef0123456789abcdef"})
			if len(line) > 700 {
				t.Errorf("line of %d characters, want at most 700: %s", len(line), line)
			}
			job := Run{ID: "job", Status: tc.status, Tags: map[string]string{TagJobKey: "k", tracker.StateTag("node-7", ""): line}}
			got, err := Build(context.Background(), job, nil)
			if err != nil || len(got.Nodes) != 1 || len(want.Nodes) != 1 {
				t.Fatalf("%v: rows %+v, want one as %+v", err, got.Nodes, want.Nodes)
			}
			g, w := got.Nodes[0], want.Nodes[0]
			if tc.status != "FINISHED" {
				if !strings.HasPrefix(w.Detail, g.Detail[:len(g.Detail)-3]) || len([]rune(g.Detail)) > whyMax+3 {
					t.Errorf("detail %q, want the tag's cut to %d", g.Detail, whyMax)
				}
			} else if g.Detail != "" {
				t.Errorf("a clean end's line holds a sentence: %q", g.Detail)
			}
			g.Detail, w.Detail = "", ""
			if !reflect.DeepEqual(g, w) {
				t.Errorf("from the line:\n%s\nfrom the tags:\n%s\nline: %s", jsonOf(g), jsonOf(w), line)
			}
			fields := tracker.ParseLine(line)
			if fields["attempt"] != "2" || fields["run"] != "0123456789abcdef0123456789abcdef" || fields["clock"] != tags[TagEndedClock] {
				t.Errorf("line %s: attempt, run or clock not as given", line)
			}
			t.Logf("%d characters: %s", len(line), line)
		})
	}
}

func maps(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func jsonOf(n Node) string {
	b, _ := json.MarshalIndent(n, "", " ")
	return string(b)
}

// A job's run with state lines: a row a node from its line, a task's
// line an end of the job (its failure the job's first), a line whose
// numbers are out of range refused and named, text in a line shown as
// text, and a running node's row RUNNING.
func TestJobRunOfLines(t *testing.T) {
	ms := func(d time.Duration) string { return strconv.FormatInt(t0.Add(d).UnixMilli(), 10) }
	tags := map[string]string{
		TagJobKey: "k", TagNodes: "4",
		"bridge.state.node-0":         "status=KILLED exit=143 signal=SIGTERM reason=killed_by_signal ended=" + ms(2*time.Second) + " samples=9 cpu_mean=1.5",
		"bridge.state.node-1":         "status=RUNNING attempt=0 started=" + ms(0) + " at=" + ms(0) + " run=abc",
		"bridge.state.node-2":         "status=FINISHED exit=0 reason=success ended=" + ms(time.Second) + " ws_peak_mb=1e306 gpu_util_pct=50",
		"bridge.state.node-0/task-1":  `status=FAILED exit=1 reason=exit_nonzero ended=` + ms(time.Second) + ` why="it \x1b[2Jfailed"`,
		"bridge.failed.node-0.task-1": "FAILED: exit 1",
		"bridge.failed.node-0":        "KILLED: exit 143",
	}
	rep, err := Build(context.Background(), Run{ID: "job", Status: "FAILED", Tags: tags}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]Node{}
	for _, n := range rep.Nodes {
		rows[n.Node] = n
	}
	if len(rep.Nodes) != 4 || rows["node-1"].Status != "RUNNING" || rows["node-3"].Status != StatusMissing || rows["node-0"].Samples != 9 {
		t.Errorf("rows %+v: want node-0..2 from their lines, node-1 running, node-3 missing", rep.Nodes)
	}
	if f := rep.FirstFailure; f == nil || f.Node != "node-0.task-1" || f.Detail != "it \x1b[2Jfailed" {
		t.Errorf("first failure %+v, want the task's", f)
	}
	if rows["node-0"].Consequence == "" || rows["node-2"].PeakWorkingSetMB != nil || rep.ValuesRefused != 1 ||
		!strings.Contains(strings.Join(rep.Notes, "\n"), "bridge.state.node-2 ws_peak_mb=1e+306") {
		t.Errorf("consequence %q, peak %v, refused %d, notes %q", rows["node-0"].Consequence, rows["node-2"].PeakWorkingSetMB, rep.ValuesRefused, rep.Notes)
	}
	var text strings.Builder
	if err := rep.Text(&text); err != nil || strings.Contains(text.String(), "\x1b") {
		t.Errorf("text %v:\n%s", err, text.String())
	}
	recs := Records(Run{Tags: tags})
	if len(recs) != 4 || !recs[3].Task || recs[3].Who != "node-0.task-1" || recs[1].Status != "" || recs[2].Status != "FINISHED" {
		t.Errorf("records %+v", recs)
	}
}

// A report reads the runs of the nodes that recorded no end, each once
// (its latest values, and the series it needs), at most MaxNodeRuns of
// them, naming the rest; an ended node's run is never read.
func TestBuildReadsNodeRunsBounded(t *testing.T) {
	tags := map[string]string{TagJobKey: "k"}
	for i := range 5 {
		tags[tracker.StateTag(fmt.Sprintf("node-%d", i), "")] = fmt.Sprintf("status=RUNNING attempt=0 run=run%d", i)
	}
	tags["bridge.state.node-9"] = "status=FINISHED exit=0 ended=" + strconv.FormatInt(t0.UnixMilli(), 10) + " run=run9 samples=3"
	opened := map[string]int{}
	read := Read{MaxNodeRuns: 3, NodeRun: func(_ context.Context, run string) (map[string]float64, History, error) {
		opened[run]++
		latest := map[string]float64{"system/container_memory_working_set_megabytes": 10, "system/task-1/process_count": 3}
		return latest, func(_ context.Context, key string) ([]Point, error) {
			if key != "system/container_memory_working_set_megabytes" {
				t.Errorf("read %s of %s: not a series the report uses", key, run)
			}
			return []Point{{Time: t0, Value: 10}, {Time: t0.Add(time.Second), Value: 20}}, nil
		}, nil
	}}
	rep, err := BuildRead(context.Background(), Run{ID: "job", Tags: tags}, read)
	if err != nil {
		t.Fatal(err)
	}
	if len(opened) != 3 || opened["run9"] != 0 {
		t.Errorf("runs read %v, want 3 running nodes' once each, never the ended node's", opened)
	}
	if rep.Nodes[0].PeakWorkingSetMB == nil || rep.Nodes[0].PeakWorkingSetMB.Float64() != 20 || rep.Nodes[0].Samples != 2 {
		t.Errorf("node-0 from its run: %+v", rep.Nodes[0])
	}
	if notes := strings.Join(rep.Notes, "\n"); !strings.Contains(notes, "2 nodes recorded no end and their runs were not read (a report reads at most 3 nodes' runs): node-3, node-4") {
		t.Errorf("notes %q", notes)
	}
}

// A node's own run reads as a single run of that node, and says whose
// job it is part of.
func TestNodeRunReport(t *testing.T) {
	tags := map[string]string{"bridge.node_id": "node-3", TagJob: "k", tagParentRun: "jobrun", "bridge.exit_code": "0"}
	rep, err := Build(context.Background(), Run{ID: "own", Status: "FINISHED", EndTime: t0, Tags: tags,
		Latest: map[string]float64{"system/container_memory_limit_megabytes": 100}}, nil)
	if err != nil || len(rep.Nodes) != 1 || rep.Nodes[0].Node != "node-3" || rep.Nodes[0].MemoryLimitMB == nil {
		t.Fatalf("%v: %+v", err, rep.Nodes)
	}
	if notes := strings.Join(rep.Notes, "\n"); !strings.Contains(notes, "the job's run is jobrun (bridge report jobrun)") {
		t.Errorf("notes %q", notes)
	}
}

// A figure in a line is written without an exponent, and reads back.
func TestLineNumber(t *testing.T) {
	for v, want := range map[float64]string{8623841.123: "8623841.123", 0.00001: "0.00001", 1e300: "1e+300", -2.5: "-2.5"} {
		f := metrics.FloatOf(v)
		if got := lineNumber(f); got != want {
			t.Errorf("lineNumber(%v) = %s, want %s", v, got, want)
		}
	}
}
