package node

import (
	"fmt"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

// collectMemory reads /proc/meminfo.
func (c *Collector) collectMemory() ([]metrics.Point, error) {
	src := c.path("meminfo")
	b, err := c.read(c.meminfoFile)
	var mi procfs.Meminfo
	if err == nil {
		mi, err = parseMeminfo(b)
	}
	if err != nil {
		if isAbsent(err) {
			c.noteAbsent(src, err)
			return nil, nil
		}
		return nil, fmt.Errorf("reading node memory from %s: %w", src, err)
	}
	return memoryPoints(mi, src), nil
}

// memoryPoints derives the node memory figures. used is MemTotal -
// MemAvailable: what cannot be had back without swapping or killing. (psutil's
// "used", which MLflow logs, is MemTotal - MemFree - Buffers - Cached -
// SReclaimable instead.) Without MemAvailable (kernels before 3.14) only the
// total is known.
func memoryPoints(mi procfs.Meminfo, src string) []metrics.Point {
	if mi.MemTotalBytes == nil {
		return nil
	}
	total := float64(*mi.MemTotalBytes)
	pts := []metrics.Point{point(metrics.NodeMemoryTotal, metrics.MB(total), metrics.UnitMegabytes, metrics.ScopeNode, src)}
	if mi.MemAvailableBytes == nil {
		return pts
	}
	avail := float64(*mi.MemAvailableBytes)
	used := max(total-avail, 0)
	pts = append(pts,
		point(metrics.NodeMemoryAvailable, metrics.MB(avail), metrics.UnitMegabytes, metrics.ScopeNode, src),
		point(metrics.NodeMemoryUsed, metrics.MB(used), metrics.UnitMegabytes, metrics.ScopeNode, src),
		// The same value under a name like MLflow's
		// system_memory_usage_megabytes, so the two can be put side by side.
		point(metrics.NodeMemoryUsage, metrics.MB(used), metrics.UnitMegabytes, metrics.ScopeNode, src),
	)
	if total > 0 {
		pts = append(pts, point(metrics.NodeMemoryUsagePercent, used/total*100, metrics.UnitPercentage, metrics.ScopeNode, src))
	}
	return pts
}
