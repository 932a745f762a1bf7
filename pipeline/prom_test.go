package pipeline

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bridge-dev/bridge/internal/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

// /metrics is a second consumer of the sample stream: it shows the samples
// the spool writer took and the sink's health, while the session runs.
func TestSessionServesMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	sink := &fakeSink{t: t, name: "fake", runID: "r1"}
	set := settings(t)
	set.Interval, set.MetricsAddr, set.NodeID = 5*time.Millisecond, addr, "node-a"
	s := open(t, set, []metrics.Collector{&counter{}}, nil, sink)
	s.Run()
	waitfor.Cond(t, deadline, "three samples at the sink", func() bool { return len(sink.received()) >= 3 })

	var text string
	waitfor.Cond(t, deadline, "/metrics showing a sample and the sink's sends", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		text = string(b)
		return strings.Contains(text, "bridge_test_calls_count{") && strings.Contains(text, `bridge_sink_samples_sent_total{node_id="node-a",run_id="r1",sink="fake"}`)
	})
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, text)
	}
	if v := fams["bridge_samples_taken_total"].GetMetric()[0].GetCounter().GetValue(); v < 1 {
		t.Errorf("bridge_samples_taken_total = %v", v)
	}
	if v := fams["bridge_sink_samples_sent_total"].GetMetric()[0].GetCounter().GetValue(); v < 1 {
		t.Errorf("bridge_sink_samples_sent_total = %v", v)
	}
	s.Stop(nil)
	s.Finish(tracker.EndInfo{Time: time.Now()})
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("/metrics still served after Finish")
	}
}
