package summary

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"

	"github.com/bridge-dev/bridge/metrics/node"

	"github.com/bridge-dev/bridge/metrics/process"

	"github.com/bridge-dev/bridge/metrics/cgroup"
)

func TestRowsAgainstLimits(t *testing.T) {
	a := New()
	t0 := time.Unix(1000, 0)
	for i, ws := range []float64{100, 180, 150} {
		a.Add(metrics.Sample{Seq: int64(i), Time: t0.Add(time.Duration(i) * time.Second), Points: []metrics.Point{
			metrics.At(metrics.ContainerMemoryWorkingSet, ws), metrics.At(metrics.ContainerMemoryLimit, 200),
			metrics.At(metrics.ContainerCPUUsage, float64(i)*0.25), metrics.At(metrics.ContainerCPULimit, 0.5),
			metrics.At(metrics.ContainerOOMKills, float64(i/2)), metrics.At(metrics.ContainerCPUThrottledPeriods, 30),
		}})
	}
	var b bytes.Buffer
	Write(&b, "end", nil, a.Rows())
	out := b.String()
	for _, want := range []string{
		"peak working set    180.0 MB, 90.0% of the 200.0 MB limit: the highest sampled",
		"0.50 cores at the peak, 0.38 on average, of a 0.50-core limit", // over the two one-second windows
		"OOM kills           1 process killed by the kernel's OOM killer during the job",
		"in 30.0% of the CPU periods on average",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if st, _ := a.Get(metrics.ContainerMemoryWorkingSet); !st.PeakAt.Equal(t0.Add(time.Second)) {
		t.Errorf("peak at %v", st.PeakAt)
	}
}

// The peak CPU is taken over windows of at least MinRateWindow: the last
// sample, 50 ms after the one before (the child's exit), does not set it.
func TestPeakCPUIgnoresShortWindows(t *testing.T) {
	a := New()
	t0 := time.Unix(1000, 0)
	for _, s := range []struct {
		at    time.Duration
		cores float64
	}{{0, 0}, {10 * time.Second, 0.5}, {20 * time.Second, 1.5}, {20*time.Second + 50*time.Millisecond, 2.0}} {
		a.Add(metrics.Sample{Time: t0.Add(s.at), Points: []metrics.Point{metrics.At(metrics.ContainerCPUUsage, s.cores)}})
	}
	var b bytes.Buffer
	Write(&b, "end", nil, a.Rows())
	if !strings.Contains(b.String(), "peak container CPU  1.50 cores at the peak, 1.00 on average") {
		t.Errorf("the peak is not the one over a full window, or the mean not over the same windows:\n%s", b.String())
	}
}

// The mean beside the peak is taken over the same windows, so it never
// exceeds the peak: a burst in a short first window (the random phase)
// counts in neither.
func TestMeanCPUNeverAbovePeak(t *testing.T) {
	a := New()
	t0 := time.Unix(1000, 0)
	for _, s := range []struct {
		at    time.Duration
		cores float64
	}{{0, 0}, {200 * time.Millisecond, 1.9}, {1200 * time.Millisecond, 0.01}, {2200 * time.Millisecond, 0.01}} {
		a.Add(metrics.Sample{Time: t0.Add(s.at), Points: []metrics.Point{metrics.At(metrics.ContainerCPUUsage, s.cores)}})
	}
	var b bytes.Buffer
	Write(&b, "end", nil, a.Rows())
	if !strings.Contains(b.String(), "peak container CPU  0.01 cores at the peak, 0.01 on average") {
		t.Errorf("want the peak and the mean over the same (steady) windows:\n%s", b.String())
	}
}

func TestRowsWithoutLimits(t *testing.T) {
	a := New()
	a.Add(metrics.Sample{Points: []metrics.Point{metrics.At(metrics.ContainerMemoryWorkingSet, 5), metrics.At(metrics.ContainerCPUUsage, 1),
		metrics.At(metrics.ContainerOOMKills, 3)}})
	var b bytes.Buffer
	Write(&b, "end", nil, a.Rows())
	if !strings.Contains(b.String(), "; no memory limit") || !strings.Contains(b.String(), "; no CPU limit") {
		t.Errorf("limits must be said to be absent, not shown as 0:\n%s", b.String())
	}
	// No OOM kill during the job: nothing to say (the tags keep the count).
	if strings.Contains(b.String(), "OOM kills") {
		t.Errorf("a row of no OOM kill:\n%s", b.String())
	}
}

// v1 cpu and cpuacct in different cgroups: usage is not "of" the limit, and
// the throttled time is the counter's increase over the job.
func TestRowsCPUSplitAndThrottledTotal(t *testing.T) {
	a := New()
	for i, th := range []float64{10, 12.5} {
		a.Add(metrics.Sample{Seq: int64(i), Points: []metrics.Point{
			metrics.At(metrics.ContainerCPUUsage, 1.65), metrics.At(metrics.ContainerCPULimit, 0.5),
			metrics.At(metrics.ContainerCPUUsageLimitSplit, 1),
			metrics.At(metrics.ContainerCPUThrottledPeriods, 20), metrics.At(metrics.ContainerCPUThrottledSecondsTotal, th),
		}})
	}
	var b bytes.Buffer
	Write(&b, "end", nil, a.Rows())
	out := b.String()
	if strings.Contains(out, "of a 0.50-core limit") || !strings.Contains(out, "is another cgroup's") {
		t.Errorf("split usage presented against the limit:\n%s", out)
	}
	if !strings.Contains(out, "2.50 s throttled in all") {
		t.Errorf("throttled time is not the cumulative counter's increase:\n%s", out)
	}
}

// The GPU memory row names each GPU and MIG slice from its series'
// binding, not from its name.
func TestRowsGPUMemory(t *testing.T) {
	a := New()
	for _, used := range []float64{1000, 3000, 2000} {
		a.Add(metrics.Sample{Points: []metrics.Point{
			metrics.At(metrics.GPUMemoryUsed.ForGPU(1), used), metrics.At(metrics.GPUMemoryUsed.ForMIG(0, 3), used/2),
			metrics.At(metrics.GPUMemoryTotal.ForGPU(1), 80000), metrics.Named("gpu_2_memory_used_megabytes", 5),
		}})
	}
	var b bytes.Buffer
	Write(&b, "end", nil, a.Rows())
	if !strings.Contains(b.String(), "GPU memory  peak gpu_0_mig_3 1500 MB, gpu_1 3000 MB\n") {
		t.Errorf("GPU memory row:\n%s", b.String())
	}
}

// The job's energy: the last value of each whole GPU's energy series
// (since bridge started), summed, and the node's CPU packages. The table
// names what was sampled, and the node's CPU energy, when its collector
// is on and no sample had it, among the figures not sampled; a GPU's
// energy no sample had has no word (a GPU collector declares the series
// whatever its GPUs report). The tags say "not sampled" for each.
func TestEnergy(t *testing.T) {
	g0, g1, mig := metrics.GPUEnergy.ForGPU(0), metrics.GPUEnergy.ForGPU(1), metrics.GPUEnergy.ForMIG(0, 1)
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name       string
		expected   []*metrics.Desc
		samples    [][]metrics.Point
		row        string
		notSampled string // the figures the "not sampled" row names
		tags       map[string]string
	}{
		{"both", nil, [][]metrics.Point{
			{metrics.At(g0, 10), metrics.At(g1, 20), metrics.At(metrics.NodeCPUEnergy, 5)},
			{metrics.At(g0, 100), metrics.At(g1, 250), metrics.At(mig, 40), metrics.At(metrics.NodeCPUEnergy, 72),
				metrics.At(metrics.GPUPowerUsage.ForGPU(0), 300)},
		}, "the GPUs 350.0 J (0.097 Wh), the node's CPU packages 72.0 J (0.020 Wh) while bridge sampled", "",
			map[string]string{TagEnergyGPUs: "350.0", TagEnergyNodeCPU: "72.0"}},
		{"a GPU that stopped answering keeps its last value", []*metrics.Desc{metrics.NodeCPUEnergy}, [][]metrics.Point{
			{metrics.At(g0, 10), metrics.At(g1, 20)},
			{metrics.At(g0, 30)},
		}, "the GPUs 50.0 J (0.014 Wh) while bridge sampled", "CPU energy",
			map[string]string{TagEnergyGPUs: "50.0", TagEnergyNodeCPU: "not sampled"}},
		{"no energy source", nil, [][]metrics.Point{{metrics.At(metrics.ContainerMemoryWorkingSet, 1)}}, "", "",
			map[string]string{TagEnergyGPUs: "not sampled", TagEnergyNodeCPU: "not sampled"}},
		{"sources, no sample at all", []*metrics.Desc{metrics.GPUEnergy, metrics.NodeCPUEnergy}, nil, "", "CPU energy",
			map[string]string{TagEnergyGPUs: "not sampled", TagEnergyNodeCPU: "not sampled"}},
		{"a GPU whose energy was not read", []*metrics.Desc{metrics.GPUEnergy}, [][]metrics.Point{{metrics.At(metrics.GPUPowerUsage.ForGPU(0), 300)}},
			"", "", map[string]string{TagEnergyGPUs: "not sampled", TagEnergyNodeCPU: "not sampled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewWith(Options{Expected: tc.expected})
			for i, pts := range tc.samples {
				a.Add(metrics.Sample{Seq: int64(i), Time: t0.Add(time.Duration(i) * time.Second), Points: pts})
			}
			rows := a.Rows()
			if row := rowOf(rows, "energy"); row != tc.row {
				t.Errorf("energy row %q, want %q", row, tc.row)
			}
			if ns := rowOf(rows, NotSampled); (tc.notSampled == "") != (ns == "") || !strings.HasPrefix(ns, tc.notSampled+": ") && tc.notSampled != "" {
				t.Errorf("not sampled row %q, want it to name %q", ns, tc.notSampled)
			}
			got := a.EnergyTags()
			if len(got) != len(tc.tags) {
				t.Errorf("tags %v, want %v", got, tc.tags)
			}
			for k, v := range tc.tags {
				if got[k] != v {
					t.Errorf("tag %s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

// rowOf is the value of the table's row named what; "" when absent.
func rowOf(rows []Row, what string) string {
	for _, r := range rows {
		if r.What == what {
			return r.Value
		}
	}
	return ""
}

// A job that allocates past its limit within one interval dies between two
// samples: they saw a few MB, the kernel's high-water mark saw the limit,
// and the OOM-kill counter rose. The peak working set is the limit, from
// the kernel's mark at the OOM kill, and says so; the sampled peak is kept
// beside it. Without the OOM kill the same mark (page cache fills a cgroup
// to its limit) is usage only: the working set stays the sampled one.
func TestPeakWorkingSetAtOOMKillBetweenSamples(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kills    [2]float64
		wantWS   float64
		wantFrom string
	}{
		{"oom kill", [2]float64{0, 1}, 150, "kernel high-water mark memory.max_usage_in_bytes at the OOM kill"},
		{"page cache only", [2]float64{0, 0}, 4.7, SourceSampled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A cgroup made for the job: its mark before the job is low.
			a := NewWith(Options{PeakFile: "memory.max_usage_in_bytes", Expected: cgroup.Series, PeakStart: &PeakStart{MB: 2}})
			for i, ws := range []float64{4.7, 1.2} {
				a.Add(metrics.Sample{Seq: int64(i), Time: time.Unix(1000+int64(i), 0), Points: []metrics.Point{
					metrics.At(metrics.ContainerMemoryWorkingSet, ws), metrics.At(metrics.ContainerMemoryLimit, 150),
					metrics.At(metrics.ContainerMemoryWorkingSetPercent, ws/150*100),
					metrics.At(metrics.ContainerMemoryUsage, ws+1), metrics.At(metrics.ContainerMemoryPeak, 149.9+float64(i)*0.1),
					metrics.At(metrics.ContainerOOMKills, tc.kills[i]),
				}})
			}
			f := a.PeakWorkingSet()
			if !f.Known || f.Value != tc.wantWS || f.Source != tc.wantFrom || !f.ShareKnown {
				t.Errorf("peak working set %+v, want %.1f MB from %q", f, tc.wantWS, tc.wantFrom)
			}
			u := a.PeakUsage()
			if !u.Known || u.Value != 150 || u.Source != "kernel high-water mark memory.max_usage_in_bytes" || u.SharePercent != 100 {
				t.Errorf("peak usage %+v, want the kernel's mark, 150 MB, 100%% of the limit", u)
			}
			rows := a.Rows()
			ws := rowOf(rows, "peak working set")
			if !strings.HasPrefix(ws, fmt.Sprintf("%.1f MB, ", tc.wantWS)) || !strings.Contains(ws, "of the 150.0 MB limit") || !strings.Contains(ws, tc.wantFrom) {
				t.Errorf("peak working set row %q: want %.1f MB and its source %q", ws, tc.wantWS, tc.wantFrom)
			}
			if tc.wantFrom != SourceSampled && !strings.Contains(ws, "the samples saw at most 4.7 MB") {
				t.Errorf("peak working set row %q does not keep the sampled peak beside the kernel's", ws)
			}
			if us := rowOf(rows, "peak usage"); us != "150.0 MB with the page cache, 100.0% of the 150.0 MB limit: the kernel high-water mark memory.max_usage_in_bytes" {
				t.Errorf("peak usage row %q", us)
			}
		})
	}
}

// Without a kernel high-water mark (cgroup v2 before Linux 5.19) the peak
// usage is the sampled one, and says so.
func TestPeakUsageSampledWithoutKernelMark(t *testing.T) {
	a := NewWith(Options{PeakFile: "memory.peak"})
	for _, u := range []float64{10, 30, 20} {
		a.Add(metrics.Sample{Points: []metrics.Point{metrics.At(metrics.ContainerMemoryUsage, u)}})
	}
	if f := a.PeakUsage(); !f.Known || f.Value != 30 || f.Source != SourceSampled || f.ShareKnown {
		t.Errorf("peak usage %+v, want 30 MB sampled, no share without a limit", f)
	}
}

// Every peak and mean of a series the job's collectors produce reads "not
// sampled" when no sample had it (a job that died before the second
// reading has no rates; one whose tree never had memory of its own, no
// RSS); a series of no collector of the job has no row at all.
func TestRowsNotSampled(t *testing.T) {
	expected := append(append([]*metrics.Desc{}, cgroup.Series...), process.Series...)
	a := NewWith(Options{Expected: expected})
	// One reading: the counters and the gauges of a quota'd cgroup, no rate.
	a.Add(metrics.Sample{Points: []metrics.Point{
		metrics.At(metrics.ContainerCPUUsageSecondsTotal, 1), metrics.At(metrics.ContainerCPUPeriodsTotal, 12),
		metrics.At(metrics.ContainerCPULimit, 1),
	}})
	rows := a.Rows()
	want := "peak working set, peak usage, peak container CPU, CPU throttled, peak process-tree RSS, peak memory pressure: " +
		"the job ended before a sample read them (a rate needs two samples); a shorter --interval reads them sooner"
	if v := rowOf(rows, NotSampled); v != want {
		t.Errorf("row %q = %q, want %q", NotSampled, v, want)
	}
	for _, what := range []string{"peak working set", "peak usage", "peak container CPU", "CPU throttled", "peak process-tree RSS", "peak memory pressure"} {
		if v := rowOf(rows, what); v != "" {
			t.Errorf("row %q = %q: a figure not sampled has no row of its own", what, v)
		}
	}
	if f := a.PeakWorkingSet(); f.Known || !f.Expected {
		t.Errorf("peak working set %+v: want not known, expected", f)
	}

	// No quota (no CFS period ran): nothing throttles, so no row; no
	// collector of the job for them: no rows.
	b := NewWith(Options{Expected: node.Series})
	b.Add(metrics.Sample{Points: []metrics.Point{metrics.At(metrics.ContainerCPUPeriodsTotal, 0)}})
	rows = b.Rows()
	for _, what := range []string{"peak working set", "peak usage", "peak container CPU", "CPU throttled", "peak process-tree RSS", "peak memory pressure", NotSampled} {
		if v := rowOf(rows, what); v != "" {
			t.Errorf("row %q = %q for a series of no collector of the job", what, v)
		}
	}
}

// On cgroup v2 an OOM kill at an ancestor's limit (a pod's) counts in
// memory.events oom_kill here too, but not oom: this cgroup's working set
// did not reach its own limit then, whatever its high-water mark says (page
// cache fills a cgroup to its limit): the sampled peak stands.
func TestPeakWorkingSetAncestorOOM(t *testing.T) {
	a := NewWith(Options{PeakFile: "memory.peak", PeakStart: &PeakStart{MB: 5}})
	for i, kills := range []float64{0, 1} {
		a.Add(metrics.Sample{Seq: int64(i), Points: []metrics.Point{
			metrics.At(metrics.ContainerMemoryWorkingSet, 20), metrics.At(metrics.ContainerMemoryLimit, 300),
			metrics.At(metrics.ContainerMemoryPeak, 300), metrics.At(metrics.ContainerOOMKills, kills),
			metrics.At(metrics.ContainerOOMEvents, 0),
		}})
	}
	if f := a.PeakWorkingSet(); f.Value != 20 || f.Source != SourceSampled {
		t.Errorf("peak working set %+v, want the sampled 20 MB", f)
	}
}

// With the cpu cgroups at the host's root, the table says their figures
// are not a container's, in one row, and has no CPU row of its own.
func TestRowsAtRoot(t *testing.T) {
	note := "bridge's cpu and cpuacct cgroups are the root cgroups, the host's and not a container's: their container_ series are not sent"
	a := NewWith(Options{Notes: []Row{{"container scope", note}}, Expected: []*metrics.Desc{metrics.ContainerMemoryWorkingSet}})
	a.Add(metrics.Sample{Points: []metrics.Point{metrics.At(metrics.ContainerMemoryWorkingSet, 10)}})
	rows := a.Rows()
	if v := rowOf(rows, "container scope"); v != note || rows[0].What != "container scope" {
		t.Errorf("rows %q: want the container scope's note first", rows)
	}
	if v := rowOf(rows, "peak container CPU"); v != "" {
		t.Errorf("peak container CPU row = %q, want none", v)
	}
	if v := rowOf(NewWith(Options{}).Rows(), "container scope"); v != "" {
		t.Errorf("a container: scope row %q, want none", v)
	}
}

// The kernel's high-water mark counts from the cgroup's creation: in a
// cgroup jobs share it may be an earlier job's. The figures take it only
// where it is this job's; else the sampled peak, saying why.
func TestKernelPeakOnlyTheJobs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		start   *PeakStart
		marks   []float64 // the mark in each sample
		usage   []float64 // the usage in each sample
		kernel  bool      // the peak usage is the kernel's mark
		want    float64
		saysWhy string
	}{
		// A go build left 718 MB in the cgroup; an 8 MB job after it.
		{"predates the job", &PeakStart{MB: 718}, []float64{718, 718}, []float64{6, 8}, false, 8,
			"sampled; the kernel's high-water mark memory.max_usage_in_bytes, 718.0 MB, predates the job"},
		{"raised during the job", &PeakStart{MB: 100}, []float64{100, 150}, []float64{90, 120}, true, 150, ""},
		{"reached by the job", &PeakStart{MB: 100}, []float64{100, 100}, []float64{60, 100}, true, 100, ""},
		// cgroup v2 from Linux 6.12: reset for bridge's descriptor.
		{"reset at the start", &PeakStart{MB: 718, Reset: true}, []float64{20, 50}, []float64{10, 40}, true, 50, ""},
		{"not read before the job", nil, []float64{150, 150}, []float64{10, 12}, false, 12,
			"sampled; the kernel's high-water mark memory.max_usage_in_bytes (150.0 MB) was not read before the job, so it may be an earlier job's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewWith(Options{PeakFile: "memory.max_usage_in_bytes", PeakStart: tc.start, Expected: cgroup.Series})
			for i := range tc.marks {
				a.Add(metrics.Sample{Seq: int64(i), Points: []metrics.Point{
					metrics.At(metrics.ContainerMemoryWorkingSet, tc.usage[i]), metrics.At(metrics.ContainerMemoryUsage, tc.usage[i]),
					metrics.At(metrics.ContainerMemoryPeak, tc.marks[i]), metrics.At(metrics.ContainerMemoryLimit, 1000),
				}})
			}
			_, ok, why := a.KernelPeak()
			f := a.PeakUsage()
			if ok != tc.kernel || f.Value != tc.want || !f.Known {
				t.Errorf("kernel's %v (%s), peak usage %+v; want kernel's %v, %.0f MB", ok, why, f, tc.kernel, tc.want)
			}
			wantSource := SourceKernelPeak + " memory.max_usage_in_bytes"
			if !tc.kernel {
				wantSource = tc.saysWhy
			}
			if f.Source != wantSource {
				t.Errorf("source %q, want %q", f.Source, wantSource)
			}
			wantEnd := "the " + wantSource
			if !tc.kernel { // a sampled peak's row ends with why not the mark
				wantEnd = "the highest sampled (" + strings.TrimPrefix(wantSource, "sampled; ") + ")"
			}
			if row := rowOf(a.Rows(), "peak usage"); !strings.HasPrefix(row, fmt.Sprintf("%.1f MB with the page cache, ", tc.want)) ||
				!strings.Contains(row, "of the 1000.0 MB limit") || !strings.HasSuffix(row, wantEnd) {
				t.Errorf("peak usage row %q: want %.1f MB, ending with %q", row, tc.want, wantEnd)
			}
		})
	}
}

// An earlier job's mark at the limit (it was OOM-killed there) is no
// evidence that this job's working set reached it.
func TestPeakWorkingSetNotFromAnEarlierJobsMark(t *testing.T) {
	a := NewWith(Options{PeakFile: "memory.peak", PeakStart: &PeakStart{MB: 150}})
	for i, kills := range []float64{1, 2} {
		a.Add(metrics.Sample{Seq: int64(i), Points: []metrics.Point{
			metrics.At(metrics.ContainerMemoryWorkingSet, 4.7), metrics.At(metrics.ContainerMemoryUsage, 5), metrics.At(metrics.ContainerMemoryLimit, 150),
			metrics.At(metrics.ContainerMemoryPeak, 150), metrics.At(metrics.ContainerOOMKills, kills),
		}})
	}
	if f := a.PeakWorkingSet(); f.Value != 4.7 || f.Source != SourceSampled {
		t.Errorf("peak working set %+v, want the sampled 4.7 MB", f)
	}
}

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0 s"}, {4300 * time.Millisecond, "4.3 s"}, {59*time.Second + 940*time.Millisecond, "59.9 s"},
		{12*time.Minute + 5*time.Second + 400*time.Millisecond, "12 min 5 s"}, {59*time.Minute + 59*time.Second + 600*time.Millisecond, "1 h 0 min"}, {59*time.Second + 970*time.Millisecond, "1 min 0 s"},
		{3*time.Hour + 2*time.Minute + 20*time.Second, "3 h 2 min"}, {49 * time.Hour, "49 h 0 min"},
	} {
		if got := Duration(tc.d); got != tc.want {
			t.Errorf("Duration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
