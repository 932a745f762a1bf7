package spool

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/bridge-dev/bridge/metrics"
)

// Bounds on what one sample record may hold, whatever a collector emits
// (--scrape-passthrough can emit a series per label set).
const (
	// defaultMaxPoints is how many points a sample keeps: a node with eight
	// GPUs gives a few hundred.
	defaultMaxPoints = 10000
	// MaxKey is the longest metric name kept: MLflow refuses keys over 250
	// characters (its "system/" prefix included, which its sink checks).
	MaxKey = 250
)

// Tier is how a series fares under the bounds of a sample: the lower
// the tier, the sooner it is left out.
type Tier int

// The tiers, first left out first.
const (
	// TierPassedThrough: a series passed through from a --scrape
	// endpoint (metrics.ScopeProm), as many as the exporter has.
	TierPassedThrough Tier = iota
	// TierInstance: one series of many instances of a node's device (an
	// InfiniBand port, a CPU package: a metrics.Desc bound by For).
	TierInstance
	// TierOwn: the container's, the node's, the process tree's and the
	// GPUs' series, what bridge is for.
	TierOwn
	tiers
)

// String names the tier as the end-of-run table does.
func (t Tier) String() string {
	switch t {
	case TierPassedThrough:
		return "passed through"
	case TierInstance:
		return "per port or device"
	}
	return "bridge's own"
}

// TierOf is p's tier.
func TierOf(p *metrics.Point) Tier {
	switch d := p.Desc; {
	case d == nil:
		return TierOwn
	case d.Scope == metrics.ScopeProm:
		return TierPassedThrough
	case len(d.Labels) > 0:
		return TierInstance
	}
	return TierOwn
}

// bounded is what bound keeps of a sample, and what it left out.
type bounded struct {
	pts      []metrics.Point
	longName int           // points whose name is longer than MaxKey
	over     int           // points past the count or byte bound
	byTier   [tiers]int    // over, by tier
	first    [tiers]string // a series of each tier left out (its template's name where it has one)
}

// bound keeps what a sample record may hold: names of at most MaxKey bytes,
// at most maxPoints points, and at most budget bytes of encoded points
// (size gives a point's). Over a bound, the lowest tier goes first
// (passed-through series, then per-instance ones, then bridge's own), and
// in a tier later points before earlier ones; the order of what is kept
// does not change. A budget < 0 is no byte bound.
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
	for tier := range tiers {
		for i := len(pts) - 1; i >= 0 && (n > maxPoints || (budget >= 0 && used > budget)); i-- {
			if !keep[i] || TierOf(&pts[i]) != tier {
				continue
			}
			keep[i] = false
			n--
			b.over++
			b.byTier[tier]++
			b.first[tier] = seriesName(&pts[i])
			if budget >= 0 {
				used -= size(&pts[i])
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

// seriesName is p's series as a message names it: its template's name
// (node_infiniband_<device>_port_<port>_...) for a bound one.
func seriesName(p *metrics.Point) string {
	if p.Desc != nil && p.Desc.Of != nil && len(p.Desc.Labels) > 0 {
		return p.Desc.Of.Name
	}
	return p.Name()
}

// fitInfo leaves values out of info until a record whose encoding is
// over bytes too long fits: those of the largest family first (the tags
// under one "bridge.<part>." prefix: a collector that describes ten
// thousand ports), and in it the longest. Each value's encoded size is
// found once and the order by one sort, so a record of n values costs
// O(n log n), whatever is left out. It returns the values kept (a new
// map; info is not changed) and how many were left out, the largest
// family's first.
func fitInfo(info map[string]string, over int) (kept map[string]string, left int, family string) {
	type entry struct {
		key        string
		cost       int // its "key":"value", in the record's JSON, and a comma
		familySize int
	}
	es := make([]entry, 0, len(info))
	families := map[string]int{}
	for k, v := range info {
		e := entry{key: k, cost: jsonLen(k) + 1 + jsonLen(v) + 1}
		families[familyOf(k)] += e.cost
		es = append(es, e)
	}
	for i := range es {
		es[i].familySize = families[familyOf(es[i].key)]
	}
	sort.Slice(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if a.familySize != b.familySize {
			return a.familySize > b.familySize
		}
		if a.cost != b.cost {
			return a.cost > b.cost
		}
		return a.key < b.key
	})
	drop := map[string]bool{}
	for _, e := range es {
		if over <= 0 {
			break
		}
		drop[e.key] = true
		over -= e.cost
	}
	kept = make(map[string]string, len(info)-len(drop))
	for k, v := range info {
		if !drop[k] {
			kept[k] = v
		}
	}
	if len(es) > 0 && len(drop) > 0 {
		family = familyOf(es[0].key)
	}
	return kept, len(drop), family
}

// familyOf is a tag's family: its key up to its second dot
// ("bridge.infiniband"), the whole key when it has fewer.
func familyOf(key string) string {
	first := strings.IndexByte(key, '.')
	if first < 0 {
		return key
	}
	if second := strings.IndexByte(key[first+1:], '.'); second >= 0 {
		return key[:first+1+second]
	}
	return key
}

// jsonLen is the length of s as encoding/json writes it in a string.
func jsonLen(s string) int {
	b, err := json.Marshal(s)
	if err != nil {
		return len(s) + 2
	}
	return len(b)
}

// firstOf is the first name given, lowest tier first.
func firstOf(names [tiers]string) string {
	for _, n := range names {
		if n != "" {
			return n
		}
	}
	return ""
}
