package node

import (
	"fmt"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

// collectCPU reads /proc/stat: the online CPU count, and utilization over the
// interval since the previous call (omitted on the first).
func (c *Collector) collectCPU(out *metrics.Batch) error {
	src := c.statFile
	b, err := c.read(src)
	var total procfs.CPUStat
	var ncpu int
	if err == nil {
		total, ncpu, err = parseProcStat(b)
	}
	if err != nil {
		if isAbsent(err) {
			c.noteAbsent(src, err)
			return nil
		}
		return fmt.Errorf("reading node CPU times from %s: %w", src, err)
	}
	cpuPoints(out, c.prevCPU, total, ncpu, src)
	c.prevCPU = &total
	return nil
}

// cpuPoints turns a /proc/stat reading (and the previous aggregate, nil on the
// first call) into points.
func cpuPoints(out *metrics.Batch, prev *procfs.CPUStat, total procfs.CPUStat, ncpu int, src string) {
	// /proc/stat lists one cpuN line per online CPU.
	out.Add(metrics.NodeCPUCount, float64(ncpu), src)
	if prev != nil {
		if u, ok := cpuUtilization(*prev, total); ok {
			out.Add(metrics.NodeCPUUtilization, u, src)
		}
	}
}

// cpuTimes returns busy and total time of one /proc/stat cpu line. Guest and
// guest_nice are left out: the kernel already counts them in user and nice.
// Idle and iowait are both "not running anything".
func cpuTimes(s procfs.CPUStat) (busy, total float64) {
	total = s.User + s.Nice + s.System + s.Idle + s.Iowait + s.IRQ + s.SoftIRQ + s.Steal
	return total - s.Idle - s.Iowait, total
}

// cpuUtilization is busy time over total time between two readings, in
// percent. ok is false when no time passed (or counters went backwards, which
// iowait can do), since no honest value exists then.
func cpuUtilization(prev, cur procfs.CPUStat) (pct float64, ok bool) {
	pb, pt := cpuTimes(prev)
	cb, ct := cpuTimes(cur)
	dt := ct - pt
	if dt <= 0 {
		return 0, false
	}
	pct = (cb - pb) / dt * 100
	return min(max(pct, 0), 100), true
}
