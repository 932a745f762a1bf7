package metrics

// Every series of bridge's own collectors, described once. The collector
// that produces a series and every consumer (the end-of-run table,
// forensics, fast sampling near the memory limit, /metrics, `bridge
// sample`) use the descriptor; names_test.go checks that every series a
// consumer reads is still produced, and pipeline/docs_test.go that docs/metrics.md
// lists each one with its unit. The lists (ContainerSeries, ...) are what
// each collector's registration declares (pipeline/collectors.go).

// Container (cgroup) series: metrics/cgroup.
var (
	ContainerMemoryWorkingSet = &Desc{Name: "container_memory_working_set_megabytes", Unit: UnitMegabytes, Scope: ScopeContainer,
		Prom: "container_memory_working_set_bytes", Help: "Current working set of the container in bytes (usage minus inactive file)."}
	ContainerMemoryUsage = &Desc{Name: "container_memory_usage_megabytes", Unit: UnitMegabytes, Scope: ScopeContainer,
		Prom: "container_memory_usage_bytes", Help: "Current memory usage of the container in bytes, including all memory regardless of when it was accessed."}
	ContainerMemoryRSS = &Desc{Name: "container_memory_rss_megabytes", Unit: UnitMegabytes, Scope: ScopeContainer,
		Prom: "container_memory_rss", Help: "Size of RSS of the container in bytes."}
	ContainerMemoryCache = &Desc{Name: "container_memory_cache_megabytes", Unit: UnitMegabytes, Scope: ScopeContainer,
		Prom: "container_memory_cache", Help: "Number of bytes of page cache memory of the container."}
	ContainerMemoryPeak = &Desc{Name: "container_memory_peak_megabytes", Unit: UnitMegabytes, Scope: ScopeContainer,
		Prom: "container_memory_max_usage_bytes", Help: "Maximum memory usage of the container recorded in bytes."}
	ContainerMemoryLimit = &Desc{Name: "container_memory_limit_megabytes", Unit: UnitMegabytes, Scope: ScopeContainer,
		Prom: "container_spec_memory_limit_bytes", Help: "Memory limit of the container in bytes (the effective one: the smallest among its cgroup and ancestors)."}
	// Working set / limit: named after its numerator.
	ContainerMemoryWorkingSetPercent = &Desc{Name: "container_memory_working_set_percentage", Unit: UnitPercentage, Scope: ScopeContainer,
		Help: "Working set of the container as a percentage of its memory limit."}
	ContainerMemoryHighEvents = &Desc{Name: "container_memory_high_events_count", Unit: UnitCount, Scope: ScopeContainer,
		Help: "Times the container's memory usage went over memory.high (memory.events high)."}
	ContainerMemoryMaxEvents = &Desc{Name: "container_memory_max_events_count", Unit: UnitCount, Scope: ScopeContainer,
		Help: "Times the container's memory usage reached its limit (memory.events max)."}
	ContainerOOMEvents = &Desc{Name: "container_memory_oom_events_count", Unit: UnitCount, Scope: ScopeContainer,
		Help: "Times the container hit its memory limit and the OOM path ran (memory.events oom)."}
	ContainerOOMKills = &Desc{Name: "container_memory_oom_kill_events_count", Unit: UnitCount, Scope: ScopeContainer, Kind: Counter,
		Prom: "container_oom_events_total", Help: "Count of out of memory kills in the container (memory.events oom_kill)."}
	ContainerOOMGroupKills = &Desc{Name: "container_memory_oom_group_kill_events_count", Unit: UnitCount, Scope: ScopeContainer,
		Help: "Group OOM kills in the container (memory.events oom_group_kill)."}
	ContainerCPULimit = &Desc{Name: "container_cpu_limit_cores", Unit: UnitCores, Scope: ScopeContainer,
		Help: "CPU limit of the container in cores: the smallest quota of its cgroup and ancestors, or its cpuset."}
	ContainerCPUUsage = &Desc{Name: "container_cpu_usage_cores", Unit: UnitCores, Scope: ScopeContainer,
		Help: "CPU the container used over the last interval, in cores."}
	ContainerCPUUtilization = &Desc{Name: "container_cpu_utilization_percentage", Unit: UnitPercentage, Scope: ScopeContainer,
		Help: "CPU the container used over the last interval as a percentage of its limit (else of its CPUs)."}
	ContainerCPUThrottledPeriods = &Desc{Name: "container_cpu_throttled_periods_percentage", Unit: UnitPercentage, Scope: ScopeContainer,
		Help: "Share of the last interval's CFS periods in which the container was throttled."}
	// Cumulative counters: their meaning does not depend on the interval.
	ContainerCPUUsageSecondsTotal = &Desc{Name: "container_cpu_usage_seconds_total", Unit: UnitSeconds, Scope: ScopeContainer, Kind: Counter,
		Prom: "container_cpu_usage_seconds_total", Help: "Cumulative cpu time consumed in seconds."}
	ContainerCPUPeriodsTotal = &Desc{Name: "container_cpu_periods_total", Unit: UnitCount, Scope: ScopeContainer, Kind: Counter,
		Prom: "container_cpu_cfs_periods_total", Help: "Number of elapsed enforcement period intervals."}
	ContainerCPUThrottledPeriodsTotal = &Desc{Name: "container_cpu_throttled_periods_total", Unit: UnitCount, Scope: ScopeContainer, Kind: Counter,
		Prom: "container_cpu_cfs_throttled_periods_total", Help: "Number of throttled period intervals."}
	ContainerCPUThrottledSecondsTotal = &Desc{Name: "container_cpu_throttled_seconds_total", Unit: UnitSeconds, Scope: ScopeContainer, Kind: Counter,
		Prom: "container_cpu_cfs_throttled_seconds_total", Help: "Total time duration the container has been throttled."}
	// v1: usage and limit of different cgroups.
	ContainerCPUUsageLimitSplit = &Desc{Name: "container_cpu_usage_limit_split_count", Unit: UnitCount, Scope: ScopeContainer,
		Help: "1 when the container's CPU usage and CPU limit come from different cgroups (cgroup v1)."}
	ContainerPIDs = &Desc{Name: "container_pids_count", Unit: UnitCount, Scope: ScopeContainer,
		Help: "Tasks (threads included) in the container's cgroup."}
	ContainerPIDsLimit = &Desc{Name: "container_pids_limit_count", Unit: UnitCount, Scope: ScopeContainer,
		Help: "The container's pids.max."}
	ContainerPIDsMaxEvents = &Desc{Name: "container_pids_max_events_count", Unit: UnitCount, Scope: ScopeContainer,
		Help: "Forks refused because the container reached pids.max (pids.events max)."}
)

