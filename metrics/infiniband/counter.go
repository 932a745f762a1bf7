package infiniband

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/internal/counter"
)

// portCounter follows one counter file of a port from its first reading.
type portCounter struct {
	path string
	desc *metrics.Desc // the port's series it gives
	// max is the value the counter stops at (it saturates: the IBA
	// PortCounters attribute does not wrap); 0 for a 64-bit counter. A data
	// counter under counters/ is 64-bit on HCAs with extended width and 32
	// otherwise: it is taken as 32-bit until it reads more.
	max uint64

	c    counter.Counter // a counter that goes back was reset: it counts from zero again
	last time.Time
	secs float64 // between the last two readings
	gone bool    // the device has no such counter (no PMA): not read again
}

// update takes reading cur at now and returns the growth since the
// previous reading. ok is false on the first reading, and when the growth
// is unknown: a counter at its maximum has stopped there (why then says so
// once), so its growth in the interval is a lower bound, not a figure.
// A counter that went back was reset (perfquery -R, a driver reload): it
// counts from zero again, as a rate over a reset must not be negative.
func (k *portCounter) update(cur uint64, now time.Time) (delta uint64, ok bool, why string) {
	k.secs, k.last = now.Sub(k.last).Seconds(), now
	if cur > k.max && k.max > 0 {
		k.max = 0 // above the width assumed: a 64-bit counter (extended width)
	}
	if k.max > 0 && cur == k.max {
		why = fmt.Sprintf("InfiniBand counter at its maximum (%d): it stops there and counts nothing more until it is reset", k.max)
		if k.desc.Unit == metrics.UnitMegabytesPerSecond {
			// A data counter at all ones: a 32-bit one that stopped.
			k.c.Set(cur)
			return 0, false, why
		}
	}
	delta, ok = k.c.Update(cur)
	return delta, ok, why
}

// errNoPMA is a counter file that says the device has no Performance
// Management Agent to ask: "N/A (no PMA)".
var errNoPMA = errors.New("no PMA")

// parseCounter parses a counter file: a decimal count.
func parseCounter(b []byte) (uint64, error) {
	v, ok := kfile.Uint(b)
	if !ok {
		s := strings.TrimSpace(string(b))
		if strings.HasPrefix(s, "N/A") {
			return 0, fmt.Errorf("%w: %q", errNoPMA, s)
		}
		return 0, fmt.Errorf("want a count, got %q", s)
	}
	return v, nil
}
