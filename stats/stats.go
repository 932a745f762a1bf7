// Package stats is bridge's one model of a series over a span of time (a
// job, a minute): its first, last, highest and mean values, and for a rate
// its peak and mean over steady windows. The end-of-run table (package
// summary) keeps one a series from the samples as they are taken (Set);
// the job's report makes one from a series' points as a tracker returns
// them (Fold); both read it the same way.
package stats

import (
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// MinRateWindow is the shortest window over which a rate's steady peak and
// mean are taken (Stat.Rate): a rate over a shorter one, such as the
// sample taken as the child exits tens of milliseconds after the one
// before, is mostly the counter's lag (the kernel charges CPU time at
// ticks), not the job.
const MinRateWindow = time.Second

// Stat follows one series: the values added to it, oldest first. The zero
// Stat has seen none. Not safe for concurrent use.
type Stat struct {
	First, Last, Peak float64
	PeakAt            time.Time // when Peak was read
	Sum               float64
	N                 int // values added

	// The values over windows of at least MinRateWindow: their peak, and
	// their sum weighted by each window's length in seconds.
	steadyPeak, steadyWeighted, steadySecs float64
	steady                                 bool // one was added
}

// Add adds the value v read at t. window is the time the value covers
// when it is a rate over the time since its previous reading (a CPU's
// cores): the time since the previous sample (Set) or point (Fold); 0 for
// the first.
func (s *Stat) Add(t time.Time, v float64, window time.Duration) {
	if s.N == 0 {
		s.First, s.Peak, s.PeakAt = v, v, t
	}
	s.Last = v
	s.Sum += v
	s.N++
	if v > s.Peak {
		s.Peak, s.PeakAt = v, t
	}
	if window >= MinRateWindow {
		if !s.steady || v > s.steadyPeak {
			s.steadyPeak, s.steady = v, true
		}
		s.steadyWeighted += v * window.Seconds()
		s.steadySecs += window.Seconds()
	}
}

// Mean is the average of the values added; 0 for none.
func (s Stat) Mean() float64 {
	if s.N == 0 {
		return 0
	}
	return s.Sum / float64(s.N)
}

// Rate is the peak and mean of a rate over the time since its previous
// reading (a CPU's cores), as the end-of-run table and the report show
// them: over windows of at least MinRateWindow (the mean weighted by each
// window's length), so that the mean never exceeds the peak; over every
// value when no such window was seen (a job too short, or sampled too
// fast). steady says which.
func (s Stat) Rate() (peak, mean float64, steady bool) {
	if !s.steady || s.steadySecs <= 0 {
		return s.Peak, s.Mean(), false
	}
	return s.steadyPeak, s.steadyWeighted / s.steadySecs, true
}

// Point is one value of a series, as a tracker returns it.
type Point struct {
	Time  time.Time
	Value float64
}

// Fold is the Stat of a series' points, oldest first: each a rate over the
// time since the point before.
func Fold(pts []Point) Stat {
	var s Stat
	for i, p := range pts {
		var window time.Duration
		if i > 0 {
			window = p.Time.Sub(pts[i-1].Time)
		}
		s.Add(p.Time, p.Value, window)
	}
	return s
}

// Set keeps a Stat per series of the samples added to it: each value a rate
// over at least the time since the sample before, as a collector computes
// a rate since its previous reading. Not safe for concurrent use.
type Set struct {
	series  map[string]*series // by name
	samples int
	first   time.Time // when the first sample was taken
	last    metrics.Sample
	dists   map[string]func() *Dist // KeepDist's, by name
}

// series is one Stat of a Set, and its descriptor.
type series struct {
	Stat
	desc *metrics.Desc // nil for a point known by its name only
	dist *Dist         // nil unless KeepDist asked for it
}

// KeepDist has the Set keep the distribution of series d's values over
// the run too (Dist, made by mk when d is first seen), a rate weighted
// as FoldDist weighs it: fixed memory however long the run. Call it before
// the first Add.
func (s *Set) KeepDist(d *metrics.Desc, mk func() *Dist) {
	if s.dists == nil {
		s.dists = map[string]func() *Dist{}
	}
	s.dists[d.Name] = mk
}

// Dist is the distribution KeepDist kept of series d, nil when it was not
// asked for or d never seen.
func (s *Set) Dist(d *metrics.Desc) *Dist {
	if st, ok := s.series[d.Name]; ok {
		return st.dist
	}
	return nil
}

// Add takes one sample into account.
func (s *Set) Add(smp metrics.Sample) {
	if s.series == nil {
		s.series = map[string]*series{}
	}
	var window time.Duration
	if s.samples > 0 {
		window = smp.Time.Sub(s.last.Time)
	} else {
		s.first = smp.Time
	}
	s.samples++
	s.last = smp
	for _, p := range smp.Points {
		st := s.series[p.Name()]
		if st == nil {
			st = &series{desc: p.Desc}
			if mk := s.dists[p.Name()]; mk != nil {
				st.dist = mk()
			}
			s.series[p.Name()] = st
		}
		st.Add(smp.Time, p.Value, window)
		if st.dist != nil {
			st.dist.addWindow(p.Value, window)
		}
	}
}

// Get returns the Stat of series d and whether it was seen.
func (s *Set) Get(d *metrics.Desc) (Stat, bool) {
	st, ok := s.series[d.Name]
	if !ok {
		return Stat{}, false
	}
	return st.Stat, true
}

// Samples is how many samples were added.
func (s *Set) Samples() int { return s.samples }

// Span is the time between the first sample added and the last.
func (s *Set) Span() time.Duration { return s.last.Time.Sub(s.first) }

// Last is the last sample added.
func (s *Set) Last() metrics.Sample { return s.last }

// Each calls f with every series seen: its name, its descriptor (nil for
// a point known by its name only) and its Stat, in no particular order.
func (s *Set) Each(f func(name string, d *metrics.Desc, st Stat)) {
	for name, st := range s.series {
		f(name, st.desc, st.Stat)
	}
}
