package scrape

import (
	"sort"
	"strconv"
	"strings"

	"github.com/bridge-dev/bridge/metrics"
)

// dcgmSeries maps dcgm-exporter's fields (etc/default-counters.csv) to
// bridge's per-GPU templates.
var dcgmSeries = map[string]struct {
	tmpl *metrics.Desc
	mib  bool // MiB: to bytes, then to bridge's 10^6-byte megabytes as the NVML collector does
}{
	"DCGM_FI_DEV_GPU_UTIL":      {metrics.GPUUtilization, false},
	"DCGM_FI_DEV_FB_USED":       {metrics.GPUMemoryUsed, true},
	"DCGM_FI_DEV_POWER_USAGE":   {metrics.GPUPowerUsage, false},
	"DCGM_FI_DEV_GPU_TEMP":      {metrics.GPUTemperature, false},
	"DCGM_FI_DEV_SM_CLOCK":      {metrics.GPUSMClock, false},
	"DCGM_FI_DEV_XID_ERRORS":    {metrics.GPULastXid, false},
	"DCGM_FI_DEV_MEM_COPY_UTIL": {metrics.GPUMemoryControllerUtilization, false},
}

func isDCGM(name string) bool { return strings.HasPrefix(name, "DCGM_") }

// series is what a scraped series maps to: its key, and what its
// descriptor is made from the first time the URL adds the key.
type series struct {
	key      string
	tmpl     *metrics.Desc // a static per-GPU template, or nil
	prof     string        // else a profiling field (tmpl nil, gpu set): DCGMProfiling(prof, rate)
	rate     bool
	gpu, mig int // the binding of a per-GPU series (mig -1: the whole GPU); gpu -1: passed through
}

// desc makes s's descriptor.
func (s series) desc() *metrics.Desc {
	tmpl := s.tmpl
	switch {
	case s.gpu < 0:
		return metrics.Passthrough(s.key)
	case tmpl == nil:
		tmpl = metrics.DCGMProfiling(s.prof, s.rate)
	}
	if s.mig < 0 {
		return tmpl.ForGPU(s.gpu)
	}
	return tmpl.ForMIG(s.gpu, s.mig)
}

// dcgm maps one dcgm-exporter series and converts its value to bridge's
// unit. The GPU is the gpu label (its index on the node); a MIG slice
// (GPU_I_ID label) becomes gpu_N_mig_M_.
func (c *Collector) dcgm(name string, labels map[string]string, v float64) (series, float64, bool) {
	s := series{mig: -1}
	var suffix string
	switch {
	case dcgmSeries[name].tmpl != nil:
		f := dcgmSeries[name]
		s.tmpl, suffix = f.tmpl, f.tmpl.Name
		if f.mib {
			v = metrics.MB(v * (1 << 20))
		}
	case strings.HasPrefix(name, "DCGM_FI_PROF_"):
		base := strings.ToLower(strings.TrimPrefix(name, "DCGM_FI_PROF_"))
		// PCIe/NVLink counters (_BYTES) are bytes per second.
		s.prof, s.rate = strings.CutSuffix(base, "_bytes")
		if s.rate {
			v /= metrics.Megabyte
		}
		suffix = metrics.DCGMProfilingName(s.prof, s.rate)
	default:
		return s, 0, false
	}
	if !c.ours(labels) {
		return s, 0, false
	}
	var ok bool
	if s.gpu, ok = c.gpuIndex(labels); !ok {
		return s, 0, false
	}
	if mig := labels["GPU_I_ID"]; mig != "" {
		// A slice's series never counts as its whole GPU's.
		if s.mig, ok = boundedIndex(mig, maxMIGID); !ok {
			return s, 0, false
		}
	}
	s.key = metrics.GPUName(s.gpu, s.mig, suffix)
	return s, v, true
}

// gpuIndex is the GPU's index: NVML's for its UUID when NVML works here,
// else dcgm-exporter's gpu label (the node's index), below maxGPUs.
func (c *Collector) gpuIndex(labels map[string]string) (int, bool) {
	if c.o.GPUIndexes != nil {
		if m := c.o.GPUIndexes(); len(m) > 0 {
			idx, ok := m[labels["UUID"]]
			return idx, ok
		}
	}
	return boundedIndex(labels["gpu"], maxGPUs)
}

// boundedIndex reads a label that becomes part of a key: digits only, below
// limit, so that an exporter cannot make keys like gpu_1000000_.
func boundedIndex(s string, limit int) (int, bool) {
	if !digits(s) || len(s) > 3 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n < limit
}

// digits reports whether s is a non-empty run of ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
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
