package node

import (
	"context"
	"testing"

	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/metrics"
)

// BenchmarkCollect measures one sample of the node, rootfs and netns sources
// on this machine's /proc; "node" is --scopes ...,node without rootfs and
// netns (no statfs, no net/dev).
//
//	go test -run '^$' -bench . -benchmem ./metrics/node/
func BenchmarkCollect(b *testing.B) {
	for _, bb := range []struct {
		name   string
		scopes []metrics.Scope
	}{
		{"all", nil},
		{"node", []metrics.Scope{metrics.ScopeNode}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			c, err := New(Options{Scopes: bb.scopes})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if _, err := collecttest.Collect(ctx, c); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var pts metrics.Batch // reused, as the Sampler does
			for b.Loop() {
				pts.Reset()
				if err := c.Collect(ctx, &pts); err != nil || len(pts.Points) == 0 {
					b.Fatalf("Collect = %d points, %v", len(pts.Points), err)
				}
			}
		})
	}
}