// Pressure is one resource's PSI series: the avg10 share of its "some" and
// "full" lines.
type Pressure struct {
	Resource   string // "cpu", "memory", "io": the file's name
	Some, Full *Desc
}

// ContainerPressure are the cgroup's PSI series, NodePressure the node's.
var (
	ContainerPressure = pressure(ScopeContainer, "container's cgroup")
	NodePressure      = pressure(ScopeNode, "node")
)

// The pressure series consumers read.
var (
	ContainerPressureMemorySome = ContainerPressure[1].Some
	ContainerPressureMemoryFull = ContainerPressure[1].Full
)

func pressure(scope Scope, whose string) []Pressure {
	out := make([]Pressure, 0, 3)
	for _, res := range []string{"cpu", "memory", "io"} {
		d := func(line, who string) *Desc {
			return &Desc{Name: string(scope) + "_pressure_" + res + "_" + line + "_avg10_percentage", Unit: UnitPercentage, Scope: scope,
				Help: "Share of the last 10 s in which " + who + " of the " + whose + " stalled on " + res + " (PSI " + line + " avg10)."}
		}
		out = append(out, Pressure{Resource: res, Some: d("some", "at least one task"), Full: d("full", "all non-idle tasks")})
	}
	return out
}

// Node series: metrics/node.
var (
	NodeMemoryTotal = &Desc{Name: "node_memory_total_megabytes", Unit: UnitMegabytes, Scope: ScopeNode,
		Prom: "node_memory_MemTotal_bytes", Help: "Memory information field MemTotal_bytes."}
	NodeMemoryAvailable = &Desc{Name: "node_memory_available_megabytes", Unit: UnitMegabytes, Scope: ScopeNode,
		Prom: "node_memory_MemAvailable_bytes", Help: "Memory information field MemAvailable_bytes."}
	NodeMemoryUsed = &Desc{Name: "node_memory_used_megabytes", Unit: UnitMegabytes, Scope: ScopeNode,
		Prom: "bridge_node_memory_used_bytes", Help: "Memory of the node in use: MemTotal - MemAvailable, in bytes."}
	// MLflow's name for used.
	NodeMemoryUsage = &Desc{Name: "node_memory_usage_megabytes", Unit: UnitMegabytes, Scope: ScopeNode,
		Prom: "bridge_node_memory_usage_bytes", Help: "The same as bridge_node_memory_used_bytes, under MLflow's name (system_memory_usage_megabytes)."}
	NodeMemoryUsagePercent = &Desc{Name: "node_memory_usage_percentage", Unit: UnitPercentage, Scope: ScopeNode,
		Help: "Memory of the node in use as a percentage of MemTotal."}
	NodeLoad1 = &Desc{Name: "node_load_1m", Unit: UnitLoad, Scope: ScopeNode,
		Prom: "node_load1", Help: "1m load average."}
	NodeLoad5 = &Desc{Name: "node_load_5m", Unit: UnitLoad, Scope: ScopeNode,
		Prom: "node_load5", Help: "5m load average."}
	NodeLoad15 = &Desc{Name: "node_load_15m", Unit: UnitLoad, Scope: ScopeNode,
		Prom: "node_load15", Help: "15m load average."}
	NodeCPUCount = &Desc{Name: "node_cpu_count", Unit: UnitCount, Scope: ScopeNode,
		Help: "Online CPUs of the node."}
	NodeCPUUtilization = &Desc{Name: "node_cpu_utilization_percentage", Unit: UnitPercentage, Scope: ScopeNode,
		Help: "CPU the node used over the last interval, as a percentage of all its CPUs."}

	RootfsDiskTotal = &Desc{Name: "rootfs_disk_total_megabytes", Unit: UnitMegabytes, Scope: ScopeRootfs,
		Prom: "bridge_rootfs_disk_total_bytes", Help: "Size of the filesystem under / in bytes."}
	RootfsDiskUsed = &Desc{Name: "rootfs_disk_used_megabytes", Unit: UnitMegabytes, Scope: ScopeRootfs,
		Prom: "bridge_rootfs_disk_used_bytes", Help: "Bytes used on the filesystem under /."}
	RootfsDiskAvailable = &Desc{Name: "rootfs_disk_available_megabytes", Unit: UnitMegabytes, Scope: ScopeRootfs,
		Prom: "bridge_rootfs_disk_available_bytes", Help: "Bytes a non-root user can still write on the filesystem under /."}
	RootfsDiskUsagePercent = &Desc{Name: "rootfs_disk_usage_percentage", Unit: UnitPercentage, Scope: ScopeRootfs,
		Help: "Use of the filesystem under / as df shows it: used / (used + available)."}

	NetnsReceive = &Desc{Name: "netns_network_receive_megabytes", Unit: UnitMegabytes, Scope: ScopeNetns,
		Prom: "bridge_netns_network_receive_bytes", Help: "Bytes received in the network namespace since bridge started (lo excluded)."}
	NetnsTransmit = &Desc{Name: "netns_network_transmit_megabytes", Unit: UnitMegabytes, Scope: ScopeNetns,
		Prom: "bridge_netns_network_transmit_bytes", Help: "Bytes transmitted in the network namespace since bridge started (lo excluded)."}
	NetnsReceiveRate = &Desc{Name: "netns_network_receive_megabytes_per_second", Unit: UnitMegabytesPerSecond, Scope: ScopeNetns,
		Prom: "bridge_netns_network_receive_bytes_per_second", Help: "Bytes received per second in the network namespace over the last interval."}
	NetnsTransmitRate = &Desc{Name: "netns_network_transmit_megabytes_per_second", Unit: UnitMegabytesPerSecond, Scope: ScopeNetns,
		Prom: "bridge_netns_network_transmit_bytes_per_second", Help: "Bytes transmitted per second in the network namespace over the last interval."}
)

