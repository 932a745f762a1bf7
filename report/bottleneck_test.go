package report

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Each node's bottleneck verdict: its tag (bridge.node.<id>.bottleneck) in
// the node row, the JSON and a line of the text; each cause's share from
// its series' last values; for a node that recorded no verdict (still
// running), the cause of the largest share; a share out of range refused.
func TestBottleneck(t *testing.T) {
	tags := jobTags(nodeEndSpec{"node-0", "FINISHED", "success", "", 0, time.Minute}, nodeEndSpec{id: "node-1"}, nodeEndSpec{"node-2", "FINISHED", "success", "", 0, time.Minute})
	tags["bridge.node.node-0.bottleneck"] = "input: the 6 data-loading workers used 3.9 of the 4.0 cores allowed while the GPU was idle 61% of the time; the cause for 72% of 45 min"
	run := Run{ID: "r1", Status: "RUNNING", Tags: tags, Latest: map[string]float64{
		"system/node-0/node_bottleneck_input_ratio":       0.72,
		"system/node-0/node_bottleneck_gpu_compute_ratio": 0.28,
		"system/node-0/node_bottleneck_idle_ratio":        0,
		"system/node-1/node_bottleneck_gpu_compute_ratio": 0.9,
		"system/node-1/node_bottleneck_io_ratio":          0.1,
		"system/node-2/node_bottleneck_idle_ratio":        1e306,
	}}
	rep, err := Build(context.Background(), run, nil)
	if err != nil {
		t.Fatal(err)
	}
	n0, n1, n2 := rep.Nodes[0], rep.Nodes[1], rep.Nodes[2]
	if n0.Bottleneck != tags["bridge.node.node-0.bottleneck"] || len(n0.BottleneckShares) != 2 ||
		n0.BottleneckShares["input"].Float64() != 0.72 || n0.BottleneckShares["gpu_compute"].Float64() != 0.28 {
		t.Errorf("node-0: %q %v", n0.Bottleneck, n0.BottleneckShares)
	}
	if got := n0.bottleneckCell(); got != "input 72%" {
		t.Errorf("node-0's cell %q, want input 72%%", got)
	}
	if got := n1.bottleneckCell(); n1.Bottleneck != "" || got != "gpu_compute 90%" {
		t.Errorf("node-1 (no verdict recorded): %q, cell %q; want the largest share's cause", n1.Bottleneck, got)
	}
	if n2.BottleneckShares != nil || rep.ValuesRefused != 1 || !strings.Contains(strings.Join(rep.Notes, "\n"), "node_bottleneck_idle_ratio=1e+306") {
		t.Errorf("node-2's share of 1e306: %v, refused %d, notes %v; want it left out and named", n2.BottleneckShares, rep.ValuesRefused, rep.Notes)
	}

	var text bytes.Buffer
	if err := rep.Text(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "bottleneck node-0: input: the 6 data-loading workers used 3.9 of the 4.0 cores allowed") ||
		!strings.Contains(text.String(), "input 72%") {
		t.Errorf("text:\n%s\nwant node-0's verdict in its row and on a line", &text)
	}
	var md bytes.Buffer
	if err := rep.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "- node-0: input: the 6 data-loading workers") {
		t.Errorf("markdown:\n%s\nwant node-0's verdict", &md)
	}
	var js struct {
		Nodes []struct {
			Node             string             `json:"node"`
			Bottleneck       string             `json:"bottleneck"`
			BottleneckShares map[string]float64 `json:"bottleneck_shares"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(rep.JSON(), &js); err != nil {
		t.Fatal(err)
	}
	if js.Nodes[0].Bottleneck != n0.Bottleneck || js.Nodes[0].BottleneckShares["input"] != 0.72 {
		t.Errorf("JSON node-0: %+v", js.Nodes[0])
	}
}

// A single run's verdict is its bridge.bottleneck tag, its shares its
// system/ series.
func TestBottleneckSingleRun(t *testing.T) {
	run := Run{ID: "r1", Status: "FINISHED", Tags: map[string]string{"bridge.hostname": "h", "bridge.bottleneck": "cpu_throttled: the CPU quota throttled 95% of periods; the cause for 100% of 2.0 min"},
		Latest: map[string]float64{"system/node_bottleneck_cpu_throttled_ratio": 1}}
	rep, err := Build(context.Background(), run, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.Nodes[0]; n.bottleneckCell() != "cpu_throttled 100%" || !strings.HasPrefix(n.Bottleneck, "cpu_throttled: ") {
		t.Errorf("single run: %q, cell %q", n.Bottleneck, n.bottleneckCell())
	}
}
