package stats

import (
	"math"
	"time"
)

// Dist is the distribution of a series' values in fixed memory, for a
// percentile over a run of any length: the Kubernetes Vertical Pod
// Autoscaler's histogram (vertical-pod-autoscaler/pkg/recommender/util,
// histogram.go and histogram_options.go, autoscaler @55c37cd), whose
// buckets grow exponentially, so that a percentile is known to within
// the bucket's width (5% of its value with CPUDist) whatever the range.
// Bucket 0 is [0, first); bucket n >= 1 starts at first·(ratio^n − 1) /
// (ratio − 1); values past the last bucket's start fall in it. The zero
// Dist holds nothing and takes nothing (NewDist makes one). Not safe for
// concurrent use.
type Dist struct {
	first, ratio float64
	weight       []float64 // by bucket
	total        float64
}

// distEpsilon is the least weight that makes a bucket count (VPA's
// epsilon: 0.001 × its smallest sample weight, 0.1).
const distEpsilon = 1e-4

// NewDist is an empty Dist whose first bucket is first wide, each next
// ratio times the one before, up to the bucket holding max.
func NewDist(first, max, ratio float64) *Dist {
	n := int(math.Ceil(math.Log(max*(ratio-1)/first+1)/math.Log(ratio))) + 1
	return &Dist{first: first, ratio: ratio, weight: make([]float64, n)}
}

// CPUDist is the VPA recommender's CPU histogram: cores from 0.01 to
// 1000, each bucket 5% wider than the one before (176 buckets, 1.4 KB).
func CPUDist() *Dist { return NewDist(0.01, 1000, 1.05) }

// bucket is the bucket v falls in.
func (d *Dist) bucket(v float64) int {
	if !(v >= d.first) { // NaN too
		return 0
	}
	b := int(math.Log(v*(d.ratio-1)/d.first+1) / math.Log(d.ratio))
	return min(b, len(d.weight)-1)
}

// start is where bucket b starts.
func (d *Dist) start(b int) float64 {
	if b == 0 {
		return 0
	}
	return d.first * (math.Pow(d.ratio, float64(b)) - 1) / (d.ratio - 1)
}

// Add counts v with weight w (w > 0; a value that is not finite, or a
// weight that is not positive, is not counted).
func (d *Dist) Add(v, w float64) {
	if d == nil || len(d.weight) == 0 || !(w > 0) || math.IsInf(w, 0) || math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	d.weight[d.bucket(v)] += w
	d.total += w
}

// Weight is the total weight counted.
func (d *Dist) Weight() float64 {
	if d == nil {
		return 0
	}
	return d.total
}

// Percentile is the value below which share p (0 to 1) of the weight
// falls, as VPA reads it: the end of the bucket where the running weight
// first reaches p of the total (the last bucket's start for the last);
// ok is false when nothing was counted.
func (d *Dist) Percentile(p float64) (v float64, ok bool) {
	if d == nil || d.total < distEpsilon {
		return 0, false
	}
	lo, hi := -1, -1
	for b, w := range d.weight {
		if w >= distEpsilon {
			if lo < 0 {
				lo = b
			}
			hi = b
		}
	}
	if lo < 0 {
		return 0, false
	}
	threshold, sum := p*d.total, 0.0
	b := lo
	for ; b < hi; b++ {
		sum += d.weight[b]
		if sum >= threshold {
			break
		}
	}
	if b < len(d.weight)-1 {
		return d.start(b + 1), true
	}
	return d.start(b), true
}

// FoldDist is d with the points of a rate series counted, oldest first:
// each weighted by the seconds since the point before, over windows of at
// least MinRateWindow (as Stat.Rate's steady figures), so that a run
// sampled faster for a while (near its memory limit) is not weighted
// toward that while.
func FoldDist(d *Dist, pts []Point) *Dist {
	for i := 1; i < len(pts); i++ {
		if w := pts[i].Time.Sub(pts[i-1].Time); w >= MinRateWindow {
			d.Add(pts[i].Value, w.Seconds())
		}
	}
	return d
}

// addWindow counts v, a rate over window, by the rule of FoldDist.
func (d *Dist) addWindow(v float64, window time.Duration) {
	if window >= MinRateWindow {
		d.Add(v, window.Seconds())
	}
}