// The node's CPU packages, from RAPL: metrics/rapl. RAPL measures a whole
// package (every core and the uncore), whoever runs on it: node scope.
var (
	NodeCPUPackagePower = &Desc{Name: "node_cpu_package_<package>_power_watts", Unit: UnitWatts, Scope: ScopeNode,
		Instance: []string{"package"}, Prom: "bridge_node_cpu_package_power_watts",
		Help: "Power a CPU package of the node drew over the last interval, from its RAPL energy counter."}
	NodeCPUPackageEnergy = &Desc{Name: "node_cpu_package_<package>_energy_joules", Unit: UnitJoules, Scope: ScopeNode, Kind: Counter,
		Instance: []string{"package"}, Prom: "bridge_node_cpu_package_energy_joules_total",
		Help: "Energy a CPU package of the node used since bridge started (RAPL)."}
	NodeCPUPower = &Desc{Name: "node_cpu_power_watts", Unit: UnitWatts, Scope: ScopeNode,
		Help: "Power all CPU packages of the node drew over the last interval (RAPL)."}
	NodeCPUEnergy = &Desc{Name: "node_cpu_energy_joules", Unit: UnitJoules, Scope: ScopeNode, Kind: Counter,
		Prom: "bridge_node_cpu_energy_joules_total", Help: "Energy all CPU packages of the node used since bridge started (RAPL)."}
)

