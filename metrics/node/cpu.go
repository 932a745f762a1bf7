package node

import (
	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

// collectCPU reads /proc/stat: the online CPU count, and utilization over the
// interval since the previous call (omitted on the first).
func (c *Collector) collectCPU(out *metrics.Batch) error {
	type stat struct {
		total procfs.CPUStat
		ncpu  int
	}
	st, ok, err := readSource(c, c.statFile, "node CPU times", func(b []byte) (st stat, err error) {
		st.total, st.ncpu, err = parseProcStat(b)
		return st, err
	})
	if !ok {
		return err
	}
	total := st.total
	cpuPoints(out, c.prevCPU, total, st.ncpu, c.statFile)
	c.prevCPU = &total
	return nil
}

// cpuPoints turns a /proc/stat reading (and the previous aggregate, nil on the
// first call) into points.
func cpuPoints(out *metrics.Batch, prev *procfs.CPUStat, total procfs.CPUStat, ncpu int, src string) {
	// /proc/stat lists one cpuN line per online CPU.
	out.Add(CPUCount, float64(ncpu), src)
	if prev != nil {
		if u, ok := cpuUtilization(*prev, total); ok {
			out.Add(CPUUtilization, u, src)
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
