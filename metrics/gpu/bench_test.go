//go:build linux && cgo

package gpu

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
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
	for b.Loop() {
		pts, err := c.Collect(context.Background())
		if err != nil || len(pts) == 0 {
			b.Fatalf("Collect: %d points, %v", len(pts), err)
		}
	}
}
