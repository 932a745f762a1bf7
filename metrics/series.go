package metrics

// The series read outside the collector that adds them, and those several
// collectors add, each described once, here: a reader (the end-of-run
// table, forensics, the job's report, fast sampling near the memory limit)
// then imports no collector. They are the container's (container.go), the
// node's memory, the network namespace's rates, the node's CPU energy, the
// child's tree's RSS and GPU memory, the InfiniBand ports' rates, the PSI
// family (metrics/cgroup and metrics/node add it) and the per-GPU
// templates (metrics/gpu and metrics/amdgpu add them, metrics/scrape maps
// dcgm-exporter's fields onto them). A series that only its collector reads
// is declared in its package. Each registration lists every series its
// collector adds; pipeline's series_test.go checks that every series a
// reader reads is still added.

// The node's memory (metrics/node, /proc/meminfo): forensics reads them.
var (
	NodeMemoryTotal = &Desc{Name: "node_memory_total_megabytes", Unit: UnitMegabytes, Scope: ScopeNode, Steady: true,
		Prom: "node_memory_MemTotal_bytes", Help: "Memory information field MemTotal_bytes."}
	NodeMemoryAvailable = &Desc{Name: "node_memory_available_megabytes", Unit: UnitMegabytes, Scope: ScopeNode, Total: NodeMemoryTotal,
		Prom: "node_memory_MemAvailable_bytes", Help: "Memory information field MemAvailable_bytes."}
)

// NodeCPUCount is the node's online CPUs (metrics/node, /proc/stat): the
// bottleneck verdict reads it as the CPU a job without a limit may use.
var NodeCPUCount = &Desc{Name: "node_cpu_count", Unit: UnitCount, Scope: ScopeNode, Steady: true,
	Help: "Online CPUs of the node."}

// NodePressure are the node's PSI series (metrics/node, /proc/pressure):
// the bottleneck verdict reads the node's I/O stalls.
var NodePressure = PressureSeries(ScopeNode, "node")

// The network namespace's rates (metrics/node, /proc/net/dev): the job's
// report reads them.
var (
	NetnsReceiveRate = &Desc{Name: "netns_network_receive_megabytes_per_second", Unit: UnitMegabytesPerSecond, Scope: ScopeNetns,
		Prom: "bridge_netns_network_receive_bytes_per_second", Help: "Bytes received per second in the network namespace over the last interval."}
	NetnsTransmitRate = &Desc{Name: "netns_network_transmit_megabytes_per_second", Unit: UnitMegabytesPerSecond, Scope: ScopeNetns,
		Prom: "bridge_netns_network_transmit_bytes_per_second", Help: "Bytes transmitted per second in the network namespace over the last interval."}
)

// NodeCPUEnergy is the node's CPU packages' energy (metrics/rapl): the
// end-of-run table and the job's report read it.
var NodeCPUEnergy = &Desc{Name: "node_cpu_energy_joules", Unit: UnitJoules, Scope: ScopeNode, Kind: Counter,
	Prom: "bridge_node_cpu_energy_joules_total", Help: "Energy all CPU packages of the node used since bridge started (RAPL)."}

// ProcessMemoryRSS is the child's tree's RSS (metrics/process): the
// end-of-run table and forensics read it.
var ProcessMemoryRSS = &Desc{Name: "process_memory_rss_megabytes", Unit: UnitMegabytes, Scope: ScopeProcess,
	Prom: "bridge_process_memory_rss_bytes", Help: "Sum of the RSS of the child's process tree in bytes."}

