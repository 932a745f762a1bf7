package node

import (
	"fmt"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

// collectLoad reads /proc/loadavg.
func (c *Collector) collectLoad() ([]metrics.Point, error) {
	src := c.path("loadavg")
	b, err := c.read(c.loadavgFile)
	var la procfs.LoadAvg
	if err == nil {
		la, err = parseLoadavg(b)
	}
	if err != nil {
		if isAbsent(err) {
			c.noteAbsent(src, err)
			return nil, nil
		}
		return nil, fmt.Errorf("reading node load average from %s: %w", src, err)
	}
	return loadPoints(la, src), nil
}

func loadPoints(la procfs.LoadAvg, src string) []metrics.Point {
	return []metrics.Point{
		point(metrics.NodeLoad1, la.Load1, metrics.UnitLoad, metrics.ScopeNode, src),
		point(metrics.NodeLoad5, la.Load5, metrics.UnitLoad, metrics.ScopeNode, src),
		point(metrics.NodeLoad15, la.Load15, metrics.UnitLoad, metrics.ScopeNode, src),
	}
}
