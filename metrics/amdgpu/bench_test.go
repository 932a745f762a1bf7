package amdgpu

import (
	"context"
	"testing"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
)

// BenchmarkCollect measures one sample of a node with two MI210s (a fixture
// tree: regular files, not sysfs), with and without a child whose VRAM is
// looked up in KFD's process list.
//
//	go test -run '^$' -bench . -benchmem ./metrics/amdgpu/
func BenchmarkCollect(b *testing.B) {
	for _, bb := range []struct {
		name string
		tree ProcessTree
		want int
	}{
		{"gpus", nil, 2 * 13},
		{"gpus+child", fakeTree{100, 101}, 2*13 + 3},
	} {
		b.Run(bb.name, func(b *testing.B) {
			root := b.TempDir()
			f := amdCard(files{}, 0, 128, "0000:03:00.0", "")
			amdCard(f, 1, 129, "0000:c3:00.0", "")
			kfdNodes(f, [2]int{1234, 128}, [2]int{5678, 129})
			kfdProc(f, 100, map[int]uint64{1234: 1 << 30})
			kfdProc(f, 900, map[int]uint64{5678: 1 << 30})
			write(b, root, f)
			c, err := New(Options{SysRoot: root + "/sys", DevRoot: root + "/dev", ProcessTree: bb.tree,
				LookupEnv: func(string) (string, bool) { return "", false }})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := kfile.Bounded(context.Background()) // as the Sampler gives it: its reads run inline
			var pts metrics.Batch
			b.ReportAllocs()
			for b.Loop() {
				pts.Reset()
				if err := c.Collect(ctx, &pts); err != nil || len(pts.Points) != bb.want {
					b.Fatalf("Collect = %d points, %v", len(pts.Points), err)
				}
			}
		})
	}
}
