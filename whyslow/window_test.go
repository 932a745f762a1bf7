package whyslow

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/stats"
)

var t0 = time.Unix(1764682500, 0)

// sample is a sample at t0 + sec of the points.
func sample(sec int, pts ...metrics.Point) metrics.Sample {
	return metrics.Sample{Seq: int64(sec), Time: t0.Add(time.Duration(sec) * time.Second), Points: pts}
}

func TestWindowOf(t *testing.T) {
	trainer, loader := metrics.ProcessRoles[metrics.RoleTrainer], metrics.ProcessRoles[metrics.RoleDataLoader]
	pts := func(sm0, sm1, util2, hot, failcnt float64) []metrics.Point {
		return []metrics.Point{
			metrics.At(metrics.GPUProfSMActive.ForGPU(0), sm0),
			metrics.At(metrics.GPUProfSMActive.ForGPU(1), sm1),
			metrics.At(metrics.GPUUtilization.ForGPU(1), 99), // SM activity is preferred
			metrics.At(metrics.GPUUtilization.ForGPU(2), util2),
			metrics.At(metrics.GPUThrottleHWThermal.ForGPU(2), hot),
			metrics.At(metrics.GPUThrottleHWSlowdown.ForGPU(2), hot), // the same share: the more telling reason is named
			metrics.At(metrics.GPUThrottleSWPowerCap.ForGPU(0), 1),   // a GPU at its power limit: not a slowdown
			metrics.At(metrics.ContainerCPULimit, 4),
			metrics.At(metrics.NodeCPUCount, 64),
			metrics.At(metrics.ContainerCPUUsage, 3.5),
			metrics.At(metrics.ContainerCPUThrottledPeriods, 30),
			metrics.At(trainer.CPU, 0.5), metrics.At(trainer.Count, 1),
			metrics.At(loader.CPU, 3), metrics.At(loader.Count, 6),
			metrics.At(metrics.ContainerMemoryMaxEvents, failcnt),
			metrics.At(metrics.ContainerMemoryWorkingSetPercent, 50+failcnt),
			metrics.At(metrics.ContainerMemoryLimit, 1000),
			metrics.At(metrics.NodePressure[2].Some, 10),
			metrics.At(metrics.ProcessBlocked, failcnt),
			metrics.At(metrics.InfinibandReceiveRate.For("mlx5_0", "1"), 10000*failcnt),
			metrics.At(metrics.InfinibandTransmitRate.For("mlx5_0", "1"), 20000*failcnt),
			metrics.At(metrics.InfinibandLinkRate.For("mlx5_0", "1"), 50000),
			metrics.At(metrics.InfinibandTransmitRate.For("mlx5_1", "1"), 10000*failcnt),
			metrics.At(metrics.InfinibandLinkRate.For("mlx5_1", "1"), 12500),
		}
	}
	var set stats.Set
	set.Add(sample(0, pts(0.2, 0.4, 30, 0, 0)...))
	set.Add(sample(30, pts(0.4, 0.6, 50, 1, 1)...))
	set.Add(sample(60, pts(0.6, 0.8, 70, 1, 2)...))
	w := WindowOf(&set, time.Minute)
	for _, tc := range []struct {
		f    Fact
		want float64
	}{
		{GPUs, 3}, {GPUBusy, (0.4 + 0.6 + 0.5) / 3}, {GPUSlowdown, 2.0 / 3}, {SlowdownGPU, 2},
		{CPULimit, 4}, {CPUUsed, 3.5}, {Throttled, 0.3},
		{Trainers, 1}, {TrainerCores, 0.5}, {Loaders, 6}, {LoaderCores, 3},
		{MemoryLimitHits, 2.0 / 60}, {WorkingSetShare, 0.52}, {MemoryLimit, 1000},
		{IOSome, 0.1}, {BlockedProcesses, 1},
		// mlx5_1/1: 15000 of 12500 MB/s over the steady windows (the
		// rates' mean as the table takes it: 10000 and 20000 weighted by
		// 30 s each), more than mlx5_0/1's 30000 of 50000.
		{LinkShare, 15000.0 / 12500},
	} {
		if got := w.Val(tc.f); !w.Has(tc.f) || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("fact %d = %v (sampled %v), want %v", tc.f, got, w.Has(tc.f), tc.want)
		}
	}
	if w.Link != "InfiniBand port mlx5_1/1" {
		t.Errorf("link %q, want mlx5_1/1", w.Link)
	}
	if w.Has(MemorySome) {
		t.Errorf("facts with no series sampled: %v", w)
	}
	if w.GPUBusyFrom != "SM activity, else utilization" || w.SlowdownReason != "hw_thermal" || w.CPULimitFrom != LimitContainer || w.IOFrom != "the node's" {
		t.Errorf("words %q %q %q %q", w.GPUBusyFrom, w.SlowdownReason, w.CPULimitFrom, w.IOFrom)
	}
}

