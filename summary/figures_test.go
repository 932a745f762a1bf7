package summary

import (
	"math"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// The figures are the table's values, one each; a figure not measured
// (no RAPL here) or out of its range (an RSS of 1e16 MB) is left out,
// never 0; GPU-hours count the GPUs over the sampled time.
func TestFigurePoints(t *testing.T) {
	a := New()
	t0 := time.Unix(1000, 0)
	gpu0, gpu1 := metrics.GPUMemoryUsed.ForGPU(0), metrics.GPUMemoryUsed.ForGPU(1)
	for i := range 3 {
		rss := 50.0 * float64(i+1)
		if i == 2 {
			rss = 1e16 // a peak out of its range: the figure is left out
		}
		a.Add(metrics.Sample{Seq: int64(i), Time: t0.Add(time.Duration(i) * 30 * time.Minute), Points: []metrics.Point{
			metrics.At(metrics.ContainerMemoryWorkingSet, 100+float64(i)), metrics.At(metrics.ContainerCPUUsageSecondsTotal, 10+float64(i)*5),
			metrics.At(metrics.ContainerCPUUsage, 1), metrics.At(metrics.ProcessMemoryRSS, rss),
			metrics.At(gpu0, 1000*float64(i)), metrics.At(gpu1, 500),
		}})
	}
	got := map[string]float64{}
	for _, p := range a.FigurePoints() {
		got[p.Name()] = p.Value
	}
	want := map[string]float64{
		"container_memory_peak_working_set_megabytes": 102,
		"container_cpu_peak_cores":                    1,
		"container_cpu_seconds":                       10,
		"gpu_memory_peak_megabytes":                   2000,
		"gpu_hours":                                   2, // 2 GPUs over an hour
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || math.Abs(g-v) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	for _, k := range []string{"process_memory_peak_rss_megabytes", "energy_node_cpu_joules", "energy_gpus_joules", "container_memory_peak_usage_megabytes"} {
		if v, ok := got[k]; ok {
			t.Errorf("%s = %v sent: not measured, or out of its range", k, v)
		}
	}
	if len(New().FigurePoints()) != 0 {
		t.Error("a job with no sample has figures")
	}
}
