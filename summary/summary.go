// Package summary accumulates what bridge measured during a job and renders
// the end-of-run table: peak working set against the limit, peak CPU against
// the limit, throttled share, OOM events, the energy the GPUs and the node's
// CPU packages used, and the exit status.
package summary

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// Stat follows one metric over the job.
type Stat struct {
	First, Last, Peak float64
	PeakAt            time.Time
	Sum               float64
	N                 int
}

// Mean is the average of the values seen.
func (s Stat) Mean() float64 {
	if s.N == 0 {
		return 0
	}
	return s.Sum / float64(s.N)
}

// MinRateWindow is the shortest window over which the table takes the peak
// of a rate (CPU cores): a rate over a shorter one, such as the sample taken
// as the child exits tens of milliseconds after the one before, is mostly
// the counter's lag (the kernel charges CPU time at ticks), not the job.
const MinRateWindow = time.Second

// Accumulator keeps a Stat per series. Not safe for concurrent use.
type Accumulator struct {
	stats   map[string]*stat // by name
	samples int
	first   time.Time
	last    metrics.Sample
	// cpuPeak is the peak of container CPU over windows of at least
	// MinRateWindow (cpuPeakOK: one was seen); cpuCoreSecs over cpuSecs
	// is its mean over the same windows, so that the mean shown beside
	// the peak never exceeds it.
	cpuPeak     float64
	cpuPeakOK   bool
	cpuCoreSecs float64
	cpuSecs     float64
	// recent keeps the last few samples for forensics (values near the end).
	recent []metrics.Sample
}

// stat is a Stat and the series it follows.
type stat struct {
	Stat
	desc *metrics.Desc // nil for a point known by name only
}

// New returns an empty Accumulator.
func New() *Accumulator { return &Accumulator{stats: map[string]*stat{}} }

// Add takes one sample into account.
func (a *Accumulator) Add(s metrics.Sample) {
	if a.samples == 0 {
		a.first = s.Time
	}
	// The collector's rate is over the time since its previous reading:
	// at least this, the time since the previous sample.
	window := s.Time.Sub(a.last.Time)
	steady := a.samples > 0 && window >= MinRateWindow
	a.samples++
	a.last = s
	a.recent = append(a.recent, s)
	if len(a.recent) > 10 {
		a.recent = a.recent[1:]
	}
	for _, p := range s.Points {
		st := a.stats[p.Name()]
		if st == nil {
			st = &stat{Stat: Stat{First: p.Value, Peak: p.Value, PeakAt: s.Time}, desc: p.Desc}
			a.stats[p.Name()] = st
		}
		st.Last = p.Value
		st.Sum += p.Value
		st.N++
		if p.Value > st.Peak {
			st.Peak, st.PeakAt = p.Value, s.Time
		}
		if p.Name() == metrics.ContainerCPUUsage.Name && steady {
			if !a.cpuPeakOK || p.Value > a.cpuPeak {
				a.cpuPeak, a.cpuPeakOK = p.Value, true
			}
			a.cpuCoreSecs += p.Value * window.Seconds()
			a.cpuSecs += window.Seconds()
		}
	}
}

// Get returns the Stat of series d and whether it was seen.
func (a *Accumulator) Get(d *metrics.Desc) (Stat, bool) {
	st, ok := a.stats[d.Name]
	if !ok {
		return Stat{}, false
	}
	return st.Stat, true
}

// Samples is how many samples were added.
func (a *Accumulator) Samples() int { return a.samples }

// Last is the last sample added.
func (a *Accumulator) Last() metrics.Sample { return a.last }

// Recent returns up to the last 10 samples, oldest first.
func (a *Accumulator) Recent() []metrics.Sample { return append([]metrics.Sample(nil), a.recent...) }

// Row is one line of the table.
type Row struct{ What, Value string }

