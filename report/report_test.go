package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	ibmetrics "github.com/bridge-dev/bridge/metrics/infiniband"
	"github.com/bridge-dev/bridge/summary"
)

var t0 = time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC)

// jobTags are the tags a job's nodes record at their end: who ended how,
// when (ms after t0).
func jobTags(ends ...nodeEndSpec) map[string]string {
	tags := map[string]string{TagJobKey: "slurm:c:1.0"}
	for _, e := range ends {
		s := "bridge.node." + e.id + "."
		tags[s+"started"] = strconv.FormatInt(t0.UnixMilli(), 10)
		// A start tag of its own ending as a node's does: not a node.
		tags[s+"gpu.status"] = "off: no NVIDIA driver"
		if e.status == "" {
			continue
		}
		tags[s+"status"] = e.status
		tags[s+"exit_code"] = strconv.Itoa(e.code)
		tags[s+"exit_reason"] = e.reason
		tags[s+"exit_reason_detail"] = e.reason + " detail"
		tags[s+"ended"] = strconv.FormatInt(t0.Add(e.after).UnixMilli(), 10)
		if e.signal != "" {
			tags[s+"exit_signal"] = e.signal
		}
	}
	return tags
}

type nodeEndSpec struct {
	id, status, reason, signal string
	code                       int
	after                      time.Duration
}

func oom(id string, after time.Duration) nodeEndSpec {
	return nodeEndSpec{id, "FAILED", "cgroup_oom_kill", "SIGKILL", 137, after}
}

func term(id string, after time.Duration) nodeEndSpec {
	return nodeEndSpec{id, "KILLED", "killed_by_signal", "SIGTERM", 143, after}
}

func TestFirstFailure(t *testing.T) {
	cases := []struct {
		name  string
		ends  []nodeEndSpec
		want  string // node, "" for none
		conse map[string]bool
	}{
		{"none failed", []nodeEndSpec{{"node-0", "FINISHED", "success", "", 0, time.Second}, {id: "node-1"}}, "", nil},
		{"the earliest failure", []nodeEndSpec{{"node-0", "FAILED", "app_error", "", 1, 3 * time.Second}, oom("node-1", 2*time.Second)}, "node-1", nil},
		{"OOM then the launcher's SIGTERMs", []nodeEndSpec{oom("node-1", 10*time.Second), term("node-0", 11*time.Second), term("node-2", 12*time.Second)},
			"node-1", map[string]bool{"node-0": true, "node-2": true}},
		// The clocks are NTP-close: a stop a skewed clock puts 300 ms
		// before the failure is still its consequence.
		{"a stop just before, by another clock", []nodeEndSpec{oom("node-1", 10*time.Second), term("node-0", 9700*time.Millisecond)},
			"node-1", map[string]bool{"node-0": true}},
		{"a stop well before is the first", []nodeEndSpec{oom("node-1", 10*time.Second), term("node-0", 5*time.Second)}, "node-0", nil},
		{"every node stopped from outside", []nodeEndSpec{term("node-0", 2*time.Second), term("node-1", 1*time.Second)}, "node-1",
			map[string]bool{"node-0": true}},
		{"a stop long after is no consequence", []nodeEndSpec{oom("node-1", 0), term("node-0", ConsequenceWindow+time.Minute)}, "node-1", nil},
		{"a later failure is no consequence", []nodeEndSpec{oom("node-1", 0), {"node-0", "FAILED", "app_error", "", 1, time.Second}}, "node-1", nil},
		{"a tie goes to the smaller id", []nodeEndSpec{{"node-1", "FAILED", "app_error", "", 1, time.Second}, {"node-0", "FAILED", "app_error", "", 2, time.Second}}, "node-0", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := Run{ID: "r", Status: "FAILED", Tags: jobTags(tc.ends...)}
			f := FirstFailureOf(run)
			if tc.want == "" {
				if f != nil {
					t.Fatalf("first failure %+v, want none", f)
				}
				return
			}
			if f == nil || f.Node != tc.want {
				t.Fatalf("first failure %+v, want %s", f, tc.want)
			}
			rep, err := Build(context.Background(), run, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range rep.Nodes {
				if got := n.Consequence != ""; got != tc.conse[n.Node] {
					t.Errorf("%s: consequence %q, want %v", n.Node, n.Consequence, tc.conse[n.Node])
				}
			}
		})
	}
}

