package report

import (
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/bridge-dev/bridge/advice"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/stats"
	"github.com/bridge-dev/bridge/summary"
)

// Figures are what a node's series say about it over the job. A figure
// whose series the node never had is nil (left out of the JSON), never 0.
// Each is a metrics.Float: finite by construction, whatever the arithmetic
// or the tag it came from.
type Figures struct {
	Samples               int            `json:"samples"`
	PeakWorkingSetMB      *metrics.Float `json:"peak_working_set_megabytes,omitempty"`
	MemoryLimitMB         *metrics.Float `json:"memory_limit_megabytes,omitempty"`
	CPUMeanCores          *metrics.Float `json:"cpu_mean_cores,omitempty"`
	CPUPeakCores          *metrics.Float `json:"cpu_peak_cores,omitempty"`
	CPULimitCores         *metrics.Float `json:"cpu_limit_cores,omitempty"`
	ThrottledSharePercent *metrics.Float `json:"throttled_share_percentage,omitempty"`
	GPUUtilizationPercent *metrics.Float `json:"gpu_utilization_percentage,omitempty"`
	GPUSMActiveRatio      *metrics.Float `json:"gpu_sm_active_ratio,omitempty"`
	GPUEnergyJoules       *metrics.Float `json:"gpu_energy_joules,omitempty"`
	NodeCPUEnergyJoules   *metrics.Float `json:"node_cpu_energy_joules,omitempty"`
	NetworkMBps           *metrics.Float `json:"network_megabytes_per_second,omitempty"`
	InfinibandMBps        *metrics.Float `json:"infiniband_megabytes_per_second,omitempty"`
	GPUXidErrors          *metrics.Float `json:"gpu_xid_errors,omitempty"`
	GPUECCUncorrected     *metrics.Float `json:"gpu_ecc_uncorrected_errors,omitempty"`
	// CPUPercentileCores is the CPU use advice.CPUPercentile of the run
	// stayed under; the suggestions are advice.Suggest's, the cost the
	// node's at the prices it was given (a tag only).
	CPUPercentileCores     *metrics.Float `json:"cpu_p90_cores,omitempty"`
	SuggestedMemoryLimitMB *metrics.Float `json:"suggested_memory_limit_megabytes,omitempty"`
	SuggestedCPUCores      *metrics.Float `json:"suggested_cpu_cores,omitempty"`
	Cost                   *metrics.Float `json:"cost,omitempty"`
}

// keepValid leaves out (nil) each figure outside the range of the series
// it is made from, as the Sampler leaves out such a value: a node's
// figures tag or series that says 1e306 MB or 9.2e18 % holds no figure.
// It returns each figure left out, "name=value".
func (f *Figures) keepValid() (refused []string) {
	for _, x := range []struct {
		v **metrics.Float
		d *metrics.Desc
	}{
		{&f.PeakWorkingSetMB, metrics.ContainerMemoryWorkingSet}, {&f.MemoryLimitMB, metrics.ContainerMemoryLimit},
		{&f.CPUMeanCores, metrics.ContainerCPUUsage}, {&f.CPUPeakCores, metrics.ContainerCPUUsage}, {&f.CPULimitCores, metrics.ContainerCPULimit},
		{&f.ThrottledSharePercent, metrics.ContainerCPUThrottledPeriods}, {&f.GPUUtilizationPercent, metrics.GPUUtilization},
		{&f.GPUSMActiveRatio, metrics.GPUProfSMActive}, {&f.GPUEnergyJoules, metrics.GPUEnergy},
		{&f.NodeCPUEnergyJoules, metrics.NodeCPUEnergy}, {&f.NetworkMBps, metrics.NetnsReceiveRate},
		{&f.InfinibandMBps, metrics.InfinibandReceiveRate}, {&f.GPUXidErrors, metrics.GPUXidErrors},
		{&f.GPUECCUncorrected, metrics.GPUECCUncorrected},
		{&f.CPUPercentileCores, metrics.ContainerCPUUsage}, {&f.SuggestedMemoryLimitMB, metrics.ContainerMemoryLimit},
		{&f.SuggestedCPUCores, metrics.ContainerCPULimit}, {&f.Cost, costDesc},
	} {
		if *x.v != nil && !x.d.Range().Holds((*x.v).Float64()) {
			refused = append(refused, f.jsonName(x.v)+"="+strconv.FormatFloat((*x.v).Float64(), 'g', -1, 64))
			*x.v = nil
		}
	}
	return refused
}

