package node

import (
	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

// collectLoad reads /proc/loadavg.
func (c *Collector) collectLoad(out *metrics.Batch) error {
	la, ok, err := readSource(c, c.loadavgFile, "node load average", parseLoadavg)
	if ok {
		loadPoints(out, la, c.loadavgFile)
	}
	return err
}

func loadPoints(out *metrics.Batch, la procfs.LoadAvg, src string) {
	out.Add(Load1, la.Load1, src)
	out.Add(Load5, la.Load5, src)
	out.Add(Load15, la.Load15, src)
}
