package report

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/advice"
	"github.com/bridge-dev/bridge/forensics"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

// gpuNodeSample is the latest sample of a node with 8 GPUs (GPM's SM
// active), a MIG slice, 8 InfiniBand ports and a cgroup with limits.
func gpuNodeSample() metrics.Sample {
	var b metrics.Batch
	for i := range 8 {
		b.Add(metrics.GPUProfSMActive.ForGPU(i), 0.7+0.01*float64(i), "")
		b.Add(metrics.GPUUtilization.ForGPU(i), 97, "")
		b.Add(metrics.GPUPowerUsage.ForGPU(i), 650.4, "")
		b.Add(metrics.GPUSMClock.ForGPU(i), 1980, "")
		b.Add(metrics.GPUMemoryUsagePercent.ForGPU(i), 88.26, "")
		b.Add(metrics.InfinibandReceiveRate.For(fmt.Sprintf("mlx5_%d", i), "1"), 12345.67, "")
		b.Add(metrics.InfinibandTransmitRate.For(fmt.Sprintf("mlx5_%d", i), "1"), 12000, "")
	}
	b.Add(metrics.GPUUtilization.ForMIG(0, 1), 5, "")         // its GPU's already
	b.Add(metrics.GPUPowerUsage.ForGPU(9), 1e300, "")         // out of range: not a value
	b.Add(metrics.ContainerCPUUtilization, 85.71, "")         // of the limit
	b.Add(metrics.ContainerCPUThrottledPeriods, 12.34, "")    //
	b.Add(metrics.ContainerMemoryWorkingSetPercent, 61.5, "") //
	b.Add(metrics.NetnsReceiveRate, 123.456, "")
	b.Add(metrics.NetnsTransmitRate, 99.9, "")
	return metrics.Sample{Time: t0, Points: b.Points}
}

// A node's latest values: the GPUs' mean, the ports' sum, a MIG slice's
// and an out-of-range value left out, rounded as written; a line carries
// them after its figures and gives them back by signal, and a line
// without them (an older bridge's, an end) reads as before, with none.
func TestLatestInTheLine(t *testing.T) {
	l := LatestOf(gpuNodeSample())
	want := map[string]float64{"l_sm": 0.735, "l_gu": 97, "l_gw": 650, "l_mhz": 1980, "l_gm": 88.3, "l_cpu": 85.7,
		"l_thr": 12.3, "l_ws": 61.5, "l_nrx": 123.5, "l_ntx": 99.9, "l_irx": 98765.4, "l_itx": 96000}
	for f, w := range want {
		if v, ok := l[f]; !ok || v.Float64() != w {
			t.Errorf("%s = %v (%v), want %v", f, v.Float64(), ok, w)
		}
	}
	if len(l) != len(want) {
		t.Errorf("latest %v, want exactly %v", l, want)
	}
	// A running node's tags (pipeline's liveWith): its figures, energy,
	// limits and peaks so far, the advice and a cost; no end yet.
	tags := map[string]string{}
	for k, v := range endTagsOf(t, "success", 0, "") {
		switch k {
		case forensics.TagExitCode, forensics.TagExitReason, forensics.TagExitReasonDetail, TagEndedClock, "bridge.exit_signal":
		default:
			tags[k] = v
		}
	}
	tags[advice.TagSuggestedMemory], tags[advice.TagSuggestedCPU], tags[advice.TagCost] = "320", "104", "1234.56"
	line := EndLine(tags, Ending{Who: "node-1023", Status: tracker.StatusRunning, Attempt: 0, Run: "0123456789abcdef0123456789abcdef",
		At: t0.Add(time.Hour), Latest: l})
	got := LiveValues(tracker.ParseLine(line))
	for _, sig := range LiveSignals {
		if got[sig.Name] != want[sig.Field] {
			t.Errorf("%s read back as %v, want %v (line %s)", sig.Name, got[sig.Name], want[sig.Field], line)
		}
	}
	if len(line) > 600 {
		t.Errorf("a running 8-GPU node's line is %d characters, want at most 600: %s", len(line), line)
	}
	// A runs/get answer holds it as {"key":"bridge.state.node-1023","value":"..."},
	// its quotes escaped.
	entry := len(fmt.Sprintf(`{"key":%q,"value":%q},`, tracker.StateTag("node-1023", ""), line))
	t.Logf("a running 8-GPU node's line: %d characters, %d bytes of runs/get; 1,024 nodes: %d bytes: %s",
		len(line), entry, 1024*entry, line)
	if 1024*entry > 1<<20*3/4 {
		t.Errorf("1,024 such lines are %d bytes of runs/get, want under 3/4 MiB (room for the job's tags and series)", 1024*entry)
	}
	old := EndLine(tags, Ending{Who: "node-1", Status: tracker.StatusRunning, Attempt: 0, At: t0})
	if strings.Contains(old, " l_") || len(LiveValues(tracker.ParseLine(old))) != 0 {
		t.Errorf("a line without latest values reads some: %s", old)
	}
	bad := LiveValues(tracker.ParseLine("who=n l_sm=7 l_gu=x l_cpu=1e999 l_gw=300"))
	if len(bad) != 1 || bad["gpu_power_usage_watts"] != 300 {
		t.Errorf("values out of range or not numbers read as %v, want only the power", bad)
	}
}
