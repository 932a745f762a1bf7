package spool

import (
	"github.com/bridge-dev/bridge/metrics"
)

// Bounds on what one sample record may hold, whatever a collector emits
// (--scrape-passthrough can emit a series per label set).
const (
	// DefaultMaxPoints is how many points a sample keeps: a node with eight
	// GPUs gives a few hundred.
	DefaultMaxPoints = 10000
	// MaxKey is the longest metric name kept: MLflow refuses keys over 250
	// characters (its "system/" prefix included, which its sink checks).
	MaxKey = 250
)

// bounded is what bound keeps of a sample, and what it left out.
type bounded struct {
	pts      []metrics.Point
	longName int // points whose name is longer than MaxKey
	over     int // points past the count or byte bound
}

// bound keeps what a sample record may hold: names of at most MaxKey bytes,
// at most maxPoints points, and at most budget bytes of encoded points
// (size gives a point's). Over a bound, series passed through from a
// scrape go before bridge's own, and later points before earlier ones;
// the order of what is kept does not change. A budget < 0 is no byte
// bound.
func bound(pts []metrics.Point, maxPoints, budget int, size func(*metrics.Point) int) bounded {
	var b bounded
	keep := make([]bool, len(pts))
	n := 0
	for i := range pts {
		if len(pts[i].Name()) > MaxKey {
			b.longName++
			continue
		}
		keep[i] = true
		n++
	}
	used := 0
	if budget >= 0 {
		for i := range pts {
			if keep[i] {
				used += size(&pts[i])
			}
		}
	}
	// Passed-through series first, each pass from the end.
	for _, passed := range []bool{true, false} {
		for i := len(pts) - 1; i >= 0 && (n > maxPoints || (budget >= 0 && used > budget)); i-- {
			if keep[i] && passedThrough(pts[i]) == passed {
				keep[i] = false
				n--
				b.over++
				if budget >= 0 {
					used -= size(&pts[i])
				}
			}
		}
	}
	b.pts = make([]metrics.Point, 0, n)
	for i, p := range pts {
		if keep[i] {
			b.pts = append(b.pts, p)
		}
	}
	return b
}

// passedThrough reports whether p is a series passed through from a scrape.
func passedThrough(p metrics.Point) bool { return p.Desc != nil && p.Desc.Scope == metrics.ScopeProm }