// The InfiniBand and RoCE ports' rates (metrics/infiniband), one per
// device and port (per-instance templates, bound by For): the job's report
// reads them.
var (
	InfinibandReceiveRate = &Desc{Name: "node_infiniband_<device>_port_<port>_receive_megabytes_per_second", Unit: UnitMegabytesPerSecond,
		Scope: ScopeNode, Instance: []string{"device", "port"}, Prom: "bridge_node_infiniband_receive_bytes_per_second",
		Help: "Bytes the port received per second over the last interval."}
	InfinibandTransmitRate = &Desc{Name: "node_infiniband_<device>_port_<port>_transmit_megabytes_per_second", Unit: UnitMegabytesPerSecond,
		Scope: ScopeNode, Instance: []string{"device", "port"}, Prom: "bridge_node_infiniband_transmit_bytes_per_second",
		Help: "Bytes the port transmitted per second over the last interval."}
	// InfinibandLinkRate is the port's link rate: the bottleneck verdict
	// reads the rates against it.
	InfinibandLinkRate = &Desc{Name: "node_infiniband_<device>_port_<port>_link_rate_megabytes_per_second", Unit: UnitMegabytesPerSecond,
		Scope: ScopeNode, Instance: []string{"device", "port"}, Steady: true, Prom: "bridge_node_infiniband_link_rate_bytes_per_second",
		Help: "The port's link rate (its sysfs rate), in bytes per second each way."}
)

// Pressure is one resource's PSI series: the avg10 share of its "some" and
// "full" lines.
type Pressure struct {
	Resource   string // "cpu", "memory", "io": the file's name
	Some, Full *Desc
}

// Pressures are the PSI series of one scope: cpu, memory and io, in that
// order.
type Pressures []Pressure

// PressureSeries describes the PSI series of scope; whose names, in their
// help, whose tasks stall ("node", "container's cgroup"): the node's and a
// cgroup's are the same files at two levels.
func PressureSeries(scope Scope, whose string) Pressures {
	out := make(Pressures, 0, 3)
	for _, res := range []string{"cpu", "memory", "io"} {
		d := func(line, who string) *Desc {
			return &Desc{Name: string(scope) + "_pressure_" + res + "_" + line + "_avg10_percentage", Unit: UnitPercentage, Scope: scope,
				Help: "Share of the last 10 s in which " + who + " of the " + whose + " stalled on " + res + " (PSI " + line + " avg10)."}
		}
		out = append(out, Pressure{Resource: res, Some: d("some", "at least one task"), Full: d("full", "all non-idle tasks")})
	}
	return out
}

// Descs are the series, some then full for each resource.
func (ps Pressures) Descs() []*Desc {
	var out []*Desc
	for _, p := range ps {
		out = append(out, p.Some, p.Full)
	}
	return out
}

// Some are the "some" series, Full the "full" ones.
func (ps Pressures) Some() []*Desc { return ps.pick(func(p Pressure) *Desc { return p.Some }) }
func (ps Pressures) Full() []*Desc { return ps.pick(func(p Pressure) *Desc { return p.Full }) }

func (ps Pressures) pick(f func(Pressure) *Desc) []*Desc {
	out := make([]*Desc, len(ps))
	for i, p := range ps {
		out[i] = f(p)
	}
	return out
}

