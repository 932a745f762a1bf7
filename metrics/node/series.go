package node

import "github.com/bridge-dev/bridge/metrics"

// ScopeRootfs is the scope only this collector serves: statfs("/"), where
// an overlay root shows the node's disk. node_ is metrics.ScopeNode, which
// the RAPL and InfiniBand collectors serve too; netns_ is
// metrics.ScopeNetns, of series the job's report reads.
const ScopeRootfs metrics.Scope = "rootfs"

// The node's, the root filesystem's and the network namespace's series,
// each described once (those read elsewhere are metrics': the node's
// memory, the namespace's rates).
var (
	MemoryUsed = &metrics.Desc{Name: "node_memory_used_megabytes", Unit: metrics.UnitMegabytes, Scope: metrics.ScopeNode, Total: metrics.NodeMemoryTotal,
		Prom: "bridge_node_memory_used_bytes", Help: "Memory of the node in use: MemTotal - MemAvailable, in bytes."}
	// MLflow's name for used.
	MemoryUsage = &metrics.Desc{Name: "node_memory_usage_megabytes", Unit: metrics.UnitMegabytes, Scope: metrics.ScopeNode, Total: metrics.NodeMemoryTotal,
		Prom: "bridge_node_memory_usage_bytes", Help: "The same as bridge_node_memory_used_bytes, under MLflow's name (system_memory_usage_megabytes)."}
	MemoryUsagePercent = &metrics.Desc{Name: "node_memory_usage_percentage", Unit: metrics.UnitPercentage, Scope: metrics.ScopeNode,
		Help: "Memory of the node in use as a percentage of MemTotal."}
	Load1 = &metrics.Desc{Name: "node_load_1m", Unit: metrics.UnitLoad, Scope: metrics.ScopeNode,
		Prom: "node_load1", Help: "1m load average."}
	Load5 = &metrics.Desc{Name: "node_load_5m", Unit: metrics.UnitLoad, Scope: metrics.ScopeNode,
		Prom: "node_load5", Help: "5m load average."}
	Load15 = &metrics.Desc{Name: "node_load_15m", Unit: metrics.UnitLoad, Scope: metrics.ScopeNode,
		Prom: "node_load15", Help: "15m load average."}
	// CPUCount is metrics': the bottleneck verdict reads it.
	CPUCount       = metrics.NodeCPUCount
	CPUUtilization = &metrics.Desc{Name: "node_cpu_utilization_percentage", Unit: metrics.UnitPercentage, Scope: metrics.ScopeNode,
		Help: "CPU the node used over the last interval, as a percentage of all its CPUs."}

	RootfsDiskTotal = &metrics.Desc{Name: "rootfs_disk_total_megabytes", Unit: metrics.UnitMegabytes, Scope: ScopeRootfs, Steady: true,
		Prom: "bridge_rootfs_disk_total_bytes", Help: "Size of the filesystem under / in bytes."}
	RootfsDiskUsed = &metrics.Desc{Name: "rootfs_disk_used_megabytes", Unit: metrics.UnitMegabytes, Scope: ScopeRootfs, Total: RootfsDiskTotal,
		Prom: "bridge_rootfs_disk_used_bytes", Help: "Bytes used on the filesystem under /."}
	RootfsDiskAvailable = &metrics.Desc{Name: "rootfs_disk_available_megabytes", Unit: metrics.UnitMegabytes, Scope: ScopeRootfs, Total: RootfsDiskTotal,
		Prom: "bridge_rootfs_disk_available_bytes", Help: "Bytes a non-root user can still write on the filesystem under /."}
	RootfsDiskUsagePercent = &metrics.Desc{Name: "rootfs_disk_usage_percentage", Unit: metrics.UnitPercentage, Scope: ScopeRootfs,
		Help: "Use of the filesystem under / as df shows it: used / (used + available)."}

	NetnsReceive = &metrics.Desc{Name: "netns_network_receive_megabytes", Unit: metrics.UnitMegabytes, Scope: metrics.ScopeNetns,
		Prom: "bridge_netns_network_receive_bytes", Help: "Bytes received in the network namespace since bridge started, over its interfaces at the bottom of their stacks (not lo, bonds, bridges or VLANs)."}
	NetnsTransmit = &metrics.Desc{Name: "netns_network_transmit_megabytes", Unit: metrics.UnitMegabytes, Scope: metrics.ScopeNetns,
		Prom: "bridge_netns_network_transmit_bytes", Help: "Bytes transmitted in the network namespace since bridge started, over its interfaces at the bottom of their stacks (not lo, bonds, bridges or VLANs)."}
)

// Pressure are the node's PSI series (/proc/pressure), metrics': the
// bottleneck verdict reads them.
var Pressure = metrics.NodePressure

// Series are every series the collector may add, as its registration
// declares them.
var Series = append([]*metrics.Desc{
	metrics.NodeMemoryTotal, metrics.NodeMemoryAvailable, MemoryUsed, MemoryUsage, MemoryUsagePercent,
	Load1, Load5, Load15, CPUCount, CPUUtilization,
	RootfsDiskTotal, RootfsDiskUsed, RootfsDiskAvailable, RootfsDiskUsagePercent,
	NetnsReceive, NetnsTransmit, metrics.NetnsReceiveRate, metrics.NetnsTransmitRate,
}, Pressure.Descs()...)