// Without the container's CPU series (no cgroup of its own), the job's
// CPU is the tree's roles' sum, against the node's CPUs.
func TestWindowOfNoCgroup(t *testing.T) {
	var set stats.Set
	for i, v := range []float64{0.8, 1.2} {
		set.Add(sample(10*i,
			metrics.At(metrics.NodeCPUCount, 8),
			metrics.At(metrics.ProcessRoles[metrics.RoleTrainer].CPU, v),
			metrics.At(metrics.ProcessRoles[metrics.RoleLauncher].CPU, 0.1)))
	}
	w := WindowOf(&set, 10*time.Second)
	if w.Val(CPULimit) != 8 || w.CPULimitFrom != LimitNode || math.Abs(w.Val(CPUUsed)-1.3) > 1e-9 {
		t.Errorf("limit %v (%s), used %v; want the node's 8 and the tree's 1.3", w.Val(CPULimit), w.CPULimitFrom, w.Val(CPUUsed))
	}
}

// A window of five samples a second apart, each with these points.
func windowOf(sec int, pts ...metrics.Point) []metrics.Sample {
	var out []metrics.Sample
	for i := range 5 {
		out = append(out, sample(sec+i*15, pts...))
	}
	return out
}

func TestAnalysis(t *testing.T) {
	busy := []metrics.Point{metrics.At(metrics.GPUProfSMActive.ForGPU(0), 0.9), metrics.At(metrics.ContainerCPUUsage, 1)}
	idle := []metrics.Point{metrics.At(metrics.GPUProfSMActive.ForGPU(0), 0.1), metrics.At(metrics.ContainerCPUUsage, 0.01),
		metrics.At(metrics.ContainerCPULimit, 8)}
	a := New(time.Minute)
	var samples []metrics.Sample
	samples = append(samples, windowOf(0, busy...)[:4]...)   // 0..45 s
	samples = append(samples, windowOf(60, busy...)[:4]...)  // 60..105 s: the first window closes at 60 s
	samples = append(samples, windowOf(120, idle...)[:4]...) // 120..165 s
	samples = append(samples, windowOf(180, idle...)[:4]...) // 180..225 s
	samples = append(samples, windowOf(240, idle...)[:2]...) // 240, 255 s: the job ends at 255
	var shares []map[string]float64
	for i, s := range samples {
		var b metrics.Batch
		a.Add(s, &b, i == len(samples)-1)
		if len(b.Points) > 0 {
			m := map[string]float64{}
			for _, p := range b.Points {
				if p.Desc != ShareSeries[Cause(strings.TrimSuffix(strings.TrimPrefix(p.Name(), "node_bottleneck_"), "_ratio"))] {
					t.Errorf("point %s is not a share series", p.Name())
				}
				m[p.Name()] = p.Value
			}
			shares = append(shares, m)
		}
	}
	// Windows closed at 60, 120, 180 and 240 s, and the last, 15 s, a
	// quarter of a minute, at 255 s.
	if len(shares) != 5 {
		t.Fatalf("%d windows closed, want 5: %v", len(shares), shares)
	}
	wantShares := []struct{ compute, idle float64 }{{1, 0}, {1, 0}, {2.0 / 3, 1.0 / 3}, {0.5, 0.5}, {120.0 / 255, 135.0 / 255}}
	for i, w := range wantShares {
		if math.Abs(shares[i]["node_bottleneck_gpu_compute_ratio"]-w.compute) > 1e-9 || math.Abs(shares[i]["node_bottleneck_idle_ratio"]-w.idle) > 1e-9 {
			t.Errorf("window %d: shares %v, want gpu_compute %v and idle %v", i, shares[i], w.compute, w.idle)
		}
		if len(shares[i]) != len(Causes) {
			t.Errorf("window %d has %d share series, want one per cause (%d)", i, len(shares[i]), len(Causes))
		}
	}
	r, ok := a.Result()
	if !ok {
		t.Fatal("no result")
	}
	if r.Cause != Idle || r.Windows != 5 || r.Span != 255*time.Second {
		t.Errorf("result %+v, want idle over 5 windows, 255 s", r)
	}
	want := "idle: the GPU was idle 90% of the time and the job used 0.01 of the 8.0 cores allowed: it waits on something outside this node; the cause for 53% of 4.2 min"
	if got := r.Text(); got != want {
		t.Errorf("Text =\n  %s\nwant\n  %s", got, want)
	}
	if got := r.SharesText(); got != "idle 53%, gpu_compute 47%" {
		t.Errorf("SharesText = %q", got)
	}
}

// A job shorter than a window has its one verdict; a last window of a few
// hundred milliseconds (the sample after the child exits) counts nothing.
func TestAnalysisShortJob(t *testing.T) {
	busy := []metrics.Point{metrics.At(metrics.GPUProfSMActive.ForGPU(0), 0.9), metrics.At(metrics.ContainerCPUUsage, 1)}
	a := New(time.Minute)
	var b metrics.Batch
	a.Add(sample(0, busy...), &b, false)
	a.Add(sample(5, busy...), &b, true)
	if r, ok := a.Result(); !ok || r.Cause != GPUCompute || r.Span != 5*time.Second {
		t.Errorf("a 5 s job: %+v, %v; want gpu_compute over 5 s", r, ok)
	}

	a = New(time.Minute)
	for i := range 5 {
		a.Add(sample(15*i, busy...), &b, false)
	}
	last := sample(60, busy...)
	last.Time = last.Time.Add(200 * time.Millisecond)
	a.Add(last, &b, true)
	if r, _ := a.Result(); r.Windows != 1 || r.Span != time.Minute {
		t.Errorf("a last window of 0.2 s counted: %+v", r)
	}
}
