package metrics

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// benchPoints is a sample the size of an all-scopes one (about 40 points).
func benchPoints(n int) []Point {
	pts := make([]Point, n)
	for i := range pts {
		d := &Desc{Name: fmt.Sprintf("node_metric_%02d_megabytes", i), Unit: UnitMegabytes, Scope: ScopeNode}
		pts[i] = At(d, float64(i)*1.25)
	}
	return pts
}

// BenchmarkSampler measures the Sampler's own cost around four collectors
// that return at once: goroutines, timeouts, merging and sorting.
//
//	go test -run '^$' -bench Sampler -benchmem ./metrics/
func BenchmarkSampler(b *testing.B) {
	pts := benchPoints(40)
	var cs []Collector
	for i := range 4 {
		cs = append(cs, fixed{name: fmt.Sprint("c", i), pts: pts[i*10 : (i+1)*10]})
	}
	s := NewSampler(cs, 5*time.Second, quiet())
	defer s.Close()
	ctx := context.Background()
	for b.Loop() {
		if smp := s.Sample(ctx); len(smp.Points) != 40 {
			b.Fatalf("%d points", len(smp.Points))
		}
	}
}

// BenchmarkCheck measures the range check alone, on a batch of 40 points
// that all pass (the common case).
//
//	go test -run '^$' -bench Check ./metrics/
func BenchmarkCheck(b *testing.B) {
	pts := benchPoints(40)
	s := NewSampler([]Collector{fixed{name: "c"}}, time.Second, quiet())
	var bt Batch
	for b.Loop() {
		bt.Points = append(bt.Points[:0], pts...)
		s.check(0, &bt)
		if len(bt.Points) != 40 {
			b.Fatalf("%d points", len(bt.Points))
		}
	}
}
