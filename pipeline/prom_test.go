package pipeline

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bridge-dev/bridge/harness/promtest"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

// /metrics is a second consumer of the sample stream: it shows the samples
// the spool took and the sink's health, while the session runs.
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
	// The collector's health, from the session's Sampler.
	if m := fams["bridge_collector_success"].GetMetric(); len(m) != 1 || m[0].GetGauge().GetValue() != 1 || m[0].GetLabel()[0].GetValue() != "counter" {
		t.Errorf("bridge_collector_success = %v, want 1 for the counter collector", m)
	}
	s.Stop(nil)
	s.Finish(tracker.EndInfo{Time: time.Now()})
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("/metrics still served after Finish")
	}
}

// lateSink is a tracker that is down until up is set, then creates run
// "late-run"; it refuses samples (an outage) until accept is set, so they
// stay pending for that run.
type lateSink struct {
	up, accept atomic.Bool
	run        atomic.Value // string
}

func (l *lateSink) Name() string { return "late" }

func (l *lateSink) Run() tracker.RunInfo {
	id, _ := l.run.Load().(string)
	return tracker.RunInfo{ID: id}
}

func (l *lateSink) Start(context.Context, tracker.StartInfo) ([]string, error) {
	if !l.up.Load() {
		return nil, errors.New("connection refused")
	}
	l.run.Store("late-run")
	return nil, nil
}

func (l *lateSink) Send(_ context.Context, smp []metrics.Sample) (int, error) {
	if !l.accept.Load() {
		return 0, errors.New("503 Service Unavailable")
	}
	return len(smp), nil
}

func (l *lateSink) Finish(context.Context, tracker.EndInfo) error { return nil }

// A tracker that starts after the job did: /metrics labels every series
// with the run it created then (the first tracker's), and counts the
// samples pending for that run, not for run "" (which counts every sample
// still held for another tracker).
func TestMetricsAfterLateStart(t *testing.T) {
	sink := &lateSink{}
	down := &fakeSink{t: t, name: "down", runID: "r-down", hang: true} // holds every sample in the spool
	st := StartSinksWith(context.Background(), []tracker.Sink{sink, down}, tracker.StartInfo{},
		StartPolicy{Timeout: 100 * time.Millisecond, Background: true}, quiet())
	if len(st.Runs) != 2 || st.Runs[0].Late == nil {
		t.Fatalf("runs %+v: want the first sink left to start late", st.Runs)
	}
	set := settings(t)
	set.Interval, set.MetricsAddr, set.FlushTimeout = 5*time.Millisecond, promtest.FreeAddr(t), time.Second
	s := Open(Options{Settings: set, Log: quiet(), Version: "test", Collectors: []metrics.Collector{&counter{}}, Started: st,
		Phase: func(d time.Duration) time.Duration { return d }})
	s.Run()
	scrape := func() map[string]*dto.MetricFamily {
		fams, _, _ := promtest.Families(set.MetricsAddr)
		return fams
	}
	labels := func(m *dto.Metric) map[string]string {
		out := map[string]string{}
		for _, l := range m.GetLabel() {
			out[l.GetName()] = l.GetValue()
		}
		return out
	}
	pending := func(fams map[string]*dto.MetricFamily, sink string) (float64, map[string]string, bool) {
		for _, m := range fams["bridge_sink_samples_pending"].GetMetric() {
			if l := labels(m); l["sink"] == sink {
				return m.GetGauge().GetValue(), l, true
			}
		}
		return 0, nil, false
	}
	sent := func(fams map[string]*dto.MetricFamily, sink string) float64 {
		for _, m := range fams["bridge_sink_samples_sent_total"].GetMetric() {
			if labels(m)["sink"] == sink {
				return m.GetCounter().GetValue()
			}
		}
		return 0
	}
	waitfor.Cond(t, deadline, "/metrics before the tracker answers", func() bool {
		fams := scrape()
		return fams != nil && fams["bridge_samples_taken_total"] != nil
	})
	sink.up.Store(true)
	waitfor.Cond(t, deadline, "/metrics with the late run and its pending samples", func() bool {
		n, l, ok := pending(scrape(), "late")
		return ok && l["run_id"] == "late-run" && n > 0
	})
	for name, f := range scrape() {
		for _, m := range f.GetMetric() {
			if id := labels(m)["run_id"]; id != "late-run" {
				t.Errorf("%s labelled run_id=%q after the late start, want late-run", name, id)
			}
		}
	}
	sink.accept.Store(true)
	// The late tracker then sends the backlog at once and gathers the new
	// samples for tracker.DefaultGather between sends, so its count
	// falls well below the other's, which holds every sample.
	waitfor.Cond(t, deadline, "the late tracker's samples sent while the other holds them", func() bool {
		fams := scrape()
		late, _, ok1 := pending(fams, "late")
		held, _, ok2 := pending(fams, "down")
		n := sent(fams, "late")
		return ok1 && ok2 && n > 0 && late < held-n/2
	})
	s.Stop(nil)
	s.Finish(tracker.EndInfo{Time: time.Now()})
}
