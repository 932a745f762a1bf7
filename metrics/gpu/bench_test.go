//go:build linux && cgo

package gpu

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"

	"github.com/bridge-dev/bridge/metrics"
)

// BenchmarkCollect is one sample of eight H100s through go-nvml's mock
// (no driver here): the collector's own cost per sample, without the
// driver's. scripts/gpu-check.sh measures a real GPU.
func BenchmarkCollect(b *testing.B) {
	s := fakeServer(dgxh100.New(), 8)
	c, err := New(Options{Lib: s})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ReportAllocs()
	var pts metrics.Batch // reused, as the Sampler does
	for b.Loop() {
		pts.Reset()
		if err := c.Collect(context.Background(), &pts); err != nil || len(pts.Points) == 0 {
			b.Fatalf("Collect: %d points, %v", len(pts.Points), err)
		}
	}
}
