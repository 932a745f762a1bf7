package report

import (
	"encoding/json"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/metrics"
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

// The series the report reads, by name (the part after system/<node>/):
// the one place that says which, each from its descriptor. Per-GPU
// templates are matched for every whole GPU (gpu_N_..., not a MIG
// slice's), templates with instances (an InfiniBand port) for every
// instance. docs/multinode.md lists them.
var (
	gpuUtil     = perGPU(metrics.GPUUtilization)
	gpuSMActive = perGPU(metrics.GPUProfSMActive)
	gpuEnergy   = perGPU(metrics.GPUEnergy)
	gpuXid      = perGPU(metrics.GPUXidErrors)
	gpuECC      = perGPU(metrics.GPUECCUncorrected)
	network     = anyOf(metrics.NetnsReceiveRate, metrics.NetnsTransmitRate)
	infiniband  = anyOf(metrics.InfinibandReceiveRate, metrics.InfinibandTransmitRate)
)

var (
	seriesWorkingSet   = metrics.ContainerMemoryWorkingSet.Name
	seriesMemoryLimit  = metrics.ContainerMemoryLimit.Name
	seriesCPU          = metrics.ContainerCPUUsage.Name
	seriesCPULimit     = metrics.ContainerCPULimit.Name
	seriesThrottled    = metrics.ContainerCPUThrottledPeriods.Name
	seriesNodeCPUJoule = metrics.NodeCPUEnergy.Name
)

// perGPU matches template d bound to any whole GPU.
func perGPU(d *metrics.Desc) *regexp.Regexp {
	return regexp.MustCompile(`^gpu_\d+_` + regexp.QuoteMeta(d.Name) + `$`)
}

// anyOf matches the names of ds, each <instance> placeholder (an
// InfiniBand device and port) standing for any one key segment's part.
func anyOf(ds ...*metrics.Desc) *regexp.Regexp {
	var alts []string
	for _, d := range ds {
		alts = append(alts, placeholder.ReplaceAllString(regexp.QuoteMeta(d.Name), `[^/]+`))
	}
	return regexp.MustCompile(`^(?:` + strings.Join(alts, "|") + `)$`)
}

var placeholder = regexp.MustCompile(`<[a-z_]+>`)

// overTime reports whether the report needs a series' every point (a mean
// or a peak); the others are read at their last value, which runs/get
// gives for every series at once: limits, and totals since bridge started
// (energy, Xid events) or since the driver loaded (ECC).
func overTime(name string) bool {
	switch name {
	case seriesWorkingSet, seriesCPU, seriesThrottled:
		return true
	}
	return gpuUtil.MatchString(name) || gpuSMActive.MatchString(name) ||
		network.MatchString(name) || infiniband.MatchString(name)
}

// read reports whether the report uses the series at all.
func read(name string) bool {
	switch name {
	case seriesMemoryLimit, seriesCPULimit, seriesNodeCPUJoule:
		return true
	}
	return overTime(name) || gpuEnergy.MatchString(name) || gpuXid.MatchString(name) || gpuECC.MatchString(name)
}

// Stat is one series of one node over the job.
type Stat struct {
	N          int
	Mean, Peak float64
	Last       float64
}

// Point is one value of a series.
type Point struct {
	Time  time.Time
	Value float64
}

// Fold makes a series' Stat from its points, oldest first. The container's
// CPU is a rate over the time since the previous sample: as in the
// end-of-run table, its peak and mean are over windows of at least
// summary.MinRateWindow (the mean weighted by each window's length), and
// over every point when there is no such window.
func Fold(name string, pts []Point) Stat {
	if len(pts) == 0 {
		return Stat{}
	}
	st := Stat{N: len(pts), Peak: math.Inf(-1), Last: pts[len(pts)-1].Value}
	sum := 0.0
	for _, p := range pts {
		sum += p.Value
		st.Peak = max(st.Peak, p.Value)
	}
	st.Mean = sum / float64(len(pts))
	if name != seriesCPU {
		return st
	}
	peak, weighted, secs := math.Inf(-1), 0.0, 0.0
	for i := 1; i < len(pts); i++ {
		w := pts[i].Time.Sub(pts[i-1].Time)
		if w < summary.MinRateWindow {
			continue
		}
		peak = max(peak, pts[i].Value)
		weighted += pts[i].Value * w.Seconds()
		secs += w.Seconds()
	}
	if secs > 0 {
		st.Peak, st.Mean = peak, weighted/secs
	}
	return st
}

// FromAccumulator is the Stat of every series the report uses, from what
// a node's bridge accumulated over the job: the figures it records at its
// end (TagFigures), so that the report never reads its series.
func FromAccumulator(a *summary.Accumulator) map[string]Stat {
	out := map[string]Stat{}
	a.Each(func(name string, st summary.Stat) {
		if read(name) {
			out[name] = Stat{N: st.N, Mean: st.Mean(), Peak: st.Peak, Last: st.Last}
		}
	})
	if cpu, ok := out[seriesCPU]; ok {
		if peak, mean, ok := a.CPU(); ok {
			cpu.Peak, cpu.Mean = peak, mean
			out[seriesCPU] = cpu
		}
	}
	return out
}

// figuresOf turns a node's series' stats into its figures; samples is the
// node's sample count.
func figuresOf(stats map[string]Stat, samples int) Figures {
	f := Figures{Samples: samples}
	get := func(name string) (Stat, bool) { st, ok := stats[name]; return st, ok && st.N > 0 }
	if st, ok := get(seriesWorkingSet); ok {
		f.PeakWorkingSetMB = num(st.Peak)
	}
	if st, ok := get(seriesMemoryLimit); ok && st.Last > 0 {
		f.MemoryLimitMB = num(st.Last)
	}
	if st, ok := get(seriesCPU); ok {
		f.CPUMeanCores, f.CPUPeakCores = num(st.Mean), num(st.Peak)
	}
	if st, ok := get(seriesCPULimit); ok && st.Last > 0 {
		f.CPULimitCores = num(st.Last)
	}
	if st, ok := get(seriesThrottled); ok {
		f.ThrottledSharePercent = num(st.Mean)
	}
	if st, ok := get(seriesNodeCPUJoule); ok {
		f.NodeCPUEnergyJoules = num(st.Last)
	}
	var util, sm, energy, xid, ecc, net, ib []float64
	for _, name := range sortedKeys(stats) {
		st := stats[name]
		if st.N == 0 {
			continue
		}
		switch {
		case gpuUtil.MatchString(name):
			util = append(util, st.Mean)
		case gpuSMActive.MatchString(name):
			sm = append(sm, st.Mean)
		case gpuEnergy.MatchString(name):
			energy = append(energy, st.Last)
		case gpuXid.MatchString(name):
			xid = append(xid, st.Last)
		case gpuECC.MatchString(name):
			ecc = append(ecc, st.Last)
		case network.MatchString(name):
			net = append(net, st.Mean)
		case infiniband.MatchString(name):
			ib = append(ib, st.Mean)
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
	f := figuresOf(FromAccumulator(a), a.Samples())
	f.keepValid()
	b, err := json.Marshal(f)
	if err != nil {
		return "" // cannot happen (a Float is finite); no tag then, not a panic
	}
	return string(b)
}