// The node's InfiniBand and RoCE ports: metrics/infiniband. One series per
// device and port; the counts are since bridge started.
var (
	NodeIBReceiveRate   = ibPort("receive_megabytes_per_second", UnitMegabytesPerSecond, Gauge, "bridge_node_infiniband_receive_bytes_per_second", "Bytes the port received per second over the last interval.")
	NodeIBTransmitRate  = ibPort("transmit_megabytes_per_second", UnitMegabytesPerSecond, Gauge, "bridge_node_infiniband_transmit_bytes_per_second", "Bytes the port transmitted per second over the last interval.")
	NodeIBSymbolErrors  = ibPort("symbol_errors_count", UnitCount, Counter, "bridge_node_infiniband_symbol_errors_total", "Minor link errors the port detected since bridge started (symbol_error).")
	NodeIBLinkDowned    = ibPort("link_downed_count", UnitCount, Counter, "bridge_node_infiniband_link_downed_total", "Times the port's link went down since bridge started (link_downed).")
	NodeIBReceiveErrors = ibPort("receive_errors_count", UnitCount, Counter, "bridge_node_infiniband_receive_errors_total", "Packets with errors the port received since bridge started (port_rcv_errors).")
	NodeIBXmitDiscards  = ibPort("transmit_discards_count", UnitCount, Counter, "bridge_node_infiniband_transmit_discards_total", "Outbound packets the port discarded since bridge started, the port down or congested (port_xmit_discards).")
	NodeIBXmitWait      = ibPort("transmit_wait_count", UnitCount, Counter, "bridge_node_infiniband_transmit_wait_total", "Ticks in which the port had data to send but no flow-control credits, since bridge started (port_xmit_wait): congestion.")
)

func ibPort(name string, u Unit, k Kind, prom, help string) *Desc {
	return &Desc{Name: "node_infiniband_<device>_port_<port>_" + name, Unit: u, Scope: ScopeNode, Kind: k,
		Instance: []string{"device", "port"}, Prom: prom, Help: help}
}

// Process-tree series: metrics/process, and metrics/gpu for GPU memory.
var (
	ProcessMemoryRSS = &Desc{Name: "process_memory_rss_megabytes", Unit: UnitMegabytes, Scope: ScopeProcess,
		Prom: "bridge_process_memory_rss_bytes", Help: "Sum of the RSS of the child's process tree in bytes."}
	ProcessCount = &Desc{Name: "process_count", Unit: UnitCount, Scope: ScopeProcess,
		Help: "Processes in the child's tree."}
	ProcessThreads = &Desc{Name: "process_threads_count", Unit: UnitCount, Scope: ScopeProcess,
		Help: "Threads of the child's process tree."}
	ProcessCPUUsage = &Desc{Name: "process_cpu_usage_cores", Unit: UnitCores, Scope: ScopeProcess,
		Help: "CPU the child's process tree used over the last interval, in cores."}
	ProcessGPUProcesses = &Desc{Name: "process_gpu_processes_count", Unit: UnitCount, Scope: ScopeProcess,
		Help: "GPU processes that belong to the child's tree."}
	ProcessGPUUnmatchedProcesses = &Desc{Name: "process_gpu_unmatched_processes_count", Unit: UnitCount, Scope: ScopeProcess,
		Help: "GPU processes that do not belong to the child's tree."}
	ProcessGPUMemory = &Desc{Name: "process_gpu_memory_megabytes", Unit: UnitMegabytes, Scope: ScopeProcess,
		Prom: "bridge_process_gpu_memory_bytes", Help: "GPU memory used by the child's process tree in bytes."}
)

