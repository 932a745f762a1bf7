package node

import (
	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

// collectMemory reads /proc/meminfo.
func (c *Collector) collectMemory(out *metrics.Batch) error {
	mi, ok, err := readSource(c, c.meminfoFile, "node memory", parseMeminfo)
	if ok {
		memoryPoints(out, mi, c.meminfoFile)
	}
	return err
}

// memoryPoints derives the node memory figures. used is MemTotal -
// MemAvailable: what cannot be had back without swapping or killing. (psutil's
// "used", which MLflow logs, is MemTotal - MemFree - Buffers - Cached -
// SReclaimable instead.) Without MemAvailable (kernels before 3.14) only the
// total is known.
func memoryPoints(out *metrics.Batch, mi procfs.Meminfo, src string) {
	if mi.MemTotalBytes == nil {
		return
	}
	total := float64(*mi.MemTotalBytes)
	out.Add(metrics.NodeMemoryTotal, metrics.MB(total), src)
	if mi.MemAvailableBytes == nil {
		return
	}
	avail := float64(*mi.MemAvailableBytes)
	used := max(total-avail, 0)
	out.Add(metrics.NodeMemoryAvailable, metrics.MB(avail), src)
	out.Add(MemoryUsed, metrics.MB(used), src)
	// The same value under a name like MLflow's
	// system_memory_usage_megabytes, so the two can be put side by side.
	out.Add(MemoryUsage, metrics.MB(used), src)
	if total > 0 {
		out.Add(MemoryUsagePercent, used/total*100, src)
	}
}
