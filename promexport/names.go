package promexport

import (
	"math"
	"strings"

	"github.com/bridge-dev/bridge/metrics"
)

// series is how one of bridge's points is exposed.
type series struct {
	name   string
	help   string
	kind   kind
	bytes  bool              // the point is in megabytes; expose whole bytes
	rate   bool              // the point is in megabytes per second; expose bytes per second
	labels map[string]string // extra labels (gpu, mig)
}

type kind int

const (
	gauge kind = iota
	counter
)

// cadvisor maps bridge's names to cAdvisor's (google/cadvisor
// metrics/prometheus.go) and node-exporter's, so that dashboards built on
// those read bridge unchanged. Everything else is exposed as bridge_<name>.
var cadvisor = map[string]series{
	metrics.ContainerMemoryWorkingSet:         {name: "container_memory_working_set_bytes", help: "Current working set of the container in bytes (usage minus inactive file).", bytes: true},
	metrics.ContainerMemoryUsage:              {name: "container_memory_usage_bytes", help: "Current memory usage of the container in bytes, including all memory regardless of when it was accessed.", bytes: true},
	metrics.ContainerMemoryRSS:                {name: "container_memory_rss", help: "Size of RSS of the container in bytes.", bytes: true},
	metrics.ContainerMemoryCache:              {name: "container_memory_cache", help: "Number of bytes of page cache memory of the container.", bytes: true},
	metrics.ContainerMemoryPeak:               {name: "container_memory_max_usage_bytes", help: "Maximum memory usage of the container recorded in bytes.", bytes: true},
	metrics.ContainerMemoryLimit:              {name: "container_spec_memory_limit_bytes", help: "Memory limit of the container in bytes (the effective one: the smallest among its cgroup and ancestors).", bytes: true},
	metrics.ContainerCPUUsageSecondsTotal:     {name: metrics.ContainerCPUUsageSecondsTotal /* cAdvisor spells it as bridge does */, help: "Cumulative cpu time consumed in seconds.", kind: counter},
	metrics.ContainerCPUPeriodsTotal:          {name: "container_cpu_cfs_periods_total", help: "Number of elapsed enforcement period intervals.", kind: counter},
	metrics.ContainerCPUThrottledPeriodsTotal: {name: "container_cpu_cfs_throttled_periods_total", help: "Number of throttled period intervals.", kind: counter},
	metrics.ContainerCPUThrottledSecondsTotal: {name: "container_cpu_cfs_throttled_seconds_total", help: "Total time duration the container has been throttled.", kind: counter},
	metrics.ContainerOOMKills:                 {name: "container_oom_events_total", help: "Count of out of memory kills in the container (memory.events oom_kill).", kind: counter},

	metrics.NodeMemoryTotal:     {name: "node_memory_MemTotal_bytes", help: "Memory information field MemTotal_bytes.", bytes: true},
	metrics.NodeMemoryAvailable: {name: "node_memory_MemAvailable_bytes", help: "Memory information field MemAvailable_bytes.", bytes: true},
	metrics.NodeLoad1:           {name: "node_load1", help: "1m load average."},
	metrics.NodeLoad5:           {name: "node_load5", help: "5m load average."},
	metrics.NodeLoad15:          {name: "node_load15", help: "15m load average."},
}

// seriesFor returns how point name is exposed. Names cAdvisor has keep
// cAdvisor's name; the rest get a bridge_ prefix, _megabytes become _bytes,
// and gpu_N_ (gpu_N_mig_M_) becomes a gpu (and mig) label.
func seriesFor(name string) series {
	if s, ok := cadvisor[name]; ok {
		return s
	}
	s := series{name: name, help: "bridge's " + name + " (see docs/prometheus.md)."}
	if rest, ok := strings.CutPrefix(name, metrics.GPUNamePrefix); ok {
		if idx, tail, ok := strings.Cut(rest, "_"); ok && metrics.Digits(idx) {
			s.labels = map[string]string{"gpu": idx}
			s.name = "gpu_" + tail
			if r, ok := strings.CutPrefix(tail, "mig_"); ok {
				if m, t, ok := strings.Cut(r, "_"); ok && metrics.Digits(m) {
					s.labels["mig"] = m
					s.name = "gpu_mig_" + t
				}
			}
		}
	}
	switch {
	case strings.HasSuffix(s.name, "_megabytes"):
		s.name, s.bytes = strings.TrimSuffix(s.name, "_megabytes")+"_bytes", true
	case strings.HasSuffix(s.name, "_megabytes_per_second"):
		s.name, s.rate = strings.TrimSuffix(s.name, "_megabytes_per_second")+"_bytes_per_second", true
	}
	s.name = "bridge_" + s.name
	return s
}

// value converts a point's value to the exposed unit. Megabytes become bytes
// exactly: collectors compute MB as bytes/1e6 from an integer byte count, and
// for any count below 2^51 (2 PB) rounding the product back to the nearest
// integer recovers that count, since the two roundings err by at most 2^-52
// relatively, less than half a byte.
func (s series) value(v float64) float64 {
	if s.bytes {
		return math.Round(v * metrics.Megabyte)
	}
	if s.rate {
		return v * metrics.Megabyte
	}
	return v
}
