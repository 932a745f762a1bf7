package rapl

import "fmt"

// counter follows one energy_uj counter from its first reading.
type counter struct {
	max   uint64  // max_energy_range_uj: the counter wraps to 0 past it; 0 = unknown
	prev  uint64  // the last reading
	have  bool    // prev holds a reading
	total float64 // µJ counted since the first reading
}

// update takes reading cur and returns the energy used since the previous
// one, in µJ. ok is false on the first reading (the baseline) and when the
// counter went back with no range to say by how much it wrapped (why then
// says so, and the interval is not counted).
//
// A counter that went back wrapped once: (max - prev) + cur. The range is
// minutes of use at full power (234 s at 280 W on one AMD part), so an
// interval longer than that could hide a second wrap; bridge's intervals
// are seconds.
func (c *counter) update(cur uint64) (delta uint64, ok bool, why string) {
	prev, had := c.prev, c.have
	c.prev, c.have = cur, true
	switch {
	case !had:
		return 0, false, ""
	case cur >= prev:
		delta = cur - prev
	case c.max > 0 && prev <= c.max && cur <= c.max:
		delta = c.max - prev + cur
	default:
		return 0, false, fmt.Sprintf("went from %d to %d µJ, max_energy_range_uj %d", prev, cur, c.max)
	}
	c.total += float64(delta)
	return delta, true, ""
}
