package promexport

import (
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bridge-dev/bridge/metrics"

	"github.com/bridge-dev/bridge/metrics/rapl"

	"github.com/bridge-dev/bridge/metrics/node"
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
		return Health{Dropped: 1, Scrapes: map[string]int{"http://x/metrics": 3}, Sinks: []SinkHealth{{Name: "mlflow", Sent: 5, Pending: 4, Errors: 7, LastSend: time.UnixMilli(1700000000123)}},
			Collectors: []metrics.Health{
				{Collector: "cgroup", Runs: 3, OK: true, Duration: 1500 * time.Microsecond, Refused: 4, LastRefused: "x"},
				{Collector: "gpu", Runs: 3, Failures: 2, Duration: 5 * time.Second, LastError: "GPU 0: timeout"},
				{Collector: "scrape"}, // not run yet
			}}
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
		metrics.At(metrics.ContainerMemoryWorkingSet, metrics.MB(ws)),
		metrics.At(metrics.ContainerMemoryLimit, metrics.MB(limit)),
		metrics.At(metrics.ContainerOOMKills, 2),
		metrics.At(metrics.ContainerCPUUsage, 1.5),
		metrics.At(metrics.ContainerCPUUsageSecondsTotal, 9.25),
		metrics.At(metrics.ContainerCPUThrottledPeriodsTotal, 50),
		metrics.At(metrics.NetnsReceiveRate, 1.25),
		metrics.At(node.RootfsDiskUsed, metrics.MB(5e9)),
		metrics.At(metrics.GPUMemoryUsed.ForGPU(1), metrics.MB(81920<<20)),
		metrics.At(metrics.GPUUtilization.ForMIG(0, 7), 40),
		metrics.At(metrics.DCGMProfiling("pcie_tx", true).ForGPU(0), 2.5),
		metrics.At(metrics.Passthrough("prom_app_queue_length__shard_2"), 17),
		metrics.At(metrics.InfinibandTransmitRate.For("mlx5_0", "1"), 12.5),
		metrics.At(metrics.InfinibandTransmitRate.For("mlx5_1", "1"), 2),
		metrics.At(rapl.PackageEnergy.For("1"), 300),
		metrics.Named("known_by_name_only", 1), // not a collector's: not exposed
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
	check("bridge_rootfs_disk_used_bytes", run, 5e9)
	check("bridge_gpu_memory_used_bytes", map[string]string{"gpu": "1"}, 81920<<20)
	check("bridge_gpu_prof_pcie_tx_bytes_per_second", map[string]string{"gpu": "0"}, 2.5e6)
	check("bridge_gpu_mig_utilization_percentage", map[string]string{"gpu": "0", "mig": "7"}, 40)
	check("bridge_prom_app_queue_length__shard_2", run, 17)
	check("bridge_sample_seq", run, 9)
	// A device's series: one family, the device as labels, the base unit.
	check("bridge_node_infiniband_transmit_bytes_per_second", map[string]string{"device": "mlx5_0", "port": "1", "run_id": "run1"}, 12.5e6)
	check("bridge_node_infiniband_transmit_bytes_per_second", map[string]string{"device": "mlx5_1", "port": "1"}, 2e6)
	check("bridge_node_cpu_package_energy_joules_total", map[string]string{"package": "1"}, 300)
	if m := one(t, fams, "bridge_node_cpu_package_energy_joules_total", nil); len(m.GetLabel()) != 3 {
		t.Errorf("labels %v: want run_id, node_id and package only (no gpu)", m.GetLabel())
	}
	for _, n := range []string{"container_oom_events_total", "container_cpu_usage_seconds_total", "container_cpu_cfs_throttled_periods_total",
		"bridge_node_cpu_package_energy_joules_total"} {
		if fams[n].GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s is not a counter", n)
		}
	}
	if h := fams["container_memory_working_set_bytes"].GetHelp(); h != metrics.ContainerMemoryWorkingSet.Help {
		t.Errorf("help %q, want the descriptor's", h)
	}
	if fams["bridge_known_by_name_only"] != nil || fams["known_by_name_only"] != nil {
		t.Error("a point without a descriptor was exposed")
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
	for name, want := range map[string]float64{"bridge_samples_dropped_total": 1, "bridge_samples_taken_total": 1} {
		m := one(t, fams, name, run)
		if v := m.GetGauge().GetValue() + m.GetCounter().GetValue(); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if v := one(t, fams, "bridge_scrape_failures_total", map[string]string{"url": "http://x/metrics"}).GetCounter().GetValue(); v != 3 {
		t.Errorf("bridge_scrape_failures_total = %v, want 3", v)
	}
	for _, c := range []struct {
		collector                  string
		dur, ok, failures, refused float64
	}{{"cgroup", 0.0015, 1, 0, 4}, {"gpu", 5, 0, 2, 0}} {
		l := map[string]string{"collector": c.collector, "run_id": "run1"}
		if v := one(t, fams, "bridge_collector_duration_seconds", l).GetGauge().GetValue(); v != c.dur {
			t.Errorf("%s duration %v, want %v", c.collector, v, c.dur)
		}
		if v := one(t, fams, "bridge_collector_success", l).GetGauge().GetValue(); v != c.ok {
			t.Errorf("%s success %v, want %v", c.collector, v, c.ok)
		}
		if v := one(t, fams, "bridge_collector_failures_total", l).GetCounter().GetValue(); v != c.failures {
			t.Errorf("%s failures %v, want %v", c.collector, v, c.failures)
		}
		if v := one(t, fams, "bridge_collector_values_refused_total", l).GetCounter().GetValue(); v != c.refused {
			t.Errorf("%s values refused %v, want %v", c.collector, v, c.refused)
		}
	}
	if n := len(fams["bridge_collector_success"].GetMetric()); n != 2 {
		t.Errorf("%d collectors' success exposed, want 2 (scrape has not run)", n)
	}
}
