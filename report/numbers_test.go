package report

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/summary"
)

// A number in a node's tags or series that no range holds (an exporter's
// 1e306, a NaN, a 1e999 past a float64) is left out and counted, one row
// a case: the report still renders in every form, and its JSON reads back.
func TestNumbersOutOfRange(t *testing.T) {
	s := "bridge.node.node-1."
	for _, tc := range []struct {
		name    string
		tags    map[string]string
		latest  map[string]float64 // node-1's series, where it recorded no figures
		refused int
		check   func(t *testing.T, n Node)
	}{
		{name: "1e306 peak working set", tags: map[string]string{s + "peak_working_set_megabytes": "1e306"}, refused: 1,
			check: func(t *testing.T, n Node) {
				if n.PeakWorkingSetMB != nil {
					t.Errorf("peak %v", n.PeakWorkingSetMB.Float64())
				}
			}},
		{name: "1e999 past a float64", tags: map[string]string{s + "energy_gpus_joules": "1e999"}, refused: 1},
		{name: "NaN", tags: map[string]string{s + "cpu_limit_cores": "NaN"}, refused: 1},
		{name: "negative energy", tags: map[string]string{s + "energy_node_cpu_joules": "-5"}, refused: 1},
		{name: "throttled share above 100", tags: map[string]string{s + "throttled_share_percentage": "250"}, refused: 1},
		{name: "words are no number, not refused", tags: map[string]string{s + "memory_limit_megabytes": "no limit"}, refused: 0},
		{name: "in range, rounded", tags: map[string]string{s + "peak_working_set_megabytes": "123.45678"}, refused: 0,
			check: func(t *testing.T, n Node) {
				if n.PeakWorkingSetMB == nil || n.PeakWorkingSetMB.Float64() != 123.457 {
					t.Errorf("peak %v, want 123.457", deref(n.PeakWorkingSetMB))
				}
			}},
		{name: "a large figure in range is not rounded into an overflow", tags: map[string]string{s + "energy_gpus_joules": "9.9e14"}, refused: 0,
			check: func(t *testing.T, n Node) {
				if n.GPUEnergyJoules == nil || n.GPUEnergyJoules.Float64() != 9.9e14 {
					t.Errorf("energy %v", deref(n.GPUEnergyJoules))
				}
			}},
		{name: "figures tag with 1e306", tags: map[string]string{s + "figures": `{"samples":3,"gpu_utilization_percentage":1e306,"cpu_mean_cores":0.5,"network_megabytes_per_second":1e306}`}, refused: 2,
			check: func(t *testing.T, n Node) {
				if n.GPUUtilizationPercent != nil || n.NetworkMBps != nil || deref(n.CPUMeanCores) != 0.5 || n.Samples != 3 {
					t.Errorf("figures %+v", n.Figures)
				}
			}},
		{name: "figures tag with 1e999 is no figures", tags: map[string]string{s + "figures": `{"samples":3,"gpu_energy_joules":1e999}`}, refused: 0,
			check: func(t *testing.T, n Node) {
				if n.GPUEnergyJoules != nil || n.Samples != 0 {
					t.Errorf("figures %+v", n.Figures)
				}
			}},
		{name: "share of a limit that overflows", tags: map[string]string{
			s + "peak_usage_share_of_limit_percentage": "1e8", s + "memory_limit_megabytes": "1e15", s + "exit_reason": "cgroup_oom_kill"}, refused: 1},
		{name: "series of 1e306 and NaN", latest: map[string]float64{
			"system/node-1/" + metrics.ContainerMemoryLimit.Name: 1e306, "system/node-1/" + metrics.ContainerCPULimit.Name: math.NaN(),
			"system/node-1/gpu_0_energy_joules": 1e306, "system/node-1/gpu_1_energy_joules": 1e306}, refused: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tags := jobTags(oom("node-1", time.Second), term("node-0", 2*time.Second))
			for k, v := range tc.tags {
				tags[k] = v
			}
			if tc.latest != nil {
				delete(tags, s+"figures")
			}
			rep, err := Build(context.Background(), Run{ID: "r", Status: "FAILED", Tags: tags, Latest: tc.latest}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.ValuesRefused != tc.refused {
				t.Errorf("%d values refused, want %d; notes %q", rep.ValuesRefused, tc.refused, rep.Notes)
			}
			if tc.refused > 0 && !strings.Contains(strings.Join(rep.Notes, "\n"), "node-1: ") {
				t.Errorf("no note names node-1: %q", rep.Notes)
			}
			var back Report
			if err := json.Unmarshal(rep.JSON(), &back); err != nil || back.ValuesRefused != tc.refused {
				t.Errorf("JSON does not read back (%v): %s", err, rep.JSON())
			}
			var md, text bytes.Buffer
			if err := rep.Markdown(&md); err != nil {
				t.Error(err)
			}
			if err := rep.Text(&text); err != nil {
				t.Error(err)
			}
			_ = rep.Summary()
			for _, n := range rep.Nodes {
				if n.Node == "node-1" && tc.check != nil {
					tc.check(t, n)
				}
			}
		})
	}
}

// A node's own figures tag: what it accumulated, figures out of range
// left out, and always JSON (never a panic, never Infinity).
func TestFiguresTagFinite(t *testing.T) {
	a := summary.New()
	now := time.Now()
	for i := range 3 {
		a.Add(metrics.Sample{Seq: int64(i), Time: now.Add(time.Duration(i) * time.Second), Points: []metrics.Point{
			metrics.At(metrics.ContainerMemoryWorkingSet, 1e306), metrics.At(metrics.GPUUtilization.ForGPU(0), 1e306),
			metrics.At(metrics.ContainerMemoryLimit, 100),
		}})
	}
	tag := FiguresTag(a)
	var f Figures
	if err := json.Unmarshal([]byte(tag), &f); err != nil || f.MemoryLimitMB == nil || f.PeakWorkingSetMB != nil || f.GPUUtilizationPercent != nil {
		t.Errorf("figures tag %s (%v)", tag, err)
	}
}
