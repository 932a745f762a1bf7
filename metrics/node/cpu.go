package node

import (
	"fmt"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

// collectCPU reads /proc/stat: the online CPU count, and utilization over the
// interval since the previous call (omitted on the first).
func (c *Collector) collectCPU() ([]metrics.Point, error) {
	src := c.path("stat")
	b, err := c.read(c.statFile)
	var total procfs.CPUStat
	var ncpu int
	if err == nil {
		total, ncpu, err = parseProcStat(b)
	}
	if err != nil {
		if isAbsent(err) {
			c.noteAbsent(src, err)
			return nil, nil
		}
		return nil, fmt.Errorf("reading node CPU times from %s: %w", src, err)
	}
	pts := cpuPoints(c.prevCPU, total, ncpu, src)
	c.prevCPU = &total
	return pts, nil
}

// cpuPoints turns a /proc/stat reading (and the previous aggregate, nil on the
// first call) into points.
func cpuPoints(prev *procfs.CPUStat, total procfs.CPUStat, ncpu int, src string) []metrics.Point {
	// /proc/stat lists one cpuN line per online CPU.
	pts := []metrics.Point{point(metrics.NodeCPUCount, float64(ncpu), metrics.UnitCount, metrics.ScopeNode, src)}
	if prev != nil {
		if u, ok := cpuUtilization(*prev, total); ok {
			pts = append(pts, point(metrics.NodeCPUUtilization, u, metrics.UnitPercentage, metrics.ScopeNode, src))
		}
	}
	return pts
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