// The child's process tree's GPU series: metrics/gpu and metrics/amdgpu
// add them (process_ series of their own are metrics/process's).
var (
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
	GPUPowerLimit = &Desc{Name: "power_limit_watts", Unit: UnitWatts, Scope: ScopeGPU, Steady: true, PerGPU: true,
		Help: "Power limit the GPU enforces now."}
	// A GPU's draw passes its enforced limit for a moment (a transient,
	// the limit lowered): above 100, but never ten times it.
	GPUPowerUsagePercent = &Desc{Name: "power_usage_percentage", Unit: UnitPercentage, Scope: ScopeGPU, PerGPU: true, Valid: Range{0, 1000},
		Help: "Power the GPU draws as a percentage of its enforced limit."}
	GPUTemperature = &Desc{Name: "temperature_celsius", Unit: UnitCelsius, Scope: ScopeGPU, PerGPU: true,
		Help: "Core temperature of the GPU."}
	GPUSMClock = &Desc{Name: "sm_clock_mhz", Unit: UnitMHz, Scope: ScopeGPU, PerGPU: true,
		Help: "Current SM clock of the GPU."}
	GPUMemoryClock = &Desc{Name: "memory_clock_mhz", Unit: UnitMHz, Scope: ScopeGPU, PerGPU: true,
		Help: "Current memory clock of the GPU."}
	GPUMemoryReserved = &Desc{Name: "memory_reserved_megabytes", Unit: UnitMegabytes, Scope: ScopeGPU, Steady: true, PerGPU: true, Total: GPUMemoryTotal,
		Prom: "memory_reserved_bytes", Help: "GPU memory the driver keeps for itself, in bytes."}
	GPUMemoryUsed = &Desc{Name: "memory_used_megabytes", Unit: UnitMegabytes, Scope: ScopeGPU, PerGPU: true, Total: GPUMemoryTotal,
		Prom: "memory_used_bytes", Help: "GPU memory in use, in bytes."}
	GPUMemoryTotal = &Desc{Name: "memory_total_megabytes", Unit: UnitMegabytes, Scope: ScopeGPU, Steady: true, PerGPU: true,
		Prom: "memory_total_bytes", Help: "GPU memory in all, in bytes."}
	GPUMemoryUsagePercent = &Desc{Name: "memory_usage_percentage", Unit: UnitPercentage, Scope: ScopeGPU, PerGPU: true,
		Help: "GPU memory in use as a percentage of the total."}
	GPUThrottleReasons = &Desc{Name: "throttle_reasons_count", Unit: UnitCount, Scope: ScopeGPU, PerGPU: true,
		Help: "Active clock slowdown reasons of the GPU (GPU idle not counted)."}
	GPUECCCorrected = &Desc{Name: "ecc_corrected_errors_count", Unit: UnitCount, Scope: ScopeGPU, Steady: true, PerGPU: true,
		Help: "Corrected ECC errors of the GPU since the driver was loaded."}
	GPUECCUncorrected = &Desc{Name: "ecc_uncorrected_errors_count", Unit: UnitCount, Scope: ScopeGPU, Steady: true, PerGPU: true,
		Help: "Uncorrected ECC errors of the GPU since the driver was loaded."}
	GPURemappedRowsCorrected = &Desc{Name: "remapped_rows_corrected_count", Unit: UnitCount, Scope: ScopeGPU, Steady: true, PerGPU: true,
		Help: "GPU memory rows remapped for correctable errors."}
	GPURemappedRowsUncorrected = &Desc{Name: "remapped_rows_uncorrected_count", Unit: UnitCount, Scope: ScopeGPU, Steady: true, PerGPU: true,
		Help: "GPU memory rows remapped for uncorrectable errors."}
	GPURemappedRowsPending = &Desc{Name: "remapped_rows_pending", Unit: UnitCount, Scope: ScopeGPU, Steady: true, PerGPU: true, Valid: flag,
		Help: "1 when a row remap waits for a GPU reset."}
	GPURemappedRowsFailed = &Desc{Name: "remapped_rows_failed", Unit: UnitCount, Scope: ScopeGPU, Steady: true, PerGPU: true, Valid: flag,
		Help: "1 when a row remap failed: the board needs service."}
	GPUXidErrors = &Desc{Name: "xid_errors_count", Unit: UnitCount, Scope: ScopeGPU, Steady: true, PerGPU: true,
		Help: "Xid error events of the GPU seen since bridge started."}
	// dcgm-exporter's DCGM_FI_DEV_XID_ERRORS: the last Xid code, not a count.
	GPULastXid = &Desc{Name: "last_xid_count", Unit: UnitCount, Scope: ScopeGPU, Steady: true, PerGPU: true,
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
	return &Desc{Name: "throttle_" + reason, Unit: UnitCount, Scope: ScopeGPU, PerGPU: true, Valid: flag, Help: "1 while " + help + "."}
}

// flag is the range of a series that is 1 while something holds, else 0.
var flag = Range{0, 1}

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
