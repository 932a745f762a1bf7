package summary

import (
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/stats"
)

// The job's figures, one value each, recorded at its end as run metrics
// (beside the tags, which say the same for people): a runs table sorts and
// charts runs by them. Each is a Desc: its unit gives the range a value
// must be in to be sent (the number rule), as for a series.
var (
	FigurePeakWorkingSet = &metrics.Desc{Name: "container_memory_peak_working_set_megabytes", Unit: metrics.UnitMegabytes, Scope: metrics.ScopeContainer,
		Help: "The job's peak working set, as the end-of-run table's (the kernel's high-water mark at an OOM kill)."}
	FigurePeakUsage = &metrics.Desc{Name: "container_memory_peak_usage_megabytes", Unit: metrics.UnitMegabytes, Scope: metrics.ScopeContainer,
		Help: "The job's peak memory usage, page cache included, as the end-of-run table's."}
	FigurePeakCPU = &metrics.Desc{Name: "container_cpu_peak_cores", Unit: metrics.UnitCores, Scope: metrics.ScopeContainer,
		Help: "The job's peak CPU, over windows of at least a second, as the end-of-run table's."}
	FigureCPUSeconds = &metrics.Desc{Name: "container_cpu_seconds", Unit: metrics.UnitSeconds, Scope: metrics.ScopeContainer,
		Help: "CPU time the job's cgroup used between the first and the last sample."}
	FigurePeakRSS = &metrics.Desc{Name: "process_memory_peak_rss_megabytes", Unit: metrics.UnitMegabytes, Scope: metrics.ScopeProcess,
		Help: "The peak resident memory of the job's process tree."}
	FigurePeakGPUMemory = &metrics.Desc{Name: "gpu_memory_peak_megabytes", Unit: metrics.UnitMegabytes, Scope: metrics.ScopeGPU,
		Help: "The highest memory used on any one of the job's GPUs."}
	FigureGPUHours = &metrics.Desc{Name: "gpu_hours", Unit: metrics.UnitHours, Scope: metrics.ScopeGPU,
		Help: "The job's GPUs (those sampled) times the hours between the first and the last sample."}
	FigureEnergyGPUs = &metrics.Desc{Name: "energy_gpus_joules", Unit: metrics.UnitJoules, Scope: metrics.ScopeGPU,
		Help: "The energy the job's GPUs used while bridge sampled them."}
	FigureEnergyNodeCPU = &metrics.Desc{Name: "energy_node_cpu_joules", Unit: metrics.UnitJoules, Scope: metrics.ScopeNode,
		Help: "The energy the node's CPU packages used while bridge sampled them (RAPL: the node's, not the job's alone)."}
)

// Figures are the end figures' descriptors, in the order they are sent.
func Figures() []*metrics.Desc {
	return []*metrics.Desc{FigurePeakWorkingSet, FigurePeakUsage, FigurePeakCPU, FigureCPUSeconds, FigurePeakRSS,
		FigurePeakGPUMemory, FigureGPUHours, FigureEnergyGPUs, FigureEnergyNodeCPU}
}

// FigurePoints are the job's figures that were measured, each finite and
// in its Desc's range (the number rule): a figure not measured, or
// outside its range, is left out, never sent as 0. The values are the
// end-of-run table's and the tags'.
func (a *Accumulator) FigurePoints() []metrics.Point {
	var pts []metrics.Point
	add := func(d *metrics.Desc, v float64, ok bool) {
		if f, fin := metrics.Finite(v); ok && fin && d.Range().Holds(f.Float64()) {
			pts = append(pts, metrics.At(d, f.Float64()))
		}
	}
	ws := a.PeakWorkingSet()
	add(FigurePeakWorkingSet, ws.Value, ws.Known)
	u := a.PeakUsage()
	add(FigurePeakUsage, u.Value, u.Known)
	if cpu, ok := a.Get(metrics.ContainerCPUUsage); ok {
		// As the table's peak: over windows of at least a second.
		peak, _, _ := cpu.Rate()
		add(FigurePeakCPU, peak, true)
	}
	if c, ok := a.Get(metrics.ContainerCPUUsageSecondsTotal); ok && c.N > 1 {
		add(FigureCPUSeconds, c.Last-c.First, true)
	}
	if rss, ok := a.Get(metrics.ProcessMemoryRSS); ok {
		add(FigurePeakRSS, rss.Peak, true)
	}
	gpus, peak := 0, 0.0
	a.Each(func(_ string, d *metrics.Desc, st stats.Stat) {
		if d != nil && d.Of == metrics.GPUMemoryUsed && d.MIG < 0 {
			gpus++
			peak = max(peak, st.Peak)
		}
	})
	if gpus > 0 {
		add(FigurePeakGPUMemory, peak, true)
		if a.Samples() > 1 {
			add(FigureGPUHours, float64(gpus)*a.Span().Hours(), true)
		}
	}
	e := a.Energy()
	add(FigureEnergyGPUs, e.GPUJoules, e.GPUs > 0)
	add(FigureEnergyNodeCPU, e.CPUJoules, e.CPU)
	return pts
}
