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

	"github.com/bridge-dev/bridge/internal/printable"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/stats"
)

// NotSampled is what the table and the tags say of a figure whose series
// the job's collectors produce but no sample had (the job ended before a
// reading of it): never 0, which would read as a measurement.
const NotSampled = "not sampled"

// Sources of a figure.
const (
	// SourceSampled: the highest (or mean) of the values in the samples; a
	// peak between two samples is not seen.
	SourceSampled = "sampled"
	// SourceKernelPeak: the kernel's high-water mark of the cgroup's memory
	// usage (page cache included), which no sampling can miss.
	SourceKernelPeak = "kernel high-water mark"
)

// Options say what the samples alone do not tell the accumulator.
type Options struct {
	// Expected are the series the job's collectors are on for: a row or tag
	// of one that no sample had says NotSampled. Without it a figure that
	// was not sampled is left out.
	Expected []*metrics.Desc
	// PeakFile names the kernel file that ContainerMemoryPeak is read from
	// (memory.max_usage_in_bytes on cgroup v1, memory.peak on v2), for the
	// figures' sources.
	PeakFile string
	// Notes are rows the table shows after the sample count: why a
	// scope's series are not what their names say (the container's, where
	// bridge's cgroups are the host's root cgroups: metrics.Partial).
	Notes []Row
	// PeakStart is the kernel's memory high-water mark before the job
	// (metrics.PeakKeeper); nil when it was not read. The figures take the
	// mark only where it is the job's (KernelPeak).
	PeakStart *PeakStart
}

// PeakStart is the kernel's memory high-water mark before the job.
type PeakStart struct {
	MB float64 // the mark before the job (with Reset, before the reset)
	// Reset: the mark was reset at the start for the descriptor bridge
	// reads it through (cgroup v2, Linux 6.12 and later): the mark in the
	// samples counts from then.
	Reset bool
}

// Figure is one peak of the table and its tag: the value, whether it was
// measured, and where it comes from.
type Figure struct {
	Value float64
	Known bool // measured
	// Expected: a series of the job's collectors; !Known then reads
	// NotSampled rather than being left out.
	Expected bool
	// Source is SourceSampled or SourceKernelPeak, with the file and what
	// the value counts, e.g. "kernel high-water mark memory.peak at the
	// OOM kill".
	Source string
	// SharePercent is Value against the memory limit; ShareKnown is false
	// without a limit.
	SharePercent float64
	ShareKnown   bool
}

// Accumulator keeps a Stat per series of the job's samples (stats.Set),
// and the last few samples, for the table, forensics and the node's
// figures. Not safe for concurrent use.
type Accumulator struct {
	stats.Set
	opt      Options
	expected map[string]bool // by name
	// recent keeps the last few samples for forensics (values near the end).
	recent []metrics.Sample
}

// New returns an empty Accumulator that knows nothing of the job's
// collectors (NewWith).
func New() *Accumulator { return NewWith(Options{}) }

// NewWith returns an empty Accumulator for a job whose collectors and
// cgroup o describes.
func NewWith(o Options) *Accumulator {
	a := &Accumulator{opt: o, expected: map[string]bool{}}
	a.KeepDist(metrics.ContainerCPUUsage, stats.CPUDist) // for the CPU request it suggests (package advice)
	for _, d := range o.Expected {
		a.expected[d.Name] = true
	}
	return a
}

// Expects reports whether d is a series of the job's collectors (Options).
func (a *Accumulator) Expects(d *metrics.Desc) bool { return a.expected[d.Name] }

// Add takes one sample into account.
func (a *Accumulator) Add(s metrics.Sample) {
	a.Set.Add(s)
	a.recent = append(a.recent, s)
	if len(a.recent) > 10 {
		a.recent = a.recent[1:]
	}
}

// Recent returns up to the last 10 samples, oldest first.
func (a *Accumulator) Recent() []metrics.Sample { return append([]metrics.Sample(nil), a.recent...) }

// AtLimit is the share of the memory limit at which the kernel's
// high-water mark counts as having reached it (page rounding, and a
// limit read a moment apart).
const AtLimit = 0.99

// memLimit is the container's memory limit in the last sample that had one;
// 0 without one.
func (a *Accumulator) memLimit() float64 {
	if lim, ok := a.Get(metrics.ContainerMemoryLimit); ok && lim.Last > 0 {
		return lim.Last
	}
	return 0
}

