package rapl

import (
	"context"
	"testing"

	"github.com/bridge-dev/bridge/metrics"
)

// BenchmarkCollect measures one sample of a two-socket node's RAPL zones
// (a fixture tree: regular files, not sysfs).
//
//	go test -run '^$' -bench . -benchmem ./metrics/rapl/
func BenchmarkCollect(b *testing.B) {
	root := b.TempDir()
	writeBench(b, root, twoSockets())
	c, err := New(Options{SysRoot: root})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var pts metrics.Batch
	c.Collect(ctx, &pts)
	b.ReportAllocs()
	for b.Loop() {
		pts.Reset()
		if err := c.Collect(ctx, &pts); err != nil || len(pts.Points) != 6 {
			b.Fatalf("Collect = %d points, %v", len(pts.Points), err)
		}
	}
}
