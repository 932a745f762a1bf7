// Package counter follows the cumulative counters collectors read (the
// bytes an interface moved, a CPU package's or a GPU's energy, a port's
// errors): the growth from one reading to the next and since the first,
// with what a reading below the previous one means decided here, once.
package counter

// Growth is the growth of a counter read as prev and then cur, for a
// counter that does not wrap: one that went back was reset (an interface
// recreated, perfquery -R, a driver or GPU reset) and counts from 0
// again, so all of cur is new. A counter not seen before (prev 0) grows
// by all of cur.
func Growth(prev, cur uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// Counter follows one counter from its first reading. The zero value is a
// counter that is reset when it goes back (Growth); set Wraps for one that
// wraps. Not safe for concurrent use (a collector's Collect owns it).
type Counter struct {
	// Wraps says the counter wraps to 0 past Max (RAPL's energy_uj past
	// max_energy_range_uj) instead of being reset.
	Wraps bool
	// Max is the largest value of a counter that Wraps; 0: unknown, and a
	// reading below the previous one then cannot be told from a reset: that
	// interval is not counted.
	Max uint64
	// Total is the growth since the first reading.
	Total float64

	last uint64
	have bool
}

// Last is the previous reading, and whether there was one.
func (c *Counter) Last() (v uint64, ok bool) { return c.last, c.have }

// Set takes v as the last reading without counting anything: a counter
// read again after an interval that was not counted (one stuck at its
// maximum) counts from there.
func (c *Counter) Set(v uint64) { c.last, c.have = v, true }

// Update takes reading cur and returns the growth since the previous one,
// and adds it to Total. ok is false on the first reading (the baseline),
// and for a counter that Wraps when it went back with no Max to tell by
// how much (or past it): that interval is not counted.
//
// A counter that Wraps and went back wrapped once: (Max - previous) +
// cur. The range is minutes of use at full power (234 s at 280 W on one
// AMD CPU package), so an interval longer than that could hide a second
// wrap; bridge's intervals are seconds.
func (c *Counter) Update(cur uint64) (delta uint64, ok bool) {
	prev, had := c.last, c.have
	c.last, c.have = cur, true
	switch {
	case !had:
		return 0, false
	case cur >= prev || !c.Wraps:
		delta = Growth(prev, cur)
	case c.Max > 0 && prev <= c.Max && cur <= c.Max:
		delta = c.Max - prev + cur
	default:
		return 0, false
	}
	c.Total += float64(delta)
	return delta, true
}