// Per-GPU templates: metrics/gpu and metrics/scrape bind them to a GPU
// (ForGPU) or a MIG slice (ForMIG).
var (
	GPUUtilization = &Desc{Name: "utilization_percentage", Unit: UnitPercentage, Scope: ScopeGPU, PerGPU: true,
		Help: "Share of the last sample period in which a kernel ran on the GPU."}
	GPUMemoryControllerUtilization = &Desc{Name: "memory_controller_utilization_percentage", Unit: UnitPercentage, Scope: ScopeGPU, PerGPU: true,
		Help: "Share of the last sample period in which the GPU's memory was read or written."}
	GPUPowerUsage = &Desc{Name: "power_usage_watts", Unit: UnitWatts, Scope: ScopeGPU, PerGPU: true,
		Help: "Power the GPU draws."}
	GPUPowerLimit = &Desc{Name: "power_limit_watts", Unit: UnitWatts, Scope: ScopeGPU, PerGPU: true,
		Help: "Power limit the GPU enforces now."}
	GPUPowerUsagePercent = &Desc{Name: "power_usage_percentage", Unit: UnitPercentage, Scope: ScopeGPU, PerGPU: true,
		Help: "Power the GPU draws as a percentage of its enforced limit."}
	GPUTemperature = &Desc{Name: "temperature_celsius", Unit: UnitCelsius, Scope: ScopeGPU, PerGPU: true,
		Help: "Core temperature of the GPU."}
	GPUSMClock = &Desc{Name: "sm_clock_mhz", Unit: UnitMHz, Scope: ScopeGPU, PerGPU: true,
		Help: "Current SM clock of the GPU."}
	GPUMemoryClock = &Desc{Name: "memory_clock_mhz", Unit: UnitMHz, Scope: ScopeGPU, PerGPU: true,
		Help: "Current memory clock of the GPU."}
	GPUMemoryReserved = &Desc{Name: "memory_reserved_megabytes", Unit: UnitMegabytes, Scope: ScopeGPU, PerGPU: true,
		Prom: "memory_reserved_bytes", Help: "GPU memory the driver keeps for itself, in bytes."}
	GPUMemoryUsed = &Desc{Name: "memory_used_megabytes", Unit: UnitMegabytes, Scope: ScopeGPU, PerGPU: true,
		Prom: "memory_used_bytes", Help: "GPU memory in use, in bytes."}
	GPUMemoryTotal = &Desc{Name: "memory_total_megabytes", Unit: UnitMegabytes, Scope: ScopeGPU, PerGPU: true,
		Prom: "memory_total_bytes", Help: "GPU memory in all, in bytes."}
	GPUMemoryUsagePercent = &Desc{Name: "memory_usage_percentage", Unit: UnitPercentage, Scope: ScopeGPU, PerGPU: true,
		Help: "GPU memory in use as a percentage of the total."}
	GPUThrottleReasons = &Desc{Name: "throttle_reasons_count", Unit: UnitCount, Scope: ScopeGPU, PerGPU: true,
		Help: "Active clock slowdown reasons of the GPU (GPU idle not counted)."}
	GPUECCCorrected = &Desc{Name: "ecc_corrected_errors_count", Unit: UnitCount, Scope: ScopeGPU, PerGPU: true,
		Help: "Corrected ECC errors of the GPU since the driver was loaded."}
	GPUECCUncorrected = &Desc{Name: "ecc_uncorrected_errors_count", Unit: UnitCount, Scope: ScopeGPU, PerGPU: true,
		Help: "Uncorrected ECC errors of the GPU since the driver was loaded."}
	GPURemappedRowsCorrected = &Desc{Name: "remapped_rows_corrected_count", Unit: UnitCount, Scope: ScopeGPU, PerGPU: true,
		Help: "GPU memory rows remapped for correctable errors."}
	GPURemappedRowsUncorrected = &Desc{Name: "remapped_rows_uncorrected_count", Unit: UnitCount, Scope: ScopeGPU, PerGPU: true,
		Help: "GPU memory rows remapped for uncorrectable errors."}
	GPURemappedRowsPending = &Desc{Name: "remapped_rows_pending", Unit: UnitCount, Scope: ScopeGPU, PerGPU: true,
		Help: "1 when a row remap waits for a GPU reset."}
	GPURemappedRowsFailed = &Desc{Name: "remapped_rows_failed", Unit: UnitCount, Scope: ScopeGPU, PerGPU: true,
		Help: "1 when a row remap failed: the board needs service."}
	GPUXidErrors = &Desc{Name: "xid_errors_count", Unit: UnitCount, Scope: ScopeGPU, PerGPU: true,
		Help: "Xid error events of the GPU seen since bridge started."}
	// dcgm-exporter's DCGM_FI_DEV_XID_ERRORS: the last Xid code, not a count.
	GPULastXid = &Desc{Name: "last_xid_count", Unit: UnitCount, Scope: ScopeGPU, PerGPU: true,
		Help: "The last Xid error code of the GPU, as dcgm-exporter reports it (a code, not a count)."}
)

