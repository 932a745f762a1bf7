package node

import (
	"context"
	"time"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/internal/counter"
)

// maxInterfaceBytesPerSecond is the stated physical bound of one network
// interface: five times the fastest NIC today (1.6 Tb/s moves 200 GB/s); a
// veth is a memory copy, well below it. A counter that grows faster over
// an interval is a glitch: that interval is not counted.
const maxInterfaceBytesPerSecond = 1e12

// netTracker accumulates traffic of the network namespace since the first
// reading, over the interfaces counted (netTopology), each counter followed
// by the one counter rule (metrics/internal/counter), so that an interface
// that appears, disappears or has its counters reset never makes the
// totals go backwards, and a glitch never makes them jump. Every
// interface's counters are followed, counted or not, so that one that
// becomes counted (a bridge whose last port left) adds only its traffic
// from then on.
type netTracker struct {
	started  bool
	ifs      map[string]*netCounters
	prevTime time.Time
	rx, tx   float64 // bytes since the first reading
}

// netCounters are one interface's two counters.
type netCounters struct{ rx, tx counter.Counter }

// update takes a reading of /proc/net/dev taken at now and returns the
// growth since the previous one of the interfaces counts says are counted.
// ok is false on the first reading (the baseline), and rates is false when
// a counted interface's interval was not counted (a reset, a glitch): the
// growth is then short of that interface's, a total but no rate.
func (t *netTracker) update(nd procfs.NetDev, now time.Time, counts func(string) bool) (rxDelta, txDelta, seconds float64, ok, rates bool) {
	defer func() { t.prevTime, t.started = now, true }()
	seen := make(map[string]bool, len(nd))
	if t.ifs == nil {
		t.ifs = map[string]*netCounters{}
	}
	rates = true
	for name, l := range nd {
		if name == "lo" { // loopback never leaves the namespace
			continue
		}
		seen[name] = true
		k := t.ifs[name]
		if k == nil {
			k = &netCounters{rx: counter.Counter{MaxRate: maxInterfaceBytesPerSecond}, tx: counter.Counter{MaxRate: maxInterfaceBytesPerSecond}}
			t.ifs[name] = k
			if t.started {
				// Created since the previous reading: it counted from 0
				// then, so all its traffic is new (within the bound).
				k.rx.Set(0, t.prevTime)
				k.tx.Set(0, t.prevTime)
			}
		}
		add := counts(name)
		for _, c := range []struct {
			k   *counter.Counter
			v   uint64
			sum *float64
		}{{&k.rx, l.RxBytes, &rxDelta}, {&k.tx, l.TxBytes, &txDelta}} {
			st := c.k.Update(c.v, now)
			switch {
			case !add:
			case st.Counted():
				*c.sum += float64(st.Delta)
			case st.Skip != counter.Baseline:
				rates = false
			}
		}
	}
	for name := range t.ifs {
		if !seen[name] {
			delete(t.ifs, name) // gone: one that comes back counts from 0 again
		}
	}
	if !t.started {
		return 0, 0, 0, false, false
	}
	t.rx += rxDelta
	t.tx += txDelta
	return rxDelta, txDelta, now.Sub(t.prevTime).Seconds(), true, rates
}

// collectNet reads <ProcRoot>/net/dev (a link to self/net/dev: the namespace
// of the reading process, which the child shares), and the interfaces'
// stacking from <SysRoot>/class/net when the set of interfaces changed.
func (c *Collector) collectNet(ctx context.Context, out *metrics.Batch, now time.Time) error {
	src := c.netDevFile
	nd, ok, err := readSource(c, src, "network counters", parseNetDev)
	if !ok {
		return err
	}
	c.mu.Lock()
	topo := c.topo
	c.mu.Unlock()
	if !topo.sameNames(nd) {
		t := readNetTopology(ctx, c.classNet, nd)
		topo = &t
		c.mu.Lock()
		c.topo = topo
		c.mu.Unlock()
	}
	rx, tx, secs, ok, rates := c.net.update(nd, now, topo.counts)
	if !ok {
		return nil
	}
	out.Add(NetnsReceive, metrics.MB(c.net.rx), src)
	out.Add(NetnsTransmit, metrics.MB(c.net.tx), src)
	if rates && secs > 0 {
		out.Add(metrics.NetnsReceiveRate, metrics.MB(rx)/secs, src)
		out.Add(metrics.NetnsTransmitRate, metrics.MB(tx)/secs, src)
	}
	return nil
}
