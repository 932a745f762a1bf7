//go:build linux && cgo

package gpu

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"

	"github.com/bridge-dev/bridge/metrics"
)

// BenchmarkCollect is one sample of eight H100s through go-nvml's mock
// (no driver here): the collector's own cost per sample, without the
// driver's, with GPM off (as before Hopper) and on (one sample and one
// metrics call per GPU). scripts/gpu-check.sh measures a real GPU.
func BenchmarkCollect(b *testing.B) {
	for _, gpm := range []bool{false, true} {
		b.Run(map[bool]string{false: "gpm-off", true: "gpm-on"}[gpm], func(b *testing.B) {
			s := fakeServer(dgxh100.New(), 8)
			var drv *gpmDriver
			if gpm {
				drv = newGPMDriver(b, s)
			}
			c, err := New(Options{Lib: s})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if drv != nil {
				c.now = drv.clock.now
			}
			b.ReportAllocs()
			var pts metrics.Batch // reused, as the Sampler does
			for b.Loop() {
				if drv != nil {
					drv.clock.add(time.Second)
				}
				pts.Reset()
				if err := c.Collect(context.Background(), &pts); err != nil || len(pts.Points) == 0 {
					b.Fatalf("Collect: %d points, %v", len(pts.Points), err)
				}
			}
		})
	}
}
