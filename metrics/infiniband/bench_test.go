package infiniband

import (
	"context"
	"testing"

	"github.com/bridge-dev/bridge/metrics"
)

// BenchmarkCollect measures one sample of two HCAs of two ports each (a
// fixture tree: regular files, not sysfs, whose reads send no MAD).
//
//	go test -run '^$' -bench . -benchmem ./metrics/infiniband/
func BenchmarkCollect(b *testing.B) {
	root := b.TempDir()
	f := device(files{}, "mlx5_0", "400 Gb/sec (4X NDR)", "InfiniBand", 2, nil)
	device(f, "mlx5_1", "400 Gb/sec (4X NDR)", "InfiniBand", 2, nil)
	write(b, root, f)
	c, err := New(Options{SysRoot: root})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var pts metrics.Batch
	c.Collect(ctx, &pts) // the first: no rates yet
	pts.Reset()
	c.Collect(ctx, &pts)
	want := len(pts.Points) // a port's series, 4 ports
	if want == 0 || want%4 != 0 {
		b.Fatalf("Collect = %d points from 4 ports", want)
	}
	b.ReportAllocs()
	for b.Loop() {
		pts.Reset()
		if err := c.Collect(ctx, &pts); err != nil || len(pts.Points) != want {
			b.Fatalf("Collect = %d points, %v; want %d", len(pts.Points), err, want)
		}
	}
}
