package node

import (
	"golang.org/x/sys/unix"

	"github.com/bridge-dev/bridge/metrics"
)

// fsUsage is the part of a statfs result the rootfs metrics use, in bytes.
type fsUsage struct {
	total, free, avail float64
}

// readFsUsage calls statfs(path). Block counts are in units of f_frsize, as
// df uses them.
func readFsUsage(path string) (fsUsage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fsUsage{}, err
	}
	bs := float64(st.Frsize)
	if bs == 0 {
		bs = float64(st.Bsize)
	}
	return fsUsage{
		total: float64(st.Blocks) * bs,
		free:  float64(st.Bfree) * bs,
		avail: float64(st.Bavail) * bs,
	}, nil
}

// collectRootfs reads statfs(RootfsPath).
func (c *Collector) collectRootfs(out *metrics.Batch) error {
	src := c.statfsSrc
	u, err := c.statfs(c.rootfsPath)
	ok, err := c.outcome(src, "root filesystem usage", err)
	if ok {
		rootfsPoints(out, u, src)
	}
	return err
}

// rootfsPoints computes the figures df shows: used = total - free; available
// = what a non-root user may still write (excludes the reserved blocks);
// usage = used / (used + available), so a full disk reads 100% even when
// reserved blocks remain.
func rootfsPoints(out *metrics.Batch, u fsUsage, src string) {
	used := max(u.total-u.free, 0)
	out.Add(RootfsDiskTotal, metrics.MB(u.total), src)
	out.Add(RootfsDiskUsed, metrics.MB(used), src)
	out.Add(RootfsDiskAvailable, metrics.MB(u.avail), src)
	if used+u.avail > 0 {
		out.Add(RootfsDiskUsagePercent, used/(used+u.avail)*100, src)
	}
}