// GPU clock event ("throttle") reasons: one 0/1 flag each, in
// gpu_N_throttle_<reason>.
var (
	GPUThrottleGPUIdle            = throttle("gpu_idle", "clocks are low because nothing runs")
	GPUThrottleApplicationsClocks = throttle("applications_clocks", "clocks are capped by an applications-clocks setting")
	GPUThrottleSWPowerCap         = throttle("sw_power_cap", "power is above the software power limit")
	GPUThrottleHWSlowdown         = throttle("hw_slowdown", "hardware slowdown (thermal, or power brake) by a factor of 2 or more")
	GPUThrottleSyncBoost          = throttle("sync_boost", "clocks are held to the other GPUs of a sync-boost group")
	GPUThrottleSWThermal          = throttle("sw_thermal", "software thermal slowdown")
	GPUThrottleHWThermal          = throttle("hw_thermal", "hardware thermal slowdown")
	GPUThrottleHWPowerBrake       = throttle("hw_power_brake", "the power supply asserts the power brake")
)

func throttle(reason, help string) *Desc {
	return &Desc{Name: "throttle_" + reason, Unit: UnitCount, Scope: ScopeGPU, PerGPU: true, Help: "1 while " + help + "."}
}

// GPUEnergy is a running total since bridge started: a counter, whose
// /metrics name says so.
var GPUEnergy = &Desc{Name: "energy_joules", Unit: UnitJoules, Scope: ScopeGPU, PerGPU: true, Kind: Counter,
	Prom: "energy_joules_total", Help: "Energy the GPU used since bridge started, from its total energy counter."}

// GPU activity: the profiling fields DCGM names DCGM_FI_PROF_<X>, under the
// names bridge gives dcgm-exporter's (DCGMProfiling), so that a dashboard
// reads the same series whether NVML's GPM (metrics/gpu) or a scraped
// dcgm-exporter (metrics/scrape) filled it. Ratios are 0 to 1, as DCGM's.
var (
	GPUProfGREngineActive = prof("gr_engine_active", "Share of the interval in which a graphics or compute engine of the GPU was active.")
	GPUProfSMActive       = prof("sm_active", "Share of the GPU's SMs busy over the interval: at least one warp resident, averaged over SMs and time.")
	GPUProfSMOccupancy    = prof("sm_occupancy", "Resident warps over the interval as a share of the maximum the SMs can hold.")
	GPUProfTensorActive   = prof("pipe_tensor_active", "Share of the interval in which the SMs' tensor pipes were busy, any precision.")
	GPUProfTensorDFMA     = prof("pipe_tensor_dfma_active", "Share of the interval in which the SMs' tensor pipes ran DFMA (double-precision fused multiply-add) instructions.")
	GPUProfTensorHMMA     = prof("pipe_tensor_hmma_active", "Share of the interval in which the SMs' tensor pipes ran HMMA (half-precision matrix multiply-accumulate) instructions.")
	GPUProfTensorDMMA     = prof("pipe_tensor_dmma_active", "Share of the interval in which the SMs' tensor pipes ran DMMA (double-precision matrix multiply-accumulate) instructions.")
	GPUProfTensorIMMA     = prof("pipe_tensor_imma_active", "Share of the interval in which the SMs' tensor pipes ran IMMA (integer matrix multiply-accumulate) instructions.")
	GPUProfDRAMActive     = prof("dram_active", "DRAM bandwidth used over the interval as a share of the GPU's theoretical maximum.")
	GPUProfFP64Active     = prof("pipe_fp64_active", "Share of the interval in which the SMs ran non-tensor FP64 instructions.")
	GPUProfFP32Active     = prof("pipe_fp32_active", "Share of the interval in which the SMs ran non-tensor FP32 instructions.")
	GPUProfFP16Active     = prof("pipe_fp16_active", "Share of the interval in which the SMs ran non-tensor FP16 instructions.")
	GPUProfIntActive      = prof("pipe_int_active", "Share of the interval in which the SMs ran integer instructions.")
	GPUProfPCIeTx         = profRate("pcie_tx", "PCIe traffic from the GPU over the interval, in bytes per second.")
	GPUProfPCIeRx         = profRate("pcie_rx", "PCIe traffic to the GPU over the interval, in bytes per second.")
	GPUProfNVLinkTx       = profRate("nvlink_tx", "NVLink traffic sent by the GPU over the interval, all links, in bytes per second.")
	GPUProfNVLinkRx       = profRate("nvlink_rx", "NVLink traffic received by the GPU over the interval, all links, in bytes per second.")
)

