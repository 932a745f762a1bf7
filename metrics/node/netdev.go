package node

import (
	"time"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/internal/counter"
)

// netTracker accumulates traffic of the network namespace since the first
// reading, per interface, so that an interface that appears, disappears or
// has its counters reset never makes the totals go backwards.
type netTracker struct {
	started  bool
	prev     map[string]procfs.NetDevLine
	prevTime time.Time
	rx, tx   float64 // bytes since the first reading
}

// update takes a reading of /proc/net/dev taken at now and returns the growth
// since the previous one. ok is false on the first reading (the baseline).
func (t *netTracker) update(nd procfs.NetDev, now time.Time) (rxDelta, txDelta, seconds float64, ok bool) {
	cur := make(map[string]procfs.NetDevLine, len(nd))
	for name, l := range nd {
		if name == "lo" { // loopback never leaves the namespace
			continue
		}
		cur[name] = l
	}
	defer func() { t.prev, t.prevTime, t.started = cur, now, true }()
	if !t.started {
		return 0, 0, 0, false
	}
	// An interface not seen before was created since the previous
	// reading: all its traffic is new (its previous reading is the zero
	// value). One whose counter went down was recreated: it counts from 0.
	for name, l := range cur {
		p := t.prev[name]
		rxDelta += float64(counter.Growth(p.RxBytes, l.RxBytes))
		txDelta += float64(counter.Growth(p.TxBytes, l.TxBytes))
	}
	t.rx += rxDelta
	t.tx += txDelta
	seconds = now.Sub(t.prevTime).Seconds()
	return rxDelta, txDelta, seconds, true
}

// collectNet reads <ProcRoot>/net/dev (a link to self/net/dev: the namespace
// of the reading process, which the child shares).
func (c *Collector) collectNet(out *metrics.Batch, now time.Time) error {
	src := c.netDevFile
	nd, ok, err := readSource(c, src, "network counters", parseNetDev)
	if !ok {
		return err
	}
	rx, tx, secs, ok := c.net.update(nd, now)
	if !ok {
		return nil
	}
	out.Add(NetnsReceive, metrics.MB(c.net.rx), src)
	out.Add(NetnsTransmit, metrics.MB(c.net.tx), src)
	if secs > 0 {
		out.Add(NetnsReceiveRate, metrics.MB(rx)/secs, src)
		out.Add(NetnsTransmitRate, metrics.MB(tx)/secs, src)
	}
	return nil
}