func TestFailureTag(t *testing.T) {
	f := FirstFailureOf(Run{Tags: jobTags(oom("gpu box.1", 1500*time.Millisecond))})
	want := "gpu box.1: cgroup_oom_kill at 2026-12-06T18:00:01.500Z (cgroup_oom_kill detail)"
	if f == nil || f.Tag() != want {
		t.Fatalf("tag %q, want %q", f.Tag(), want)
	}
	back, ok := parseFailureTag(f.Tag())
	if !ok || !back.at.Equal(t0.Add(1500*time.Millisecond)) {
		t.Errorf("parseFailureTag = %+v, %v", back, ok)
	}
	for _, bad := range []string{"", "node-1", "node-1: oom at yesterday (x)"} {
		if _, ok := parseFailureTag(bad); ok {
			t.Errorf("parseFailureTag(%q) ok", bad)
		}
	}
}

// The OOM-killed node's peak is the kernel's high-water mark, from its
// tag or, where the node recorded none, from the forensics evidence.
func TestPeakOfAnOOMKilledNodeIsTheKernels(t *testing.T) {
	tags := jobTags(oom("node-1", time.Second), term("node-0", 2*time.Second))
	tags["bridge.node.node-1.peak_working_set_megabytes"] = "95.3"
	tags["bridge.node.node-1.memory_limit_megabytes"] = "209.7"
	tags["bridge.node.node-1.exit_evidence"] = "oom_kill=0 -> 1; peak_usage_megabytes=209.7; rule=x"
	tags["bridge.node.node-0.peak_working_set_megabytes"] = "40"
	tags["bridge.node.node-0.exit_evidence"] = "peak_usage_megabytes=120"
	rep, err := Build(context.Background(), Run{Status: "FAILED", Tags: tags}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Node{}
	for _, n := range rep.Nodes {
		got[n.Node] = n
	}
	if n := got["node-1"]; n.PeakWorkingSetMB == nil || n.PeakWorkingSetMB.Float64() != 209.7 || n.PeakWorkingSetSource != sourceKernel {
		t.Errorf("OOM node's peak %v (%s), want the kernel's 209.7", deref(n.PeakWorkingSetMB), n.PeakWorkingSetSource)
	}
	if n := got["node-0"]; n.PeakWorkingSetMB == nil || n.PeakWorkingSetMB.Float64() != 40 || n.PeakWorkingSetSource != "sampled" {
		t.Errorf("stopped node's peak %v (%s), want its sampled 40", deref(n.PeakWorkingSetMB), n.PeakWorkingSetSource)
	}
	// A node whose tags already name the kernel's peak keeps it.
	tags["bridge.node.node-1.peak_working_set_megabytes"] = "209.5"
	tags["bridge.node.node-1.peak_working_set_source"] = "kernel high-water mark memory.max_usage_in_bytes at the OOM kill"
	rep, _ = Build(context.Background(), Run{Status: "FAILED", Tags: tags}, nil)
	for _, n := range rep.Nodes {
		if n.Node == "node-1" && (n.PeakWorkingSetMB.Float64() != 209.5 || !strings.HasPrefix(n.PeakWorkingSetSource, "kernel high-water mark memory")) {
			t.Errorf("peak %v (%s), want the tag's", n.PeakWorkingSetMB.Float64(), n.PeakWorkingSetSource)
		}
	}
}

func deref(p *metrics.Float) any {
	if p == nil {
		return nil
	}
	return p.Float64()
}

// history serves a run's series from memory and counts the reads.
type history struct {
	series map[string][]Point
	reads  map[string]int
	fail   string // a key whose read fails
}

func (h *history) read(_ context.Context, key string) ([]Point, error) {
	h.reads[key]++
	if key == h.fail {
		return nil, errors.New("answer 500")
	}
	return h.series[key], nil
}

// A node that recorded its figures costs no read; one that did not (it
// still runs) has the series the report uses read once each, and no other.
func TestBuildReadsOnlyWhatItNeeds(t *testing.T) {
	a := summary.New()
	for i := range 4 {
		a.Add(metrics.Sample{Seq: int64(i), Time: t0.Add(time.Duration(i) * time.Second), Points: []metrics.Point{
			metrics.At(metrics.ContainerMemoryWorkingSet, 100+float64(i)), metrics.At(metrics.ContainerCPUUsage, 1),
		}})
	}
	tags := jobTags(nodeEndSpec{"node-0", "FINISHED", "success", "", 0, 5 * time.Second}, nodeEndSpec{id: "node-1"})
	tags["bridge.node.node-0.figures"] = FiguresTag(a)
	h := &history{reads: map[string]int{}, series: map[string][]Point{}}
	latest := map[string]float64{}
	for _, node := range []string{"node-0", "node-1"} {
		for name, vs := range map[string][]float64{
			"container_memory_working_set_megabytes": {10, 30, 20},
			"container_cpu_usage_cores":              {0.5, 1.5, 1},
			"gpu_0_utilization_percentage":           {90, 80, 70},
			"gpu_1_utilization_percentage":           {50, 50, 50},
			"gpu_0_energy_joules":                    {100, 200, 300},
			"container_memory_rss_megabytes":         {1, 2, 3}, // not used
			"task-1/process_count":                   {1, 1, 1}, // a task's
		} {
			key := "system/" + node + "/" + name
			for i, v := range vs {
				h.series[key] = append(h.series[key], Point{Time: t0.Add(time.Duration(i) * time.Second), Value: v})
			}
			latest[key] = vs[len(vs)-1]
		}
	}
	rep, err := Build(context.Background(), Run{ID: "r", Status: "RUNNING", Tags: tags, Latest: latest}, h.read)
	if err != nil {
		t.Fatal(err)
	}
	wantReads := map[string]int{
		"system/node-1/container_memory_working_set_megabytes": 1, "system/node-1/container_cpu_usage_cores": 1,
		"system/node-1/gpu_0_utilization_percentage": 1, "system/node-1/gpu_1_utilization_percentage": 1,
	}
	if fmt.Sprint(h.reads) != fmt.Sprint(wantReads) {
		t.Errorf("reads %v, want %v", h.reads, wantReads)
	}
	n0, n1 := rep.Nodes[0], rep.Nodes[1]
	if n0.Samples != 4 || n0.PeakWorkingSetMB.Float64() != 103 || n0.Status != "FINISHED" {
		t.Errorf("node-0 from its figures: %+v", n0)
	}
	if n1.Status != "RUNNING" || n1.Samples != 3 || n1.PeakWorkingSetMB.Float64() != 30 || n1.GPUUtilizationPercent.Float64() != 65 ||
		n1.GPUEnergyJoules.Float64() != 300 || n1.CPUPeakCores.Float64() != 1.5 || n1.CPUMeanCores.Float64() != 1.25 {
		t.Errorf("node-1 from its series: %s", mustJSON(n1))
	}

	h.fail = "system/node-1/container_cpu_usage_cores"
	rep, err = Build(context.Background(), Run{ID: "r", Status: "RUNNING", Tags: tags, Latest: latest}, h.read)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "container_cpu_usage_cores") || rep.Nodes[1].CPUMeanCores != nil || rep.Nodes[1].PeakWorkingSetMB == nil {
		t.Errorf("a failed read: notes %q, node-1 %s", rep.Notes, mustJSON(rep.Nodes[1]))
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestDiffersFromTheJob(t *testing.T) {
	rows := []Node{
		{Node: "node-0", Figures: Figures{GPUSMActiveRatio: p(0.60), NetworkMBps: p(100), ThrottledSharePercent: p(0)}},
		{Node: "node-1", Figures: Figures{GPUSMActiveRatio: p(0.62), NetworkMBps: p(100)}},
		{Node: "node-2", Figures: Figures{GPUSMActiveRatio: p(0.30), NetworkMBps: p(130), ThrottledSharePercent: p(40)}},
		{Node: "node-3", Figures: Figures{GPUSMActiveRatio: p(0.61), NetworkMBps: p(90), GPUXidErrors: p(2), GPUECCUncorrected: p(0)}},
	}
	differs(rows)
	want := map[string][]string{
		"node-2": {"GPU SM active 30% against the job's median 60% (-50%)", "network 130.0 MB/s against the job's median 100.0 MB/s (+30%)", "CPU throttled in 40% of periods"},
		"node-3": {"2 GPU Xid errors"},
	}
	for _, n := range rows {
		if fmt.Sprint(n.Differs) != fmt.Sprint(want[n.Node]) {
			t.Errorf("%s differs %q, want %q", n.Node, n.Differs, want[n.Node])
		}
	}
	// Idle figures and fewer than three nodes are not compared.
	rows = []Node{
		{Node: "a", Figures: Figures{NetworkMBps: p(0.01), GPUUtilizationPercent: p(90)}},
		{Node: "b", Figures: Figures{NetworkMBps: p(0.5), GPUUtilizationPercent: p(10)}},
		{Node: "c", Figures: Figures{NetworkMBps: p(0.02)}},
	}
	differs(rows)
	for _, n := range rows {
		if len(n.Differs) > 0 {
			t.Errorf("%s differs %q: idle or too few to compare", n.Node, n.Differs)
		}
	}
}

// A single-node run is one row, its status and end the run's.
func TestSingleRun(t *testing.T) {
	tags := map[string]string{"bridge.hostname": "box", "bridge.exit_code": "1", "bridge.exit_reason": "app_error",
		"bridge.exit_reason_detail": "exited 1", "bridge.memory_limit_megabytes": "no limit"}
	latest := map[string]float64{"system/container_memory_working_set_megabytes": 5}
	h := &history{reads: map[string]int{}, series: map[string][]Point{
		"system/container_memory_working_set_megabytes": {{Time: t0, Value: 4}, {Time: t0.Add(time.Second), Value: 6}, {Time: t0.Add(2 * time.Second), Value: 5}}}}
	rep, err := Build(context.Background(), Run{ID: "r1", Status: "FAILED", EndTime: t0.Add(3 * time.Second), Tags: tags, Latest: latest}, h.read)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Nodes) != 1 {
		t.Fatalf("%d rows, want 1", len(rep.Nodes))
	}
	n := rep.Nodes[0]
	if n.Node != "box" || n.Status != "FAILED" || n.Ended != "2026-12-06T18:00:03.000Z" || n.MemoryLimitMB != nil || n.PeakWorkingSetMB.Float64() != 6 || n.Samples != 3 {
		t.Errorf("row %s", mustJSON(n))
	}
	if rep.FirstFailure == nil || rep.FirstFailure.Node != "box" || rep.FirstFailure.Reason != "app_error" {
		t.Errorf("first failure %+v", rep.FirstFailure)
	}
	// One node: nothing to compare it with, so no word of how a job's
	// nodes are compared.
	var md, text bytes.Buffer
	rep.Markdown(&md)
	rep.Text(&text)
	for _, out := range []string{md.String(), text.String()} {
		if strings.Contains(out, "NTP-close") || strings.Contains(out, "Differs from the job") {
			t.Errorf("a single run's report carries the multi-node footer:\n%s", out)
		}
	}
}

// The JSON writes text as it is: "->", "<" and "&" are no HTML.
func TestJSONNotEscapedAsHTML(t *testing.T) {
	tags := map[string]string{"bridge.hostname": "box", "bridge.exit_code": "137", "bridge.exit_reason": "cgroup_oom_kill",
		"bridge.exit_reason_detail": "oom_kill 0 -> 1, <limit> & more"}
	rep, _ := Build(context.Background(), Run{ID: "r1", Status: "FAILED", Tags: tags}, nil)
	js := string(rep.JSON())
	if !strings.Contains(js, `"oom_kill 0 -> 1, <limit> & more"`) || strings.Contains(js, `\u00`) || !strings.HasSuffix(js, "}\n") {
		t.Errorf("JSON:\n%s", js)
	}
}

// The JSON has the shape; the Markdown and text have a row a node
// and no empty column; the summary a line a node.
func TestRender(t *testing.T) {
	tags := jobTags(oom("node-1", time.Second), term("node-0", 2*time.Second), term("node-2", 2*time.Second))
	tags["bridge.node.node-1.peak_working_set_megabytes"] = "200"
	rep, _ := Build(context.Background(), Run{ID: "abc", Status: "FAILED", Tags: tags}, nil)
	var got struct {
		Run          string `json:"run"`
		Status       string `json:"status"`
		FirstFailure struct {
			Node, Reason, Time, Detail string
		} `json:"first_failure"`
		Nodes []map[string]any `json:"nodes"`
	}
	if err := json.Unmarshal(rep.JSON(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Run != "abc" || got.Status != "FAILED" || got.FirstFailure.Node != "node-1" || got.FirstFailure.Reason != "cgroup_oom_kill" ||
		got.FirstFailure.Time != "2026-12-06T18:00:01.000Z" || len(got.Nodes) != 3 {
		t.Errorf("JSON %s", rep.JSON())
	}
	for _, k := range []string{"node", "status", "exit_code", "reason", "peak_working_set_megabytes"} {
		if _, ok := got.Nodes[1][k]; !ok {
			t.Errorf("node row lacks %q: %v", k, got.Nodes[1])
		}
	}
	var md, text bytes.Buffer
	if err := rep.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := rep.Text(&text); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{md.String(), text.String()} {
		if !strings.Contains(out, "node-1: cgroup_oom_kill at 2026-12-06T18:00:01.000Z") ||
			!strings.Contains(out, "stopped 1.0 s after node-1's failure") || strings.Contains(out, "GPU util") {
			t.Errorf("report:\n%s", out)
		}
	}
	if n := strings.Count(md.String(), "\n| node-"); n != 3 {
		t.Errorf("%d rows in the Markdown table, want 3:\n%s", n, &md)
	}
	if !strings.Contains(text.String(), "NTP-close") || !strings.Contains(md.String(), "NTP-close") {
		t.Errorf("a job's report lacks how its nodes are compared:\n%s\n%s", &text, &md)
	}
	if lines := strings.Split(strings.TrimSpace(rep.Summary()), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[2], "node-1: status FAILED") {
		t.Errorf("summary:\n%s", rep.Summary())
	}
}

func TestNaturalOrder(t *testing.T) {
	tags := jobTags(nodeEndSpec{id: "node-10"}, nodeEndSpec{id: "node-2"}, nodeEndSpec{id: "node-1"})
	rep, _ := Build(context.Background(), Run{Tags: tags}, nil)
	var ids []string
	for _, n := range rep.Nodes {
		ids = append(ids, n.Node)
	}
	if fmt.Sprint(ids) != "[node-1 node-2 node-10]" {
		t.Errorf("order %v", ids)
	}
}

// Every series the report reads is found by its collector's name, from a
// node's accumulated samples: GPU activity from GPM, energy from NVML and
// RAPL, InfiniBand ports, Xid and ECC counts; a MIG slice's activity and a
// port's error counts are not read.
func TestFiguresOfEverySource(t *testing.T) {
	a := summary.New()
	ib := func(d *metrics.Desc, dev, port string) *metrics.Desc { return d.For(dev, port) }
	for i := range 3 {
		v := float64(i)
		a.Add(metrics.Sample{Seq: int64(i), Time: t0.Add(time.Duration(i) * time.Second), Points: []metrics.Point{
			metrics.At(metrics.GPUUtilization.ForGPU(0), 90), metrics.At(metrics.GPUUtilization.ForGPU(1), 70),
			metrics.At(metrics.GPUProfSMActive.ForGPU(0), 0.5), metrics.At(metrics.GPUProfSMActive.ForGPU(1), 0.3),
			metrics.At(metrics.GPUProfSMActive.ForMIG(0, 1), 0.99),
			metrics.At(metrics.GPUEnergy.ForGPU(0), 100*v), metrics.At(metrics.GPUEnergy.ForGPU(1), 50*v),
			metrics.At(metrics.NodeCPUEnergy, 10*v),
			metrics.At(metrics.GPUXidErrors.ForGPU(1), v), metrics.At(metrics.GPUECCUncorrected.ForGPU(0), 0),
			metrics.At(metrics.NetnsReceiveRate, 1), metrics.At(metrics.NetnsTransmitRate, 2),
			metrics.At(ib(metrics.InfinibandReceiveRate, "mlx5_0", "1"), 1000), metrics.At(ib(metrics.InfinibandTransmitRate, "mlx5_0", "1"), 500),
			metrics.At(ib(metrics.InfinibandReceiveRate, "mlx5_1", "1"), 100), metrics.At(ib(ibmetrics.SymbolErrors, "mlx5_0", "1"), 7),
			metrics.At(metrics.ContainerCPUThrottledPeriods, 20*v),
		}})
	}
	var f Figures
	if err := json.Unmarshal([]byte(FiguresTag(a)), &f); err != nil {
		t.Fatal(err)
	}
	want := Figures{Samples: 3, GPUUtilizationPercent: p(80), GPUSMActiveRatio: p(0.4), GPUEnergyJoules: p(300),
		NodeCPUEnergyJoules: p(20), GPUXidErrors: p(2), GPUECCUncorrected: p(0), NetworkMBps: p(3),
		InfinibandMBps: p(1600), ThrottledSharePercent: p(20)}
	if mustJSON(f) != mustJSON(want) {
		t.Errorf("figures\n%s\nwant\n%s", mustJSON(f), mustJSON(want))
	}
}

func p(v float64) *metrics.Float { return metrics.FloatOf(v) }

// A node restarted after a failure and ended cleanly: its records show
// the clean attempt, the run's first-failure tag and the node's record of
// its failed attempt (bridge.failed.<node>, never cleared) the failed one,
// which the report keeps.
func TestRecordedFirstFailureKept(t *testing.T) {
	tags := jobTags(nodeEndSpec{"node-0", "FINISHED", "success", "", 0, time.Minute}, term("node-1", 2*time.Minute))
	tags[TagFirstFailure] = "node-0: app_error at 2026-12-06T18:00:10.000Z (exited 1)"
	tags["bridge.failed.node-0"] = "FAILED: exit 1, attempt 0"
	rep, _ := Build(context.Background(), Run{Status: "FAILED", Tags: tags}, nil)
	f := rep.FirstFailure
	if f == nil || f.Node != "node-0" || f.Reason != "app_error" || f.Detail != "exited 1" || f.Time != "2026-12-06T18:00:10.000Z" {
		t.Fatalf("first failure %+v, want the recorded one", f)
	}
	if n := rep.Nodes[1]; n.ConsequenceOf != "node-0" || n.Consequence != "stopped 110.0 s after node-0's failure" {
		t.Errorf("node-1, stopped 110 s after the recorded failure: consequence %q of %q", n.Consequence, n.ConsequenceOf)
	}
}