// oomKilled reports that the cgroup's OOM-kill counter rose during the
// job, at this cgroup's own limit where the kernel says whose limit it was
// (v2's oom counter rises only in the cgroup that reached its limit, and
// its ancestors; an ancestor's limit can kill here with this cgroup below
// its own).
func (a *Accumulator) oomKilled() bool {
	k, ok := a.Get(metrics.ContainerOOMKills)
	if !ok || k.Last <= k.First {
		return false
	}
	own, ok := a.Get(metrics.ContainerOOMEvents)
	return !ok || own.Last > own.First
}

// peakFile is the kernel file the high-water mark was read from.
func (a *Accumulator) peakFile() string {
	if a.opt.PeakFile != "" {
		return a.opt.PeakFile
	}
	return "memory.peak or memory.max_usage_in_bytes"
}

// KernelPeak is the kernel's memory high-water mark over the samples when
// it is this job's: reset for bridge at the start, or raised during the
// job above the mark before it, or reached by the job's sampled usage.
// Otherwise ok is false, and why says why when the samples had a mark: it
// predates the job (another job's, in a cgroup jobs share), or it was not
// read before the job, so that no one can tell. Never another job's peak
// as this one's.
func (a *Accumulator) KernelPeak() (st stats.Stat, ok bool, why string) {
	k, ok := a.Get(metrics.ContainerMemoryPeak)
	if !ok {
		return stats.Stat{}, false, ""
	}
	start := a.opt.PeakStart
	switch {
	case start == nil:
		return stats.Stat{}, false, fmt.Sprintf("the kernel's high-water mark %s (%.1f MB) was not read before the job, so it may be an earlier job's", a.peakFile(), k.Peak)
	case start.Reset, k.Peak > start.MB:
		return k, true, ""
	}
	// The mark did not rise during the job: the job's own, only if its
	// usage reached it.
	if u, ok := a.Get(metrics.ContainerMemoryUsage); ok && u.Peak >= start.MB {
		return k, true, ""
	}
	return stats.Stat{}, false, fmt.Sprintf("the kernel's high-water mark %s, %.1f MB, predates the job", a.peakFile(), start.MB)
}

// PeakWorkingSet is the container's highest working set: the highest
// sampled, except after an OOM kill in the cgroup with the kernel's usage
// high-water mark, the job's (KernelPeak), at the limit. The kernel kills
// only when it cannot reclaim the usage below the limit, so the working
// set reached the limit then, however little the samples around it saw (a
// job that allocates past its limit within one interval dies between two
// samples).
func (a *Accumulator) PeakWorkingSet() Figure {
	f := Figure{Expected: a.Expects(metrics.ContainerMemoryWorkingSet)}
	ws, ok := a.Get(metrics.ContainerMemoryWorkingSet)
	lim := a.memLimit()
	if k, kok, _ := a.KernelPeak(); kok && lim > 0 && k.Peak >= AtLimit*lim && a.oomKilled() && (!ok || k.Peak > ws.Peak) {
		v := min(k.Peak, lim)
		return Figure{Value: v, Known: true, Expected: true, Source: SourceKernelPeak + " " + a.peakFile() + " at the OOM kill",
			SharePercent: 100 * v / lim, ShareKnown: true}
	}
	if !ok {
		return f
	}
	f.Value, f.Known, f.Source = ws.Peak, true, SourceSampled
	if lim > 0 {
		f.SharePercent, f.ShareKnown = 100*ws.Peak/lim, true
		// The per-sample share was computed against the limit of its
		// time: preferred when the limit was resized during the job.
		if pct, ok := a.Get(metrics.ContainerMemoryWorkingSetPercent); ok {
			f.SharePercent = pct.Peak
		}
	}
	return f
}

// PeakUsage is the container's highest memory usage (page cache
// included): the kernel's high-water mark where the kernel keeps one
// (cgroup v1, v2 from Linux 5.19) and it is the job's (KernelPeak), else
// the highest sampled, whose source then says why not the kernel's.
func (a *Accumulator) PeakUsage() Figure {
	f := Figure{Expected: a.Expects(metrics.ContainerMemoryUsage)}
	k, kok, why := a.KernelPeak()
	if kok {
		f.Value, f.Known, f.Source = k.Peak, true, SourceKernelPeak+" "+a.peakFile()
	} else if u, ok := a.Get(metrics.ContainerMemoryUsage); ok {
		f.Value, f.Known, f.Source = u.Peak, true, SourceSampled
		if why != "" {
			f.Source += "; " + why
		}
	} else {
		return f
	}
	if lim := a.memLimit(); lim > 0 {
		f.SharePercent, f.ShareKnown = 100*f.Value/lim, true
	}
	return f
}

// Row is one line of the table.
type Row struct{ What, Value string }

