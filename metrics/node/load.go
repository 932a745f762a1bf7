package node

import (
	"fmt"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

// collectLoad reads /proc/loadavg.
func (c *Collector) collectLoad(out *metrics.Batch) error {
	src := c.loadavgFile
	b, err := c.read(src)
	var la procfs.LoadAvg
	if err == nil {
		la, err = parseLoadavg(b)
	}
	if err != nil {
		if isAbsent(err) {
			c.noteAbsent(src, err)
			return nil
		}
		return fmt.Errorf("reading node load average from %s: %w", src, err)
	}
	loadPoints(out, la, src)
	return nil
}

func loadPoints(out *metrics.Batch, la procfs.LoadAvg, src string) {
	out.Add(metrics.NodeLoad1, la.Load1, src)
	out.Add(metrics.NodeLoad5, la.Load5, src)
	out.Add(metrics.NodeLoad15, la.Load15, src)
}