// GPUProfSeries are the activity series, in the order docs/metrics.md lists them.
var GPUProfSeries = []*Desc{
	GPUProfGREngineActive, GPUProfSMActive, GPUProfSMOccupancy,
	GPUProfTensorActive, GPUProfTensorDFMA, GPUProfTensorHMMA, GPUProfTensorDMMA, GPUProfTensorIMMA,
	GPUProfDRAMActive, GPUProfFP64Active, GPUProfFP32Active, GPUProfFP16Active, GPUProfIntActive,
	GPUProfPCIeTx, GPUProfPCIeRx, GPUProfNVLinkTx, GPUProfNVLinkRx,
}

func prof(x, help string) *Desc {
	return &Desc{Name: DCGMProfilingName(x, false), Unit: UnitRatio, Scope: ScopeGPU, PerGPU: true, Help: help}
}

func profRate(x, help string) *Desc {
	return &Desc{Name: DCGMProfilingName(x, true), Unit: UnitMegabytesPerSecond, Scope: ScopeGPU, PerGPU: true,
		Prom: "prof_" + x + "_bytes_per_second", Help: help}
}

// profByName finds a GPUProfSeries template by its Name.
var profByName = func() map[string]*Desc {
	m := make(map[string]*Desc, len(GPUProfSeries))
	for _, d := range GPUProfSeries {
		m[d.Name] = d
	}
	return m
}()

// DCGMProfiling describes a dcgm-exporter DCGM_FI_PROF_<X> field mapped to
// gpu_N_prof_<x>_ratio, or for a _BYTES field (bytes per second) to
// gpu_N_prof_<x>_megabytes_per_second: the GPUProfSeries template of that
// name, else a per-GPU template made at run time, one per field a --scrape
// endpoint serves.
func DCGMProfiling(x string, bytesPerSecond bool) *Desc {
	if d, ok := profByName[DCGMProfilingName(x, bytesPerSecond)]; ok {
		return d
	}
	d := &Desc{Name: DCGMProfilingName(x, bytesPerSecond), Unit: UnitRatio, Scope: ScopeGPU, PerGPU: true,
		Help: "dcgm-exporter's DCGM_FI_PROF_ profiling field " + x + "."}
	if bytesPerSecond {
		d.Unit, d.Prom = UnitMegabytesPerSecond, "prof_"+x+"_bytes_per_second"
	}
	return d
}

// DCGMProfilingName is the Name of DCGMProfiling(x, bytesPerSecond), made
// without making the descriptor.
func DCGMProfilingName(x string, bytesPerSecond bool) string {
	if bytesPerSecond {
		return "prof_" + x + "_megabytes_per_second"
	}
	return "prof_" + x + "_ratio"
}

