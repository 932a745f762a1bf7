package promexport

import (
	"math"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bridge-dev/bridge/metrics"
)

// scrape reads the exporter over HTTP, as Prometheus does.
func scrape(t *testing.T, e *Exporter) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + e.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); expfmt.ResponseFormat(resp.Header).FormatType() != expfmt.TypeTextPlain {
		t.Fatalf("Content-Type %q, want the text format", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func one(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no %s; have %v", name, keys(fams))
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	t.Fatalf("no %s with %v", name, labels)
	return nil
}

func keys(m map[string]*dto.MetricFamily) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestExposesSampleUnderCAdvisorNames(t *testing.T) {
	e := New(Options{RunID: func() string { return "run1" }, NodeID: "n0", Health: func() Health {
		return Health{QueueDepth: 2, Dropped: 1, Scrapes: map[string]int{"http://x/metrics": 3}, Sinks: []SinkHealth{{Name: "mlflow", Sent: 5, Pending: 4, Errors: 7, LastSend: time.UnixMilli(1700000000123)}}}
	}})
	if err := e.Serve("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })

	if fams := scrape(t, e); fams["container_memory_working_set_bytes"] != nil {
		t.Fatal("a value exposed before any sample")
	}
	const ws, limit = 1234567891, 2147483648
	at := time.UnixMilli(1764700000456)
	e.Observe(metrics.Sample{Seq: 9, Time: at, Points: []metrics.Point{
		{Name: metrics.ContainerMemoryWorkingSet, Value: metrics.MB(ws)},
		{Name: metrics.ContainerMemoryLimit, Value: metrics.MB(limit)},
		{Name: metrics.ContainerOOMKills, Value: 2},
		{Name: metrics.ContainerCPUUsage, Value: 1.5},
		{Name: metrics.ContainerCPUUsageSecondsTotal, Value: 9.25},
		{Name: metrics.ContainerCPUThrottledPeriodsTotal, Value: 50},
		{Name: metrics.NetnsReceiveRate, Value: 1.25},
		{Name: metrics.GPUPrefix(1) + metrics.GPUMemoryUsed, Value: metrics.MB(81920 << 20)},
		{Name: metrics.MIGPrefix(0, 7) + metrics.GPUUtilization, Value: 40},
		{Name: "prom_app_queue_length__shard_2", Value: 17},
	}})
	fams := scrape(t, e)
	run := map[string]string{"run_id": "run1", "node_id": "n0"}
	check := func(name string, labels map[string]string, want float64) {
		t.Helper()
		m := one(t, fams, name, labels)
		v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		if v != want {
			t.Errorf("%s%v = %v, want %v", name, labels, v, want)
		}
		if m.GetTimestampMs() != at.UnixMilli() {
			t.Errorf("%s stamped %d, want the sample's time %d", name, m.GetTimestampMs(), at.UnixMilli())
		}
	}
	check("container_memory_working_set_bytes", run, ws)
	check("container_spec_memory_limit_bytes", run, limit)
	check("container_oom_events_total", run, 2)
	check("bridge_container_cpu_usage_cores", run, 1.5)
	check("container_cpu_usage_seconds_total", run, 9.25)
	check("container_cpu_cfs_throttled_periods_total", run, 50)
	check("bridge_netns_network_receive_bytes_per_second", run, 1.25e6)
	check("bridge_gpu_memory_used_bytes", map[string]string{"gpu": "1"}, 81920<<20)
	check("bridge_gpu_mig_utilization_percentage", map[string]string{"gpu": "0", "mig": "7"}, 40)
	check("bridge_prom_app_queue_length__shard_2", run, 17)
	check("bridge_sample_seq", run, 9)
	for _, n := range []string{"container_oom_events_total", "container_cpu_usage_seconds_total", "container_cpu_cfs_throttled_periods_total"} {
		if fams[n].GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s is not a counter", n)
		}
	}

	sink := map[string]string{"sink": "mlflow", "run_id": "run1"}
	for name, want := range map[string]float64{
		"bridge_sink_samples_sent_total": 5, "bridge_sink_samples_pending": 4, "bridge_sink_send_errors_total": 7,
		"bridge_sink_last_success_timestamp_seconds": 1700000000.123,
	} {
		m := one(t, fams, name, sink)
		if v := m.GetGauge().GetValue() + m.GetCounter().GetValue(); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	for name, want := range map[string]float64{"bridge_queue_depth": 2, "bridge_samples_dropped_total": 1, "bridge_samples_taken_total": 1} {
		m := one(t, fams, name, run)
		if v := m.GetGauge().GetValue() + m.GetCounter().GetValue(); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if v := one(t, fams, "bridge_scrape_failures_total", map[string]string{"url": "http://x/metrics"}).GetCounter().GetValue(); v != 3 {
		t.Errorf("bridge_scrape_failures_total = %v, want 3", v)
	}
}

// Megabytes back to bytes is exact for every byte count below 2^51: the
// property the "same value in Prometheus and MLflow" promise rests on.
func TestBytesRoundTripExact(t *testing.T) {
	s := seriesFor(metrics.ContainerMemoryWorkingSet)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 1_000_000; i++ {
		b := float64(r.Int64N(1 << 51))
		if i < 1000 {
			b = float64(i)
		}
		if got := s.value(metrics.MB(b)); got != b {
			t.Fatalf("%v bytes -> %v MB -> %v bytes", b, metrics.MB(b), got)
		}
	}
	if s.value(metrics.MB(math.MaxUint32)) != math.MaxUint32 {
		t.Fatal("4 GiB - 1")
	}
}

func TestSeriesNames(t *testing.T) {
	for in, want := range map[string]string{
		metrics.ContainerMemoryWorkingSet:                          "container_memory_working_set_bytes",
		metrics.ContainerMemoryRSS:                                 "container_memory_rss",
		metrics.NodeMemoryTotal:                                    "node_memory_MemTotal_bytes",
		metrics.ContainerCPUThrottledPeriods:                       "bridge_container_cpu_throttled_periods_percentage",
		metrics.GPUPrefix(3) + metrics.GPUPowerUsage:               "bridge_gpu_power_usage_watts",
		metrics.MIGPrefix(3, 1) + metrics.GPUMemoryUsed:            "bridge_gpu_mig_memory_used_bytes",
		metrics.RootfsDiskUsed:                                     "bridge_rootfs_disk_used_bytes",
		metrics.GPUPrefix(0) + "prof_pcie_tx_megabytes_per_second": "bridge_gpu_prof_pcie_tx_bytes_per_second",
	} {
		if got := seriesFor(in).name; got != want {
			t.Errorf("%s -> %s, want %s", in, got, want)
		}
	}
}