// jsonName is the JSON name of f's field at p.
func (f *Figures) jsonName(p **metrics.Float) string {
	v := reflect.ValueOf(f).Elem()
	for i := range v.NumField() {
		if v.Field(i).Addr().Interface() == any(p) {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return "?"
}

// The series the report reads: the one place that says which, each by its
// descriptor. Per-GPU templates are read for every whole GPU (not a MIG
// slice's), templates with instances (an InfiniBand port) for every
// instance. docs/multinode.md lists them.
var (
	// overTime are read at every point (a mean or a peak).
	overTime = []*metrics.Desc{
		metrics.ContainerMemoryWorkingSet, metrics.ContainerCPUUsage, metrics.ContainerCPUThrottledPeriods,
		metrics.GPUUtilization, metrics.GPUProfSMActive, metrics.NetnsReceiveRate, metrics.NetnsTransmitRate,
		metrics.InfinibandReceiveRate, metrics.InfinibandTransmitRate,
	}
	// atLast are read at their last value, which runs/get gives for every
	// series at once: limits, and totals since bridge started (energy, Xid
	// events) or since the driver loaded (ECC).
	atLast = []*metrics.Desc{
		metrics.ContainerMemoryLimit, metrics.ContainerCPULimit, metrics.NodeCPUEnergy,
		metrics.GPUEnergy, metrics.GPUXidErrors, metrics.GPUECCUncorrected,
	}
	// series finds a series the report reads from its key (the part after
	// system/<node>/).
	series = metrics.NewIndex(append(slices.Clone(overTime), atLast...)...)
)

// template is the template d was bound from (a per-GPU or per-instance
// one), or d.
func template(d *metrics.Desc) *metrics.Desc {
	if d.Of != nil {
		return d.Of
	}
	return d
}

// reads reports whether the report uses series d at all.
func reads(d *metrics.Desc) bool {
	if d.Of != nil && d.Of.PerGPU && d.MIG >= 0 {
		return false // a MIG slice's: part of its GPU's
	}
	t := template(d)
	return slices.Contains(overTime, t) || slices.Contains(atLast, t)
}

// readsOverTime reports whether the report needs every point of series d.
func readsOverTime(d *metrics.Desc) bool { return reads(d) && slices.Contains(overTime, template(d)) }

// Point is one value of a series.
type Point = stats.Point

// read is one series a node's figures are made of, its Stat, and for the
// container's CPU its distribution (nil where not read).
type read struct {
	name string
	d    *metrics.Desc
	st   stats.Stat
	dist *stats.Dist
}

// fromAccumulator is every series the report uses, from what a node's
// bridge accumulated over the job: the figures it records at its end
// (TagFigures), so that the report never reads its series. A series known
// by its name only is found by its key, as the tracker's are.
func fromAccumulator(a *summary.Accumulator) []read {
	var out []read
	a.Each(func(name string, d *metrics.Desc, st stats.Stat) {
		if d == nil {
			d, _ = series.Lookup(name)
		}
		if d != nil && reads(d) {
			out = append(out, read{name, d, st, a.Dist(d)})
		}
	})
	return out
}

// figuresOf turns a node's series into its figures; samples is the node's
// sample count.
func figuresOf(rs []read, samples int) Figures {
	slices.SortFunc(rs, func(a, b read) int { return strings.Compare(a.name, b.name) })
	f := Figures{Samples: samples}
	var util, sm, energy, xid, ecc, net, ib []float64
	for _, r := range rs {
		st := r.st
		if st.N == 0 || !reads(r.d) {
			continue
		}
		switch template(r.d) {
		case metrics.ContainerMemoryWorkingSet:
			f.PeakWorkingSetMB = num(st.Peak)
		case metrics.ContainerMemoryLimit:
			if st.Last > 0 {
				f.MemoryLimitMB = num(st.Last)
			}
		case metrics.ContainerCPUUsage:
			// As in the end-of-run table: over steady windows.
			peak, mean, _ := st.Rate()
			f.CPUMeanCores, f.CPUPeakCores = num(mean), num(peak)
			if p, ok := r.dist.Percentile(advice.CPUPercentile); ok {
				f.CPUPercentileCores = num(p)
			}
		case metrics.ContainerCPULimit:
			if st.Last > 0 {
				f.CPULimitCores = num(st.Last)
			}
		case metrics.ContainerCPUThrottledPeriods:
			f.ThrottledSharePercent = num(st.Mean())
		case metrics.NodeCPUEnergy:
			f.NodeCPUEnergyJoules = num(st.Last)
		case metrics.GPUUtilization:
			util = append(util, st.Mean())
		case metrics.GPUProfSMActive:
			sm = append(sm, st.Mean())
		case metrics.GPUEnergy:
			energy = append(energy, st.Last)
		case metrics.GPUXidErrors:
			xid = append(xid, st.Last)
		case metrics.GPUECCUncorrected:
			ecc = append(ecc, st.Last)
		case metrics.NetnsReceiveRate, metrics.NetnsTransmitRate:
			net = append(net, st.Mean())
		case metrics.InfinibandReceiveRate, metrics.InfinibandTransmitRate:
			ib = append(ib, st.Mean())
		}
	}
	f.GPUUtilizationPercent = mean(util)
	f.GPUSMActiveRatio = mean(sm)
	f.GPUEnergyJoules = total(energy)
	f.GPUXidErrors = total(xid)
	f.GPUECCUncorrected = total(ecc)
	f.NetworkMBps = total(net)
	f.InfinibandMBps = total(ib)
	return f
}

// num rounds v for a report: enough digits for every unit bridge uses. It
// is nil for a value that is not finite, and never overflows: a magnitude
// of 1e15 or more has no thousandths to round.
func num(v float64) *metrics.Float {
	if math.Abs(v) < 1e15 {
		v = math.Round(v*1000) / 1000
	}
	return metrics.FloatOf(v)
}

func mean(vs []float64) *metrics.Float {
	if len(vs) == 0 {
		return nil
	}
	s := 0.0
	for _, v := range vs {
		s += v
	}
	return num(s / float64(len(vs)))
}

func total(vs []float64) *metrics.Float {
	if len(vs) == 0 {
		return nil
	}
	s := 0.0
	for _, v := range vs {
		s += v
	}
	return num(s)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// FiguresTag is the value of TagFigures for a node whose bridge
// accumulated a: its figures, as JSON (figures out of range left out).
func FiguresTag(a *summary.Accumulator) string {
	f := figuresOf(fromAccumulator(a), a.Samples())
	f.keepValid()
	b, err := json.Marshal(f)
	if err != nil {
		return "" // cannot happen (a Float is finite); no tag then, not a panic
	}
	return string(b)
}
