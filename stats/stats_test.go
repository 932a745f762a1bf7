package stats

import (
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

var t0 = time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC)

// The first, last, highest and mean values, and when the highest was
// read; the zero Stat's mean is 0, not NaN.
func TestStat(t *testing.T) {
	var s Stat
	if s.Mean() != 0 {
		t.Errorf("empty mean %v", s.Mean())
	}
	for i, v := range []float64{3, 7, 7, 2} {
		s.Add(t0.Add(time.Duration(i)*time.Second), v, 0)
	}
	if s.First != 3 || s.Last != 2 || s.Peak != 7 || !s.PeakAt.Equal(t0.Add(time.Second)) || s.N != 4 || s.Mean() != 4.75 {
		t.Errorf("stat %+v mean %v", s, s.Mean())
	}
	// Without a window of MinRateWindow, a rate's figures are every value's.
	if peak, mean, steady := s.Rate(); steady || peak != 7 || mean != 4.75 {
		t.Errorf("rate without windows: %v %v %v", peak, mean, steady)
	}
}

// A rate's peak and mean leave out windows shorter than MinRateWindow
// (the mean weighted by each window's length), and the end-of-run table's
// (a Set of samples) and the report's (a Fold of a tracker's points) agree.
func TestFoldCPUAsTheTable(t *testing.T) {
	d := metrics.ContainerCPUUsage
	var set Set
	var pts []Point
	for i, p := range []struct {
		at time.Duration
		v  float64
	}{{0, 0}, {time.Second, 1}, {2 * time.Second, 2}, {4 * time.Second, 1}, {4*time.Second + 50*time.Millisecond, 9}} {
		set.Add(metrics.Sample{Seq: int64(i), Time: t0.Add(p.at), Points: []metrics.Point{metrics.At(d, p.v)}})
		pts = append(pts, Point{t0.Add(p.at), p.v})
	}
	peak, mean, steady := Fold(pts).Rate()
	if !steady || peak != 2 || mean != (1+2+2*1)/4.0 {
		t.Errorf("fold: peak %v mean %v steady %v, want 2 and 1.25", peak, mean, steady)
	}
	st, ok := set.Get(d)
	if !ok {
		t.Fatal("the set has no CPU")
	}
	if p, m, _ := st.Rate(); p != peak || m != mean {
		t.Errorf("from the samples: peak %v mean %v; from the points: %v %v", p, m, peak, mean)
	}
	if st.Peak != 9 {
		t.Errorf("the highest of every value: %v, want 9", st.Peak)
	}
}

// A Set's window is the time since the sample before, whether or not the
// series was in it: a collector's rate covers the time since its previous
// reading, and the first sample has none (a rate needs two readings).
func TestSetWindowSinceTheSampleBefore(t *testing.T) {
	d := metrics.ContainerCPUUsage
	var set Set
	set.Add(metrics.Sample{Time: t0})
	set.Add(metrics.Sample{Seq: 1, Time: t0.Add(2 * time.Second), Points: []metrics.Point{metrics.At(d, 3)}})
	st, _ := set.Get(d)
	if peak, mean, steady := st.Rate(); !steady || peak != 3 || mean != 3 {
		t.Errorf("rate %v %v %v, want 3 over the 2 s since the first sample", peak, mean, steady)
	}
	if set.Samples() != 2 || !set.Last().Time.Equal(t0.Add(2*time.Second)) {
		t.Errorf("samples %d, last %v", set.Samples(), set.Last().Time)
	}
	var names []string
	set.Each(func(name string, got *metrics.Desc, _ Stat) {
		names = append(names, name)
		if got != d {
			t.Errorf("%s's descriptor %v", name, got)
		}
	})
	if len(names) != 1 || names[0] != d.Name {
		t.Errorf("series %v", names)
	}
}
