package stats

import (
	"math"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// VPA's CPU buckets: 176 of them, the first [0, 0.01), bucket n from
// 0.01·(1.05^n − 1)/0.05; a value falls in the bucket whose start is at or
// below it, and one past the last bucket's start in the last.
func TestCPUDistBuckets(t *testing.T) {
	d := CPUDist()
	if n := len(d.weight); n != 176 {
		t.Fatalf("%d buckets, want 176 (VPA's CPU histogram, 0.01 to 1000 cores by 5%%)", n)
	}
	for _, c := range []struct {
		v    float64
		want int
	}{{0, 0}, {0.0099, 0}, {0.01, 1}, {0.0204, 1}, {0.0206, 2}, {1e6, 175}, {math.NaN(), 0}} {
		if got := d.bucket(c.v); got != c.want {
			t.Errorf("bucket(%v) = %d, want %d", c.v, got, c.want)
		}
	}
	for b := 1; b < 175; b++ {
		if s := d.start(b); d.bucket(s*1.0000001) != b || d.bucket(d.start(b+1)*0.9999999) != b {
			t.Errorf("bucket %d [%v, %v) does not hold its own ends", b, s, d.start(b+1))
		}
	}
}

// A percentile is the end of the bucket where the running weight reaches
// its share of the total, as VPA's histogram reads it: known to within 5%
// above the true value. Weights count: a value held twice as long counts
// twice. Nothing counted, or only refused values, gives no percentile.
func TestDistPercentile(t *testing.T) {
	d := CPUDist()
	if _, ok := d.Percentile(0.9); ok {
		t.Error("an empty Dist has a percentile")
	}
	d.Add(math.NaN(), 1)
	d.Add(1, 0)
	d.Add(1, -1)
	d.Add(math.Inf(1), 1)
	if _, ok := d.Percentile(0.9); ok || d.Weight() != 0 {
		t.Errorf("refused values counted: weight %v", d.Weight())
	}
	// 0.5 cores for 80 s, 2 cores for 20 s: the 0.9 percentile is 2 cores'
	// bucket's end, the 0.5 percentile 0.5 cores'.
	d.Add(0.5, 80)
	d.Add(2, 20)
	for _, c := range []struct{ p, v float64 }{{0.5, 0.5}, {0.8, 0.5}, {0.9, 2}, {1, 2}} {
		got, ok := d.Percentile(c.p)
		b := d.bucket(c.v)
		if !ok || got != d.start(b+1) || got < c.v || got > c.v*1.05 {
			t.Errorf("percentile %v = %v, %v; want the end of %v's bucket, %v", c.p, got, ok, c.v, d.start(b+1))
		}
	}
	// Past the last bucket: its start, as VPA.
	big := CPUDist()
	big.Add(5000, 1)
	if got, _ := big.Percentile(0.9); got != big.start(175) {
		t.Errorf("percentile of a value past the range = %v, want the last bucket's start %v", got, big.start(175))
	}
}

// The Set keeps a Dist for the series asked for, of its rate values over
// windows of at least MinRateWindow, each weighted by its window; the
// report's FoldDist of the same points agrees. No other series has one.
func TestSetKeepsDist(t *testing.T) {
	d := metrics.ContainerCPUUsage
	var set Set
	set.KeepDist(d, CPUDist)
	var pts []Point
	at := time.Duration(0)
	for i, p := range []struct {
		gap time.Duration
		v   float64
	}{{0, 9}, {10 * time.Second, 0.5}, {10 * time.Second, 0.5}, {30 * time.Millisecond, 8}, {5 * time.Second, 3}} {
		at += p.gap
		smp := metrics.Sample{Seq: int64(i), Time: t0.Add(at), Points: []metrics.Point{metrics.At(d, p.v), metrics.At(metrics.ContainerMemoryWorkingSet, 1)}}
		set.Add(smp)
		pts = append(pts, Point{Time: smp.Time, Value: p.v})
	}
	got := set.Dist(d)
	want := FoldDist(CPUDist(), pts)
	if got == nil || got.Weight() != 25 || want.Weight() != 25 {
		t.Fatalf("weights: set %v, fold %v; want 25 s (the 30 ms window and the first value left out)", got.Weight(), want.Weight())
	}
	for _, p := range []float64{0.5, 0.8, 0.9} {
		g, _ := got.Percentile(p)
		w, _ := want.Percentile(p)
		if g != w {
			t.Errorf("percentile %v: set %v, fold %v", p, g, w)
		}
	}
	if v, _ := got.Percentile(0.9); v < 3 || v > 3*1.05 {
		t.Errorf("0.9 percentile %v, want 3 cores' bucket (3 held 5 of 25 s)", v)
	}
	if set.Dist(metrics.ContainerMemoryWorkingSet) != nil {
		t.Error("a Dist kept for a series not asked for")
	}
}