// The series each built-in collector may produce, as its registration
// declares them.
var (
	ContainerSeries = append([]*Desc{
		ContainerMemoryWorkingSet, ContainerMemoryUsage, ContainerMemoryRSS, ContainerMemoryCache, ContainerMemoryPeak,
		ContainerMemoryLimit, ContainerMemoryWorkingSetPercent, ContainerMemoryHighEvents, ContainerMemoryMaxEvents,
		ContainerOOMEvents, ContainerOOMKills, ContainerOOMGroupKills,
		ContainerCPULimit, ContainerCPUUsage, ContainerCPUUtilization, ContainerCPUThrottledPeriods,
		ContainerCPUUsageSecondsTotal, ContainerCPUPeriodsTotal, ContainerCPUThrottledPeriodsTotal,
		ContainerCPUThrottledSecondsTotal, ContainerCPUUsageLimitSplit,
		ContainerPIDs, ContainerPIDsLimit, ContainerPIDsMaxEvents,
	}, pressureSeries(ContainerPressure)...)
	NodeSeries = append([]*Desc{
		NodeMemoryTotal, NodeMemoryAvailable, NodeMemoryUsed, NodeMemoryUsage, NodeMemoryUsagePercent,
		NodeLoad1, NodeLoad5, NodeLoad15, NodeCPUCount, NodeCPUUtilization,
		RootfsDiskTotal, RootfsDiskUsed, RootfsDiskAvailable, RootfsDiskUsagePercent,
		NetnsReceive, NetnsTransmit, NetnsReceiveRate, NetnsTransmitRate,
	}, pressureSeries(NodePressure)...)
	ProcessSeries = []*Desc{ProcessMemoryRSS, ProcessCount, ProcessThreads, ProcessCPUUsage}
	// GPUSeries are the NVML collector's: per-GPU templates (activity from
	// GPM among them), and the child's GPU memory.
	GPUSeries = append([]*Desc{
		GPUUtilization, GPUMemoryControllerUtilization, GPUPowerUsage, GPUPowerLimit, GPUPowerUsagePercent,
		GPUTemperature, GPUSMClock, GPUMemoryClock, GPUMemoryReserved, GPUMemoryUsed, GPUMemoryTotal,
		GPUMemoryUsagePercent, GPUThrottleReasons,
		GPUThrottleGPUIdle, GPUThrottleApplicationsClocks, GPUThrottleSWPowerCap, GPUThrottleHWSlowdown,
		GPUThrottleSyncBoost, GPUThrottleSWThermal, GPUThrottleHWThermal, GPUThrottleHWPowerBrake,
		GPUECCCorrected, GPUECCUncorrected, GPURemappedRowsCorrected, GPURemappedRowsUncorrected,
		GPURemappedRowsPending, GPURemappedRowsFailed, GPUXidErrors, GPUEnergy,
		ProcessGPUProcesses, ProcessGPUUnmatchedProcesses, ProcessGPUMemory,
	}, GPUProfSeries...)
	// AMDGPUSeries are the amdgpu collector's (sysfs): the per-GPU
	// templates that mean what NVIDIA's do, and the child's GPU memory.
	AMDGPUSeries = []*Desc{
		GPUUtilization, GPUMemoryControllerUtilization, GPUPowerUsage, GPUPowerLimit, GPUPowerUsagePercent,
		GPUTemperature, GPUSMClock, GPUMemoryClock, GPUMemoryUsed, GPUMemoryTotal, GPUMemoryUsagePercent,
		ProcessGPUProcesses, ProcessGPUUnmatchedProcesses, ProcessGPUMemory,
	}
	RAPLSeries       = []*Desc{NodeCPUPackagePower, NodeCPUPackageEnergy, NodeCPUPower, NodeCPUEnergy}
	InfiniBandSeries = []*Desc{NodeIBReceiveRate, NodeIBTransmitRate, NodeIBSymbolErrors, NodeIBLinkDowned, NodeIBReceiveErrors, NodeIBXmitDiscards, NodeIBXmitWait}
	// ScrapeSeries are the static ones the --scrape collector maps
	// dcgm-exporter's fields to (the activity series among them); it also
	// makes DCGMProfiling templates of other fields and Passthrough series
	// at run time.
	ScrapeSeries = append([]*Desc{
		GPUUtilization, GPUMemoryControllerUtilization, GPUMemoryUsed, GPUPowerUsage, GPUTemperature, GPUSMClock, GPULastXid,
	}, GPUProfSeries...)
)

func pressureSeries(ps []Pressure) []*Desc {
	var out []*Desc
	for _, p := range ps {
		out = append(out, p.Some, p.Full)
	}
	return out
}
