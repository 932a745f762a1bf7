package node

import (
	"errors"
	"fmt"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

// pressureResources are the files under /proc/pressure.
var pressureResources = []string{"cpu", "memory", "io"}

// collectPressure reads /proc/pressure/{cpu,memory,io}: host-wide stall
// shares. A kernel without PSI (or booted with psi=0) has no data.
func (c *Collector) collectPressure() ([]metrics.Point, error) {
	var pts []metrics.Point
	var errs []error
	for i, res := range pressureResources {
		src := c.pressureFiles[i]
		b, err := c.read(src)
		var ps procfs.PSIStats
		if err == nil {
			ps, err = parsePSI(b)
		}
		if err != nil {
			if isAbsent(err) {
				c.noteAbsent(src, err)
				continue
			}
			errs = append(errs, fmt.Errorf("reading node pressure from %s: %w", src, err))
			continue
		}
		pts = append(pts, pressurePoints(res, ps, src)...)
	}
	return pts, errors.Join(errs...)
}

// pressurePoints gives the avg10 share of each line present. The cpu file
// has no "full" line on kernels before 5.13: that point is then omitted.
func pressurePoints(res string, ps procfs.PSIStats, src string) []metrics.Point {
	var pts []metrics.Point
	if ps.Some != nil {
		pts = append(pts, point(metrics.NodePressure(res, "some"), ps.Some.Avg10, metrics.UnitPercentage, metrics.ScopeNode, src))
	}
	if ps.Full != nil {
		pts = append(pts, point(metrics.NodePressure(res, "full"), ps.Full.Avg10, metrics.UnitPercentage, metrics.ScopeNode, src))
	}
	return pts
}
