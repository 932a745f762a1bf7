package node

import (
	"context"
	"testing"
)

// BenchmarkCollect measures one sample of the node, rootfs and netns sources
// on this machine's /proc.
//
//	go test -run '^$' -bench . -benchmem ./metrics/node/
func BenchmarkCollect(b *testing.B) {
	c, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	if cl, ok := any(c).(interface{ Close() error }); ok {
		defer cl.Close()
	}
	ctx := context.Background()
	if _, err := c.Collect(ctx); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		pts, err := c.Collect(ctx)
		if err != nil || len(pts) == 0 {
			b.Fatalf("Collect = %d points, %v", len(pts), err)
		}
	}
}
