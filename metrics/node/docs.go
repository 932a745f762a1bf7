package node

import "github.com/bridge-dev/bridge/metrics"

// docs are the collector's tables in docs/metrics.md (docgen writes them
// between the markers of their IDs): a row per series, with where it is
// read from and how it is computed.
var docs = []metrics.DocTable{
	{ID: "node/node", Columns: []string{"Source", "Formula"}, Rows: []metrics.DocRow{
		{Series: []*metrics.Desc{CPUUtilization}, Cells: []string{"`<proc>/stat`, aggregate `cpu` line", "Δbusy / Δtotal × 100 between two readings, where total = user + nice + system + idle + iowait + irq + softirq + steal and busy = total − idle − iowait. guest and guest_nice are not added (the kernel already counts them in user and nice). Clamped to 0..100; omitted when no time passed. Needs two readings."}},
		{Series: []*metrics.Desc{CPUCount}, Cells: []string{"`<proc>/stat`", "number of `cpuN` lines, i.e. online CPUs of the host (not the container's CPU limit)."}},
		{Series: []*metrics.Desc{metrics.NodeMemoryTotal}, Cells: []string{"`<proc>/meminfo`", "MemTotal"}},
		{Series: []*metrics.Desc{metrics.NodeMemoryAvailable}, Cells: []string{"`<proc>/meminfo`", "MemAvailable (the kernel's estimate of memory available without swapping). Omitted on kernels without it (< 3.14), as are used and usage."}},
		{Series: []*metrics.Desc{MemoryUsed}, Cells: []string{"`<proc>/meminfo`", "MemTotal − MemAvailable (clamped at 0)"}},
		{Series: []*metrics.Desc{MemoryUsage}, Cells: []string{"`<proc>/meminfo`", "the same value as `node_memory_used_megabytes`, named like MLflow's `system_memory_usage_megabytes` so the two series can be put side by side (inside a container MLflow's series is node-wide too). They are close, not equal: MLflow logs psutil's `used`, MemTotal − MemFree − Buffers − Cached − SReclaimable, which leaves out shared memory and tmpfs pages (counted in Cached) that MemAvailable counts as in use."}},
		{Series: []*metrics.Desc{MemoryUsagePercent}, Cells: []string{"`<proc>/meminfo`", "(MemTotal − MemAvailable) / MemTotal × 100"}},
		{Series: []*metrics.Desc{Load1, Load5, Load15}, Cells: []string{"`<proc>/loadavg`", "the kernel's 1, 5 and 15 minute load averages (runnable + uninterruptible tasks), as written."}},
		{Series: Pressure.Some(), Cells: []string{"`<proc>/pressure/{cpu,memory,io}`", "`some avg10`: share of the last 10 s in which at least one task was stalled on the resource, host-wide."}},
		{Series: Pressure.Full(), Cells: []string{"`<proc>/pressure/{cpu,memory,io}`", "`full avg10`: share of the last 10 s in which all non-idle tasks were stalled. The cpu file has no `full` line before Linux 5.13: then that point is omitted."}},
	}},
	{ID: "node/rootfs", Columns: []string{"Source", "Formula"}, Rows: []metrics.DocRow{
		{Series: []*metrics.Desc{RootfsDiskTotal}, Cells: []string{"`statfs(/)`", "f_blocks × f_frsize"}},
		{Series: []*metrics.Desc{RootfsDiskUsed}, Cells: []string{"`statfs(/)`", "(f_blocks − f_bfree) × f_frsize"}},
		{Series: []*metrics.Desc{RootfsDiskAvailable}, Cells: []string{"`statfs(/)`", "f_bavail × f_frsize: what a non-root user can still write (reserved blocks excluded)"}},
		{Series: []*metrics.Desc{RootfsDiskUsagePercent}, Cells: []string{"`statfs(/)`", "used / (used + available) × 100, as df's Use% (so a disk full for users reads 100% even with reserved blocks left); omitted for a zero-size filesystem."}},
	}},
	{ID: "node/netns", Columns: []string{"Source", "Formula"}, Rows: []metrics.DocRow{
		{Series: []*metrics.Desc{NetnsReceive}, Cells: []string{"`<proc>/net/dev`; which interfaces count: `<sys>/class/net`", "received bytes since the first Collect, summed over the interfaces counted: each one no other interface is stacked under (physical NICs, veths), not `lo`, bonds, bridges, VLANs or macvlans, whose bytes their lower interfaces carry too. Needs two readings."}},
		{Series: []*metrics.Desc{NetnsTransmit}, Cells: []string{"`<proc>/net/dev`", "transmitted bytes since the first Collect, likewise."}},
		{Series: []*metrics.Desc{metrics.NetnsReceiveRate}, Cells: []string{"`<proc>/net/dev`", "received bytes over the last interval / interval seconds. Needs two readings."}},
		{Series: []*metrics.Desc{metrics.NetnsTransmitRate}, Cells: []string{"`<proc>/net/dev`", "transmitted bytes over the last interval / interval seconds."}},
	}},
}
