// Package counter follows the cumulative counters collectors read (the
// bytes an interface or a port moved, a CPU package's or a GPU's energy, a
// port's errors): the growth from one reading to the next, its rate, and
// the growth since the first, with what a reading below the previous one
// means decided here, once, for every collector:
//
//   - a wrap only when the counter wraps (Max) and the previous reading was
//     within one interval's largest possible step (MaxRate × the interval)
//     of its maximum: the growth is then what it took to reach the maximum
//     and what it counted since;
//   - any other step back is a reset (a driver reloaded, an interface
//     recreated, perfquery -R) or a glitch: the interval gives no growth
//     and no rate, and the counter is followed on from the new reading;
//   - a growth faster than the device can go (MaxRate: its link rate, its
//     power bound) is no figure either: that interval is dropped.
//
// Nothing that is dropped reaches Total, so a total since bridge started
// (the energy in the end-of-run table) never holds a false wrap or a
// spike: a RAPL counter read 1 µJ lower, far from its maximum, is a
// glitch, not the 262 kJ of a wrap.
package counter

import (
	"fmt"
	"time"
)

// Slack is how far above MaxRate a growth may measure and still count:
// the interval is timed by the reader's clock around reads that take
// time themselves (an InfiniBand counter is a management datagram to the
// HCA), so a device at its limit can measure a little above it.
const Slack = 1.1

// Skip says why an interval gave no growth.
type Skip uint8

// The reasons.
const (
	Counted  Skip = iota // it did: not a skip
	Baseline             // the first reading, or the first since Set
	NoTime               // no time passed since the previous reading (a clock step)
	WentBack             // below the previous reading, and not a wrap: a reset or a glitch
	TooFast              // faster than MaxRate allows
)

// Step is what one reading says of the interval since the previous.
type Step struct {
	Delta uint64  // the growth over the interval; 0 unless Skip is Counted
	Secs  float64 // the interval's length, by the reader's clock
	Skip  Skip
	Prev  uint64 // the previous reading (for a note)
}

// Counted reports whether the interval gave a growth.
func (s Step) Counted() bool { return s.Skip == Counted }

// Rate is the growth per second over the interval (0 when not Counted).
func (s Step) Rate() float64 {
	if !s.Counted() {
		return 0
	}
	return float64(s.Delta) / s.Secs
}

// Why says in words why the interval was not counted, for a collector's
// one note; "" when it was, or for a baseline.
func (s Step) Why(cur uint64, c *Counter) string {
	switch s.Skip {
	case WentBack:
		if c.Max > 0 {
			return fmt.Sprintf("went back from %d to %d, %d short of its maximum %d: more than %.0f a second for %.3g s could reach, so a reset or a glitch, not a wrap",
				s.Prev, cur, c.Max-min(s.Prev, c.Max), c.Max, c.MaxRate, s.Secs)
		}
		return fmt.Sprintf("went back from %d to %d: a reset or a glitch", s.Prev, cur)
	case TooFast:
		return fmt.Sprintf("grew by %d in %.3g s, %.4g a second, above the device's limit of %.4g", s.Delta, s.Secs, float64(s.Delta)/s.Secs, c.MaxRate)
	case NoTime:
		return "read again with no time passed"
	}
	return ""
}

// Counter follows one counter from its first reading. Not safe for
// concurrent use (a collector's Collect owns it).
type Counter struct {
	// Max is the largest value of a counter that wraps to 0 past it
	// (RAPL's max_energy_range_uj); 0 for one that does not wrap (64-bit,
	// or one that stops at its maximum).
	Max uint64
	// MaxRate is the largest growth a second the device can make: its link
	// rate, its power bound (a stated physical bound where the device does
	// not say). 0: unknown; then no wrap can be told from a reset, and no
	// growth is too fast.
	MaxRate float64
	// Total is the growth counted since the first reading.
	Total float64

	last uint64
	at   time.Time
	have bool
}

// Last is the previous reading, and whether there was one.
func (c *Counter) Last() (v uint64, ok bool) { return c.last, c.have }

// Set takes v, read at now, as the last reading without counting anything:
// a counter read again after an interval that was not counted (one stuck
// at its maximum) counts from there.
func (c *Counter) Set(v uint64, now time.Time) { c.last, c.at, c.have = v, now, true }

// Update takes reading cur, read at now, and says what the interval since
// the previous reading gave (the package's rule); a Counted growth is added
// to Total.
func (c *Counter) Update(cur uint64, now time.Time) Step {
	prev, at, had := c.last, c.at, c.have
	c.Set(cur, now)
	st := Step{Prev: prev, Secs: now.Sub(at).Seconds()}
	switch {
	case !had:
		st.Skip = Baseline
		return st
	case st.Secs <= 0:
		st.Skip = NoTime
		return st
	case cur >= prev:
		st.Delta = cur - prev
	case c.wrapped(prev, cur, st.Secs):
		st.Delta = c.Max - prev + cur
	default:
		st.Skip = WentBack
		return st
	}
	if c.MaxRate > 0 && float64(st.Delta) > c.MaxRate*Slack*st.Secs {
		st.Skip = TooFast
		return st
	}
	c.Total += float64(st.Delta)
	return st
}

// wrapped reports whether a step back from prev to cur, secs apart, is a
// wrap: the counter wraps, both readings are within its range, and prev
// was within the largest step the device can make in secs of its maximum.
// An interval long enough for more than one wrap (minutes of RAPL at full
// power) could hide a second one; bridge's intervals are seconds.
func (c *Counter) wrapped(prev, cur uint64, secs float64) bool {
	if c.Max == 0 || c.MaxRate <= 0 || prev > c.Max || cur > c.Max {
		return false
	}
	return float64(c.Max-prev) <= c.MaxRate*Slack*secs
}