// Rows renders the measured part of the table; callers append their own rows
// (exit status, tracker state, forensics).
func (a *Accumulator) Rows() []Row {
	var rows []Row
	rows = append(rows, Row{"samples", fmt.Sprintf("%d", a.samples)})
	if ws, ok := a.Get(metrics.ContainerMemoryWorkingSet); ok {
		v := fmt.Sprintf("%.1f MB", ws.Peak)
		if lim, ok := a.Get(metrics.ContainerMemoryLimit); ok && lim.Last > 0 {
			v += fmt.Sprintf(" of limit %.1f MB (%.1f%%)", lim.Last, 100*ws.Peak/lim.Last)
		} else {
			v += " (no memory limit)"
		}
		rows = append(rows, Row{"peak working set", v})
	}
	if cpu, ok := a.Get(metrics.ContainerCPUUsage); ok {
		// A job too short, or sampled too fast, for a steady window: every
		// sample's rate.
		peak, mean := cpu.Peak, cpu.Mean()
		if a.cpuPeakOK {
			peak, mean = a.cpuPeak, a.cpuCoreSecs/a.cpuSecs
		}
		v := fmt.Sprintf("%.2f cores (mean %.2f)", peak, mean)
		_, split := a.Get(metrics.ContainerCPUUsageLimitSplit)
		if lim, ok := a.Get(metrics.ContainerCPULimit); ok && lim.Last > 0 && split {
			v += fmt.Sprintf("; the limit, %.2f cores, is another cgroup's (cpu and cpuacct hierarchies differ)", lim.Last)
		} else if ok && lim.Last > 0 {
			v += fmt.Sprintf(" of limit %.2f cores", lim.Last)
		} else {
			v += " (no CPU limit)"
		}
		rows = append(rows, Row{"peak container CPU", v})
	}
	if th, ok := a.Get(metrics.ContainerCPUThrottledPeriods); ok {
		v := fmt.Sprintf("%.1f%% of periods (mean), peak %.1f%%", th.Mean(), th.Peak)
		if ts, ok := a.Get(metrics.ContainerCPUThrottledSecondsTotal); ok {
			v += fmt.Sprintf(", %.2f s throttled", ts.Last-ts.First)
		}
		rows = append(rows, Row{"CPU throttled", v})
	}
	if k, ok := a.Get(metrics.ContainerOOMKills); ok {
		v := fmt.Sprintf("%.0f during the job", k.Last-k.First)
		if e, ok := a.Get(metrics.ContainerOOMEvents); ok {
			v += fmt.Sprintf(" (OOM events %.0f)", e.Last-e.First)
		}
		rows = append(rows, Row{"OOM kills", v})
	}
	if rss, ok := a.Get(metrics.ProcessMemoryRSS); ok {
		rows = append(rows, Row{"peak process-tree RSS", fmt.Sprintf("%.1f MB", rss.Peak)})
	}
	if psi, ok := a.Get(metrics.ContainerPressureMemorySome); ok {
		rows = append(rows, Row{"peak memory pressure", fmt.Sprintf("some avg10 %.1f%%", psi.Peak)})
	}
	var gpus []string
	for _, st := range a.stats {
		if d := st.desc; d != nil && d.Of == metrics.GPUMemoryUsed {
			where := fmt.Sprintf("gpu_%d", d.GPU)
			if d.MIG >= 0 {
				where += fmt.Sprintf("_mig_%d", d.MIG)
			}
			gpus = append(gpus, fmt.Sprintf("%s peak %.0f MB", where, st.Peak))
		}
	}
	sort.Strings(gpus)
	if len(gpus) > 0 {
		rows = append(rows, Row{"GPU memory", strings.Join(gpus, ", ")})
	}
	e := a.Energy()
	rows = append(rows, Row{"energy", "GPUs " + joules(e.GPUJoules, e.GPUs > 0) + "; CPU packages (node) " + joules(e.CPUJoules, e.CPU)})
	return rows
}

// Energy is what the job's hardware used while bridge sampled it.
type Energy struct {
	GPUJoules float64 // the sum over GPUs of the energy each used since bridge started
	GPUs      int     // GPUs whose energy was sampled; 0: GPU energy not sampled
	CPUJoules float64 // the node's CPU packages since bridge started (RAPL: node scope)
	CPU       bool    // CPUJoules was sampled
}

// Tag keys of the job's energy, set at the end of a run (Session.Finish).
const (
	TagEnergyGPUs    = "bridge.energy_gpus_joules"
	TagEnergyNodeCPU = "bridge.energy_node_cpu_joules"
)

// NotSampled is the value of a figure bridge never sampled.
const NotSampled = "not sampled"

// Energy adds up the job's energy from the last value of each energy
// series: every whole-GPU series in joules (each a GPU's energy since bridge
// started; MIG slices are part of their GPU), and the node's CPU packages.
func (a *Accumulator) Energy() Energy {
	var e Energy
	for _, st := range a.stats {
		if d := st.desc; d != nil && d.Of != nil && d.Of.PerGPU && d.MIG < 0 && d.Unit == metrics.UnitJoules {
			e.GPUJoules += st.Last
			e.GPUs++
		}
	}
	if cpu, ok := a.Get(metrics.NodeCPUEnergy); ok {
		e.CPUJoules, e.CPU = cpu.Last, true
	}
	return e
}

// EnergyTags are the run tags of the job's energy: joules, or NotSampled.
func (a *Accumulator) EnergyTags() map[string]string {
	e := a.Energy()
	tag := func(v float64, ok bool) string {
		if !ok {
			return NotSampled
		}
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return map[string]string{TagEnergyGPUs: tag(e.GPUJoules, e.GPUs > 0), TagEnergyNodeCPU: tag(e.CPUJoules, e.CPU)}
}

// joules renders an energy for the table: J and Wh, or NotSampled.
func joules(v float64, ok bool) string {
	if !ok {
		return NotSampled
	}
	return fmt.Sprintf("%.1f J (%.3f Wh)", v, v/3600)
}

// Write renders rows as an aligned two-column table under a title.
func Write(w io.Writer, title string, rows []Row) {
	fmt.Fprintf(w, "\n%s\n", title)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "  %s\t%s\n", r.What, r.Value)
	}
	tw.Flush()
}

// Each calls f with the name and Stat of every series seen, in no
// particular order. The end of a job's node reads its figures for the
// job's report through it (package report).
func (a *Accumulator) Each(f func(name string, st Stat)) {
	for name, st := range a.stats {
		f(name, st.Stat)
	}
}

// CPU is the container CPU's peak and mean over windows of at least
// MinRateWindow, as the table shows them; ok is false when no such window
// was seen (a job too short, or sampled too fast).
func (a *Accumulator) CPU() (peak, mean float64, ok bool) {
	if !a.cpuPeakOK || a.cpuSecs <= 0 {
		return 0, 0, false
	}
	return a.cpuPeak, a.cpuCoreSecs / a.cpuSecs, true
}