// memoryRow says a memory figure: its value (what it counts: of), its
// share of the limit, and where it comes from (then extra).
func (a *Accumulator) memoryRow(f Figure, of, extra string) string {
	v := fmt.Sprintf("%.1f MB%s", f.Value, of)
	if f.ShareKnown {
		v += fmt.Sprintf(", %.1f%% of the %.1f MB limit", f.SharePercent, a.memLimit())
	}
	v += ": " + sourceText(f.Source) + extra
	if !f.ShareKnown {
		v += "; no memory limit"
	}
	return v
}

// sourceText says a figure's source in a sentence: "the highest sampled
// (why not the kernel's mark)", "the kernel high-water mark FILE".
func sourceText(src string) string {
	if why, ok := strings.CutPrefix(src, SourceSampled+"; "); ok {
		return "the highest sampled (" + why + ")"
	}
	if src == SourceSampled {
		return "the highest sampled"
	}
	return "the " + src
}

// Rows renders the measured part of the table; callers add their own rows
// (how the job ended, where the samples went). A figure whose series the
// job's collectors produce that no sample had is named in one "not
// sampled" row; one whose series no collector produces here has no row.
func (a *Accumulator) Rows() []Row {
	var rows, notSampled []Row
	unsampled := func(what string) { notSampled = append(notSampled, Row{What: what}) }
	rows = append(rows, a.opt.Notes...)
	if f := a.PeakWorkingSet(); f.Known {
		extra := ""
		if ws, ok := a.Get(metrics.ContainerMemoryWorkingSet); ok && f.Source != SourceSampled {
			extra = fmt.Sprintf(" (the samples saw at most %.1f MB)", ws.Peak)
		}
		rows = append(rows, Row{"peak working set", a.memoryRow(f, "", extra)})
	} else if f.Expected {
		unsampled("peak working set")
	}
	if f := a.PeakUsage(); f.Known {
		rows = append(rows, Row{"peak usage", a.memoryRow(f, " with the page cache", "")})
	} else if f.Expected {
		unsampled("peak usage")
	}
	if cpu, ok := a.Get(metrics.ContainerCPUUsage); ok {
		peak, mean, _ := cpu.Rate()
		v := fmt.Sprintf("%.2f cores at the peak, %.2f on average", peak, mean)
		_, split := a.Get(metrics.ContainerCPUUsageLimitSplit)
		if lim, ok := a.Get(metrics.ContainerCPULimit); ok && lim.Last > 0 && split {
			v += fmt.Sprintf("; the %.2f-core limit is another cgroup's (the cpu and cpuacct hierarchies differ)", lim.Last)
		} else if ok && lim.Last > 0 {
			v += fmt.Sprintf(", of a %.2f-core limit", lim.Last)
		} else {
			v += "; no CPU limit"
		}
		rows = append(rows, Row{"peak container CPU", v})
	} else if a.Expects(metrics.ContainerCPUUsage) {
		unsampled("peak container CPU")
	}
	if th, ok := a.Get(metrics.ContainerCPUThrottledPeriods); ok {
		v := fmt.Sprintf("in %.1f%% of the CPU periods on average, %.1f%% at the peak", th.Mean(), th.Peak)
		if ts, ok := a.Get(metrics.ContainerCPUThrottledSecondsTotal); ok {
			v += fmt.Sprintf("; %.2f s throttled in all", ts.Last-ts.First)
		}
		rows = append(rows, Row{"CPU throttled", v})
	} else if a.ThrottleExpected() {
		unsampled("CPU throttled")
	}
	// None is nothing to say: the run's tags keep the count.
	if k, ok := a.Get(metrics.ContainerOOMKills); ok && k.Last > k.First {
		n := k.Last - k.First
		v := fmt.Sprintf("%.0f %s killed by the kernel's OOM killer during the job", n, plural(n, "process", "processes"))
		if e, ok := a.Get(metrics.ContainerOOMEvents); ok {
			n := e.Last - e.First
			v += fmt.Sprintf("; the cgroup reached its memory limit %.0f %s (OOM events)", n, plural(n, "time", "times"))
		}
		rows = append(rows, Row{"OOM kills", v})
	}
	if rss, ok := a.Get(metrics.ProcessMemoryRSS); ok {
		// Sampled only: a process that grew and died between two samples
		// (an OOM kill, a short job) is not in it, so the row says how
		// many samples it is the highest of.
		rows = append(rows, Row{"peak process-tree RSS", fmt.Sprintf("%.1f MB, the command's processes together, the highest of %d %s",
			rss.Peak, rss.N, plural(float64(rss.N), "sample", "samples"))})
	} else if a.Expects(metrics.ProcessMemoryRSS) {
		unsampled("peak process-tree RSS")
	}
	if psi, ok := a.Get(metrics.ContainerPressureMemorySome); ok {
		rows = append(rows, Row{"peak memory pressure", fmt.Sprintf("%.1f%%: the share of time some of the cgroup's tasks waited for memory (PSI some avg10)", psi.Peak)})
	} else if a.Expects(metrics.ContainerPressureMemorySome) {
		unsampled("peak memory pressure")
	}
	var gpus []string
	a.Each(func(_ string, d *metrics.Desc, st stats.Stat) {
		if d != nil && d.Of == metrics.GPUMemoryUsed {
			where := fmt.Sprintf("gpu_%d", d.GPU)
			if d.MIG >= 0 {
				where += fmt.Sprintf("_mig_%d", d.MIG)
			}
			gpus = append(gpus, fmt.Sprintf("%s %.0f MB", where, st.Peak))
		}
	})
	sort.Strings(gpus)
	if len(gpus) > 0 {
		rows = append(rows, Row{"GPU memory", "peak " + strings.Join(gpus, ", ")})
	}
	e := a.Energy()
	var used []string
	// A GPU whose energy no sample had has no word: a GPU collector
	// declares the series whether or not its GPUs (if any) report one.
	if e.GPUs > 0 {
		used = append(used, "the GPUs "+joules(e.GPUJoules))
	}
	if e.CPU {
		used = append(used, "the node's CPU packages "+joules(e.CPUJoules))
	} else if a.Expects(metrics.NodeCPUEnergy) {
		unsampled("CPU energy")
	}
	if len(used) > 0 {
		rows = append(rows, Row{"energy", strings.Join(used, ", ") + " while bridge sampled"})
	}
	if len(notSampled) > 0 {
		names := make([]string, len(notSampled))
		for i, r := range notSampled {
			names[i] = r.What
		}
		rows = append(rows, Row{NotSampled, strings.Join(names, ", ") +
			": the job ended before a sample read them (a rate needs two samples); a shorter --interval reads them sooner"})
	}
	return rows
}

