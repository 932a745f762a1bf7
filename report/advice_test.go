package report

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/advice"
	"github.com/bridge-dev/bridge/stats"
)

// A node that recorded its advice and cost: the report shows them as
// recorded (JSON's suggested_memory_limit_megabytes, suggested_cpu_cores
// per node), and the job's cost is the nodes'. A node whose bridge
// recorded none gets advice.Suggest of its series: the peak working set
// and the CPU's 90th percentile (VPA's histogram of its points), its OOM
// kill bumping the memory. The job's energy over the run's step is its
// energy per step.
func TestReportAdvice(t *testing.T) {
	tags := jobTags(nodeEndSpec{id: "node-0", status: "FINISHED", reason: "exited", after: time.Minute}, oom("node-1", time.Minute))
	tags["bridge.node.node-0.suggested_memory_limit_megabytes"] = "1150"
	tags["bridge.node.node-0.suggested_cpu_cores"] = "0.46"
	tags["bridge.node.node-0.unused"] = "used 0.4 of 8 cores at most: 95% of the CPU limit was never used"
	tags["bridge.node.node-0.cost"] = "12.50"
	tags["bridge.node.node-0.cost_basis"] = "1 GPUs × 2.50 h at 5 a GPU-hour"
	tags["bridge.node.node-1.cost"] = "1.25"
	tags["bridge.node.node-0.energy_node_cpu_joules"] = "600.0"
	tags["bridge.node.node-1.energy_node_cpu_joules"] = "400.0"
	var cpu []Point
	for i := range 11 {
		v := 1.0
		if i == 10 {
			v = 3 // one window of ten: over the 90th percentile's share
		}
		cpu = append(cpu, Point{Time: t0.Add(time.Duration(i) * 10 * time.Second), Value: v})
	}
	run := Run{ID: "r", Status: "FAILED", Tags: tags, Step: 50, Latest: map[string]float64{
		"system/node-1/container_memory_working_set_megabytes": 2000, "system/node-1/container_cpu_usage_cores": 3,
		"system/node-1/container_memory_limit_megabytes": 2000,
	}}
	hist := func(_ context.Context, key string) ([]Point, error) {
		switch key {
		case "system/node-1/container_memory_working_set_megabytes":
			return []Point{{Time: t0, Value: 1500}, {Time: t0.Add(time.Second), Value: 2000}}, nil
		case "system/node-1/container_cpu_usage_cores":
			return cpu, nil
		}
		return nil, nil
	}
	rep, err := Build(context.Background(), run, hist)
	if err != nil {
		t.Fatal(err)
	}
	n0, n1 := rep.Nodes[0], rep.Nodes[1]
	if n0.SuggestedMemoryLimitMB.Float64() != 1150 || n0.SuggestedCPUCores.Float64() != 0.46 || n0.Cost.Float64() != 12.5 ||
		len(n0.Unused) != 1 || n0.CostBasis == "" {
		t.Errorf("node-0 as recorded: %+v", n0)
	}
	p90, _ := stats.FoldDist(stats.CPUDist(), cpu).Percentile(advice.CPUPercentile)
	wantMem := math.Ceil(max(2000+advice.OOMMinBumpMB, 2000*advice.OOMBumpRatio) * 1.15)
	wantCPU := math.Ceil(p90*1.15*1000) / 1000
	if n1.SuggestedMemoryLimitMB == nil || n1.SuggestedMemoryLimitMB.Float64() != wantMem ||
		n1.SuggestedCPUCores == nil || n1.SuggestedCPUCores.Float64() != wantCPU || p90 < 1 || p90 > 1.05 {
		t.Errorf("node-1 from its series: memory %v cpu %v; want %v (OOM-bumped 2000 MB) and %v (p90 %v)",
			n1.SuggestedMemoryLimitMB, n1.SuggestedCPUCores, wantMem, wantCPU, p90)
	}
	if rep.Cost.Float64() != 13.75 || rep.Steps != 50 || rep.EnergyJoules.Float64() != 1000 || rep.EnergyPerStepJoules.Float64() != 20 {
		t.Errorf("job: cost %v steps %d energy %v per step %v", rep.Cost, rep.Steps, rep.EnergyJoules, rep.EnergyPerStepJoules)
	}
	var js struct {
		Nodes []map[string]any `json:"nodes"`
	}
	if err := json.Unmarshal(rep.JSON(), &js); err != nil || js.Nodes[0]["suggested_memory_limit_megabytes"] != 1150.0 ||
		js.Nodes[0]["suggested_cpu_cores"] != 0.46 {
		t.Errorf("JSON %v: %s", err, rep.JSON())
	}
	var md bytes.Buffer
	if err := rep.Markdown(&md); err != nil || !strings.Contains(md.String(), "energy 1.0 kJ over 50 steps, 20 J a step") ||
		!strings.Contains(md.String(), "cost 13.75") || !strings.Contains(md.String(), "memory 1150 MB, CPU 0.46 cores") {
		t.Errorf("Markdown %v:\n%s", err, &md)
	}
}

// A cost tag out of range (negative, 1e999) is refused as every figure
// is, and named.
func TestReportCostRefused(t *testing.T) {
	tags := jobTags(nodeEndSpec{id: "node-0", status: "FINISHED", reason: "exited", after: time.Minute})
	tags["bridge.node.node-0.cost"] = "-3"
	rep, _ := Build(context.Background(), Run{ID: "r", Tags: tags}, nil)
	if rep.Nodes[0].Cost != nil || rep.Cost != nil || rep.ValuesRefused != 1 {
		t.Errorf("a negative cost kept: %+v, refused %d", rep.Nodes[0], rep.ValuesRefused)
	}
}
