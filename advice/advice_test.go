package advice

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/stats"
	"github.com/bridge-dev/bridge/summary"
)

// The rule by hand: memory = peak × 1.15 (after an OOM kill, VPA's bump
// first: max(peak + 100 MiB, peak × 1.2)), CPU = p90 × 1.15 rounded up to a
// millicore, each at least VPA's pod minimum; a limit used below half of
// it is said plainly, in the words.
func TestSuggest(t *testing.T) {
	for _, c := range []struct {
		name           string
		u              Use
		mem, cpu       float64
		unused         []string
		memOK, cpuOK   bool
		noUnusedMemory bool
	}{
		{name: "peak and p90", u: Use{PeakWorkingSetMB: 1000, PeakKnown: true, MemoryLimitMB: 4000,
			CPUPercentileCores: 0.4, CPUPeakCores: 0.4, CPUKnown: true, CPULimitCores: 8},
			mem: 1150, cpu: 0.46, memOK: true, cpuOK: true,
			unused: []string{"peak working set 1000 of 4000 MB: 75% of the memory limit was never used",
				"used 0.4 of 8 cores at most: 95% of the CPU limit was never used"}},
		{name: "OOM kill, small peak: +100 MiB", u: Use{PeakWorkingSetMB: 209.7152, PeakKnown: true, OOMKilled: true, MemoryLimitMB: 209.7152},
			mem: math.Ceil((209.7152 + 104.8576) * 1.15), memOK: true},
		{name: "OOM kill, large peak: ×1.2", u: Use{PeakWorkingSetMB: 8000, PeakKnown: true, OOMKilled: true, MemoryLimitMB: 8000},
			mem: math.Ceil(8000 * 1.2 * 1.15), memOK: true},
		{name: "floors", u: Use{PeakWorkingSetMB: 10, PeakKnown: true, CPUPercentileCores: 0.001, CPUKnown: true},
			mem: 250, cpu: 0.025, memOK: true, cpuOK: true},
		{name: "used most of it", u: Use{PeakWorkingSetMB: 900, PeakKnown: true, MemoryLimitMB: 1000,
			CPUPercentileCores: 1.4, CPUPeakCores: 1.5, CPUKnown: true, CPULimitCores: 1.5},
			mem: 1035, cpu: math.Ceil(1.4*1.15*1000) / 1000, memOK: true, cpuOK: true},
		{name: "nothing known"},
	} {
		a := Suggest(c.u)
		if a.MemoryKnown != c.memOK || a.MemoryLimitMB != c.mem || a.CPUKnown != c.cpuOK || math.Abs(a.CPUCores-c.cpu) > 1e-9 {
			t.Errorf("%s: %+v, want memory %v (%v) cpu %v (%v)", c.name, a, c.mem, c.memOK, c.cpu, c.cpuOK)
		}
		if strings.Join(a.Unused, "|") != strings.Join(c.unused, "|") {
			t.Errorf("%s: unused %q, want %q", c.name, a.Unused, c.unused)
		}
	}
}

// From a job's samples: the peak working set, the limits, and the CPU's
// 0.9 percentile from the Dist the accumulator keeps.
func TestUseOf(t *testing.T) {
	a := summary.New()
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	for i := range 20 {
		cpu := 0.5
		if i == 19 {
			cpu = 2 // the last of 19 windows: above the 0.9 percentile
		}
		pts := []metrics.Point{metrics.At(metrics.ContainerMemoryWorkingSet, float64(100+i)), metrics.At(metrics.ContainerMemoryLimit, 1000),
			metrics.At(metrics.ContainerCPULimit, 4)}
		if i > 0 {
			pts = append(pts, metrics.At(metrics.ContainerCPUUsage, cpu))
		}
		a.Add(metrics.Sample{Seq: int64(i), Time: t0.Add(time.Duration(i) * 10 * time.Second), Points: pts})
	}
	u := UseOf(a, false)
	d := stats.CPUDist()
	d.Add(0.5, 1)
	want, _ := d.Percentile(1)
	if !u.PeakKnown || u.PeakWorkingSetMB != 119 || u.MemoryLimitMB != 1000 || !u.CPUKnown || u.CPUPercentileCores != want ||
		u.CPUPeakCores != 2 || u.CPULimitCores != 4 {
		t.Errorf("use %+v; want peak 119 of 1000 MB, p90 %v (0.5 cores' bucket), peak 2 of 4 cores", u, want)
	}
}

// A price gives a cost, and says how; none gives none.
func TestCostOf(t *testing.T) {
	if _, ok := CostOf(Prices{}, 8, time.Hour); ok {
		t.Error("a cost without a price")
	}
	c, ok := CostOf(Prices{PerGPUHour: 2.5, PerNodeHour: 4}, 2, 90*time.Minute)
	if !ok || c.Total != 2*1.5*2.5+1.5*4 || c.Basis != "2 GPUs × 1.50 h at 2.5 a GPU-hour + 1.50 h at 4 a node-hour" {
		t.Errorf("cost %+v", c)
	}
	if tags := c.Tags(); tags[TagCost] != "13.50" || tags[TagCostBasis] != c.Basis {
		t.Errorf("tags %v", tags)
	}
	if c, _ := CostOf(Prices{PerNodeHour: 3600}, 0, 10*time.Second); c.Total != 10 {
		t.Errorf("10 s at 3600 a node-hour: %v", c.Total)
	}
}