// plural is one or many by n.
func plural(n float64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ThrottleExpected reports that the throttled share is a series of the
// job's collectors and that it means something here: CFS periods ran (the
// cgroup's own quota is in effect). Without them nothing throttles: the
// share does not exist, rather than not being sampled.
func (a *Accumulator) ThrottleExpected() bool {
	p, ok := a.Get(metrics.ContainerCPUPeriodsTotal)
	return a.Expects(metrics.ContainerCPUThrottledPeriods) && ok && p.Last > 0
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

// Energy adds up the job's energy from the last value of each energy
// series: every whole-GPU series in joules (each a GPU's energy since bridge
// started; MIG slices are part of their GPU), and the node's CPU packages.
func (a *Accumulator) Energy() Energy {
	var e Energy
	a.Each(func(_ string, d *metrics.Desc, st stats.Stat) {
		if d != nil && d.Of != nil && d.Of.PerGPU && d.MIG < 0 && d.Unit == metrics.UnitJoules {
			e.GPUJoules += st.Last
			e.GPUs++
		}
	})
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

// joules renders an energy for the table: J and Wh.
func joules(v float64) string { return fmt.Sprintf("%.1f J (%.3f Wh)", v, v/3600) }

// Write renders the table: its title, the lines that open it (where to
// see the run, as its tracker's client says it), then rows as two aligned
// columns. A line or a row holds text bridge did not write (a server's
// error, a collector's, a path): each is one line, its control characters
// escaped (printable.Line).
func Write(w io.Writer, title string, lines []string, rows []Row) {
	fmt.Fprintf(w, "\n%s\n", title)
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", printable.Line(l))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "  %s\t%s\n", printable.Line(r.What), printable.Line(r.Value))
	}
	tw.Flush()
}

// Duration says how long something ran, to the second past a minute:
// "4.3 s", "12 min 5 s", "3 h 2 min".
func Duration(d time.Duration) string {
	switch s := d.Round(time.Second); {
	case d < 0:
		return "0 s"
	case d < time.Minute-50*time.Millisecond: // "59.9 s", never "60.0 s"
		return fmt.Sprintf("%.1f s", d.Seconds())
	case s < time.Hour:
		return fmt.Sprintf("%d min %d s", int(s.Minutes()), int(s.Seconds())%60)
	}
	m := d.Round(time.Minute)
	return fmt.Sprintf("%d h %d min", int(m.Hours()), int(m.Minutes())%60)
}
