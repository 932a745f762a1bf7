package metrics

import "strconv"

// Metric names. Each is spelled here once and used by the collector that
// produces it and by every consumer (the end-of-run summary, forensics, fast
// sampling near the memory limit): a rename is one line, and
// names_test.go checks that every name a consumer uses is still produced.

// Container (cgroup) series: metrics/cgroup.
const (
	ContainerMemoryWorkingSet        = "container_memory_working_set_megabytes"
	ContainerMemoryUsage             = "container_memory_usage_megabytes"
	ContainerMemoryRSS               = "container_memory_rss_megabytes"
	ContainerMemoryCache             = "container_memory_cache_megabytes"
	ContainerMemoryPeak              = "container_memory_peak_megabytes"
	ContainerMemoryLimit             = "container_memory_limit_megabytes"
	ContainerMemoryWorkingSetPercent = "container_memory_working_set_percentage" // working set / limit
	ContainerMemoryHighEvents        = "container_memory_high_events_count"
	ContainerMemoryMaxEvents         = "container_memory_max_events_count"
	ContainerOOMEvents               = "container_memory_oom_events_count"
	ContainerOOMKills                = "container_memory_oom_kill_events_count"
	ContainerOOMGroupKills           = "container_memory_oom_group_kill_events_count"
	ContainerCPULimit                = "container_cpu_limit_cores"
	ContainerCPUUsage                = "container_cpu_usage_cores"
	ContainerCPUUtilization          = "container_cpu_utilization_percentage"
	ContainerCPUThrottledPeriods     = "container_cpu_throttled_periods_percentage"
	// Cumulative counters: their meaning does not depend on the interval.
	ContainerCPUUsageSecondsTotal     = "container_cpu_usage_seconds_total"
	ContainerCPUPeriodsTotal          = "container_cpu_periods_total"
	ContainerCPUThrottledPeriodsTotal = "container_cpu_throttled_periods_total"
	ContainerCPUThrottledSecondsTotal = "container_cpu_throttled_seconds_total"
	ContainerCPUUsageLimitSplit       = "container_cpu_usage_limit_split_count" // v1: usage and limit of different cgroups
	ContainerPIDs                     = "container_pids_count"
	ContainerPIDsLimit                = "container_pids_limit_count"
	ContainerPIDsMaxEvents            = "container_pids_max_events_count"
)

// Node series: metrics/node.
const (
	NodeMemoryTotal        = "node_memory_total_megabytes"
	NodeMemoryAvailable    = "node_memory_available_megabytes"
	NodeMemoryUsed         = "node_memory_used_megabytes"
	NodeMemoryUsage        = "node_memory_usage_megabytes" // MLflow's name for used
	NodeMemoryUsagePercent = "node_memory_usage_percentage"
	NodeLoad1              = "node_load_1m"
	NodeLoad5              = "node_load_5m"
	NodeLoad15             = "node_load_15m"
	NodeCPUCount           = "node_cpu_count"
	NodeCPUUtilization     = "node_cpu_utilization_percentage"

	RootfsDiskTotal        = "rootfs_disk_total_megabytes"
	RootfsDiskUsed         = "rootfs_disk_used_megabytes"
	RootfsDiskAvailable    = "rootfs_disk_available_megabytes"
	RootfsDiskUsagePercent = "rootfs_disk_usage_percentage"

	NetnsReceive      = "netns_network_receive_megabytes"
	NetnsTransmit     = "netns_network_transmit_megabytes"
	NetnsReceiveRate  = "netns_network_receive_megabytes_per_second"
	NetnsTransmitRate = "netns_network_transmit_megabytes_per_second"
)

// Process-tree series: metrics/process, and metrics/gpu for GPU memory.
const (
	ProcessMemoryRSS             = "process_memory_rss_megabytes"
	ProcessCount                 = "process_count"
	ProcessThreads               = "process_threads_count"
	ProcessCPUUsage              = "process_cpu_usage_cores"
	ProcessGPUProcesses          = "process_gpu_processes_count"
	ProcessGPUUnmatchedProcesses = "process_gpu_unmatched_processes_count"
	ProcessGPUMemory             = "process_gpu_memory_megabytes"
)

// Pressure (PSI) series: the avg10 share of one resource ("cpu", "memory",
// "io") and line ("some", "full").
func ContainerPressure(resource, line string) string {
	return "container_pressure_" + resource + "_" + line + "_avg10_percentage"
}

// NodePressure is ContainerPressure for the node's /proc/pressure.
func NodePressure(resource, line string) string {
	return "node_pressure_" + resource + "_" + line + "_avg10_percentage"
}

// The pressure series consumers read.
var (
	ContainerPressureMemorySome = ContainerPressure("memory", "some")
	ContainerPressureMemoryFull = ContainerPressure("memory", "full")
)

// GPU series are GPUPrefix(i) (or MIGPrefix(i, m)) followed by one of these.
const (
	GPUUtilization                 = "utilization_percentage"
	GPUMemoryControllerUtilization = "memory_controller_utilization_percentage"
	GPUPowerUsage                  = "power_usage_watts"
	GPUPowerLimit                  = "power_limit_watts"
	GPUPowerUsagePercent           = "power_usage_percentage"
	GPUTemperature                 = "temperature_celsius"
	GPUSMClock                     = "sm_clock_mhz"
	GPUMemoryClock                 = "memory_clock_mhz"
	GPUMemoryReserved              = "memory_reserved_megabytes"
	GPUMemoryUsed                  = "memory_used_megabytes"
	GPUMemoryTotal                 = "memory_total_megabytes"
	GPUMemoryUsagePercent          = "memory_usage_percentage"
	GPUThrottleReasons             = "throttle_reasons_count"
	GPUECCCorrected                = "ecc_corrected_errors_count"
	GPUECCUncorrected              = "ecc_uncorrected_errors_count"
	GPURemappedRowsCorrected       = "remapped_rows_corrected_count"
	GPURemappedRowsUncorrected     = "remapped_rows_uncorrected_count"
	GPUXidErrors                   = "xid_errors_count"
	GPULastXid                     = "last_xid_count" // dcgm-exporter's DCGM_FI_DEV_XID_ERRORS: the last Xid code, not a count
)

// GPUNamePrefix starts every per-GPU series.
const GPUNamePrefix = "gpu_"

// GPUPrefix is the name prefix of GPU i's series ("gpu_0_").
func GPUPrefix(i int) string { return GPUNamePrefix + strconv.Itoa(i) + "_" }

// MIGPrefix is the name prefix of MIG slice m of GPU i ("gpu_0_mig_1_").
func MIGPrefix(i, m int) string { return GPUPrefix(i) + "mig_" + strconv.Itoa(m) + "_" }

// Digits reports whether s is a non-empty run of ASCII digits: the N of a
// gpu_N_ name, or a MIG index.
func Digits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
