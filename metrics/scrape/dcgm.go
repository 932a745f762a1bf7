package scrape

import (
	"sort"
	"strconv"
	"strings"

	"github.com/bridge-dev/bridge/metrics"
)

// dcgmSeries maps dcgm-exporter's fields (etc/default-counters.csv) to
// bridge's GPU suffixes and the factor to bridge's unit.
var dcgmSeries = map[string]struct {
	suffix, unit string
	mib          bool // MiB: to bytes, then to bridge's 10^6-byte megabytes as the NVML collector does
}{
	"DCGM_FI_DEV_GPU_UTIL":      {metrics.GPUUtilization, metrics.UnitPercentage, false},
	"DCGM_FI_DEV_FB_USED":       {metrics.GPUMemoryUsed, metrics.UnitMegabytes, true},
	"DCGM_FI_DEV_POWER_USAGE":   {metrics.GPUPowerUsage, metrics.UnitWatts, false},
	"DCGM_FI_DEV_GPU_TEMP":      {metrics.GPUTemperature, metrics.UnitCelsius, false},
	"DCGM_FI_DEV_SM_CLOCK":      {metrics.GPUSMClock, metrics.UnitMHz, false},
	"DCGM_FI_DEV_XID_ERRORS":    {metrics.GPULastXid, metrics.UnitCount, false},
	"DCGM_FI_DEV_MEM_COPY_UTIL": {metrics.GPUMemoryControllerUtilization, metrics.UnitPercentage, false},
}

func isDCGM(name string) bool { return strings.HasPrefix(name, "DCGM_") }

// dcgm maps one dcgm-exporter series. The GPU is the gpu label (its index on
// the node); a MIG slice (GPU_I_ID label) becomes gpu_N_mig_M_.
func (c *Collector) dcgm(name string, labels map[string]string, v float64) (metrics.Point, bool) {
	var suffix, unit string
	switch {
	case dcgmSeries[name].suffix != "":
		s := dcgmSeries[name]
		suffix, unit = s.suffix, s.unit
		if s.mib {
			v = metrics.MB(v * (1 << 20))
		}
	case strings.HasPrefix(name, "DCGM_FI_PROF_"):
		base := strings.ToLower(strings.TrimPrefix(name, "DCGM_FI_PROF_"))
		if b, ok := strings.CutSuffix(base, "_bytes"); ok {
			// PCIe/NVLink counters are bytes per second.
			suffix, unit, v = "prof_"+b+"_"+metrics.UnitMegabytesPerSecond, metrics.UnitMegabytesPerSecond, v/metrics.Megabyte
		} else {
			suffix, unit = "prof_"+base+"_"+metrics.UnitRatio, metrics.UnitRatio
		}
	default:
		return metrics.Point{}, false
	}
	if !c.ours(labels) {
		return metrics.Point{}, false
	}
	idx, ok := c.gpuIndex(labels)
	if !ok {
		return metrics.Point{}, false
	}
	prefix := metrics.GPUPrefix(idx)
	if mig := labels["GPU_I_ID"]; mig != "" {
		// A slice's series never counts as its whole GPU's.
		m, ok := boundedIndex(mig, MaxMIGID)
		if !ok {
			return metrics.Point{}, false
		}
		prefix = metrics.MIGPrefix(idx, m)
	}
	return metrics.Point{Name: prefix + suffix, Value: v, Unit: unit, Scope: metrics.ScopeGPU}, true
}

// gpuIndex is the GPU's index: NVML's for its UUID when NVML works here,
// else dcgm-exporter's gpu label (the node's index), below MaxGPUs.
func (c *Collector) gpuIndex(labels map[string]string) (int, bool) {
	if c.o.GPUIndexes != nil {
		if m := c.o.GPUIndexes(); len(m) > 0 {
			idx, ok := m[labels["UUID"]]
			return idx, ok
		}
	}
	return boundedIndex(labels["gpu"], MaxGPUs)
}

// boundedIndex reads a label that becomes part of a key: digits only, below
// limit, so that an exporter cannot make keys like gpu_1000000_.
func boundedIndex(s string, limit int) (int, bool) {
	if !metrics.Digits(s) || len(s) > 3 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n < limit
}

// ours reports whether a series belongs to this pod: without a known
// identity, or without pod labels on the series, every GPU counts.
func (c *Collector) ours(labels map[string]string) bool {
	if c.o.Pod == "" || c.o.Namespace == "" {
		return true
	}
	pod, hasPod := labels["pod"]
	ns, hasNS := labels["namespace"]
	if !hasPod && !hasNS {
		return true
	}
	return pod == c.o.Pod && ns == c.o.Namespace
}

// passName is a key for a series bridge does not map: prom_<name>, then
// __<label>_<value> per label in name order, characters outside MLflow's key
// alphabet replaced by '_'.
func passName(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("prom_" + name)
	for _, k := range keys {
		b.WriteString("__" + k + "_" + labels[k])
	}
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || r == '.' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') {
			return r
		}
		return '_'
	}, b.String())
}
