package cgroup_test

import (
	"context"
	"testing"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/metrics"
)

// BenchmarkCollect measures one sample of the container scope on the real v1
// hierarchy (memory, cpu, cpuacct) of a child cgroup holding an idle helper:
// the per-sample cost of the cgroup collector (docs/performance.md). It skips
// where cgrouptest cannot make a v1 cgroup (not root, v2 host).
func BenchmarkCollect(b *testing.B) {
	g := cgrouptest.NewV1(b, realLimits)
	pid := startIn(b, g, "idle")
	c := collectorFor(b, pid)
	ctx := context.Background()
	if _, err := collecttest.Collect(ctx, c); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var pts metrics.Batch // reused, as the Sampler does
	for i := 0; i < b.N; i++ {
		pts.Reset()
		if err := c.Collect(ctx, &pts); err != nil || len(pts.Points) == 0 {
			b.Fatalf("Collect: %d points, %v", len(pts.Points), err)
		}
	}
}
