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

// portCounter follows one counter file of a port from its first reading,
// by the one counter rule (metrics/internal/counter): these counters stop
// at their maximum rather than wrap, so any step back is a reset or a
// glitch, and a data counter growing faster than the port's link is a
// glitch too.
type portCounter struct {
	path string
	desc *metrics.Desc // the port's series it gives
	// max is the value the counter stops at (it saturates: the IBA
	// PortCounters attribute does not wrap); 0 for a 64-bit counter. A data
	// counter under counters/ is 64-bit on HCAs with extended width and 32
	// otherwise: it is taken as 32-bit until it reads more.
	max uint64

	c    counter.Counter // MaxRate: a data counter's link rate in 4-byte words a second
	gone bool            // the device has no such counter (no PMA): not read again
}

// update takes reading cur at now and says what the interval since the
// previous reading gave (counter.Update). A counter at its maximum has
// stopped there (why then says so once), so a data counter's growth in the
// interval is a lower bound, not a figure: not counted.
func (k *portCounter) update(cur uint64, now time.Time) (st counter.Step, why string) {
	if cur > k.max && k.max > 0 {
		k.max = 0 // above the width assumed: a 64-bit counter (extended width)
	}
	if k.max > 0 && cur == k.max {
		why = fmt.Sprintf("InfiniBand counter at its maximum (%d): it stops there and counts nothing more until it is reset", k.max)
		if k.desc.Unit == metrics.UnitMegabytesPerSecond {
			// A data counter at all ones: a 32-bit one that stopped.
			k.c.Set(cur, now)
			return counter.Step{Skip: counter.Baseline}, why
		}
	}
	st = k.c.Update(cur, now)
	if w := st.Why(cur, &k.c); w != "" {
		why = "InfiniBand counter: an interval not counted: " + w
	}
	return st, why
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
