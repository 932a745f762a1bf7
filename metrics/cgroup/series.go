package cgroup

import (
	"slices"

	"github.com/bridge-dev/bridge/metrics"
)

// Scope is the container's: the cgroup bridge and its child run in, what
// kubelet and cAdvisor see.
const Scope metrics.Scope = "container"

// overLimit is the range of a percentage of the container's limit: usage
// passes its limit for a while (a CPU burst, the reads' timing, memory the
// kernel has yet to reclaim, a limit lowered under the usage), so above
// 100, but never beyond the node's CPUs over the smallest quota (1 ms a
// second) or its memory over a page.
var overLimit = metrics.Range{Min: 0, Max: 1e8}

// The container's series, each described once: the collector adds values
// against them, and the end-of-run table, forensics and fast sampling near
// the limit read them.
var (
	MemoryWorkingSet = &metrics.Desc{Name: "container_memory_working_set_megabytes", Unit: metrics.UnitMegabytes, Scope: Scope,
		Prom: "container_memory_working_set_bytes", Help: "Current working set of the container in bytes (usage minus inactive file)."}
	MemoryUsage = &metrics.Desc{Name: "container_memory_usage_megabytes", Unit: metrics.UnitMegabytes, Scope: Scope,
		Prom: "container_memory_usage_bytes", Help: "Current memory usage of the container in bytes, including all memory regardless of when it was accessed."}
	MemoryRSS = &metrics.Desc{Name: "container_memory_rss_megabytes", Unit: metrics.UnitMegabytes, Scope: Scope,
		Prom: "container_memory_rss", Help: "Size of RSS of the container in bytes."}
	MemoryCache = &metrics.Desc{Name: "container_memory_cache_megabytes", Unit: metrics.UnitMegabytes, Scope: Scope,
		Prom: "container_memory_cache", Help: "Number of bytes of page cache memory of the container."}
	MemoryPeak = &metrics.Desc{Name: "container_memory_peak_megabytes", Unit: metrics.UnitMegabytes, Scope: Scope,
		Prom: "container_memory_max_usage_bytes", Help: "Maximum memory usage of the container recorded in bytes."}
	MemoryLimit = &metrics.Desc{Name: "container_memory_limit_megabytes", Unit: metrics.UnitMegabytes, Scope: Scope, Steady: true,
		Prom: "container_spec_memory_limit_bytes", Help: "Memory limit of the container in bytes (the effective one: the smallest among its cgroup and ancestors)."}
	// Working set / limit: named after its numerator.
	MemoryWorkingSetPercent = &metrics.Desc{Name: "container_memory_working_set_percentage", Unit: metrics.UnitPercentage, Scope: Scope, Valid: overLimit,
		Help: "Working set of the container as a percentage of its memory limit."}
	MemoryHighEvents = &metrics.Desc{Name: "container_memory_high_events_count", Unit: metrics.UnitCount, Scope: Scope, Steady: true,
		Help: "Times the container's memory usage went over memory.high (memory.events high)."}
	MemoryMaxEvents = &metrics.Desc{Name: "container_memory_max_events_count", Unit: metrics.UnitCount, Scope: Scope, Steady: true,
		Help: "Times the container's memory usage reached its limit (memory.events max)."}
	OOMEvents = &metrics.Desc{Name: "container_memory_oom_events_count", Unit: metrics.UnitCount, Scope: Scope, Steady: true,
		Help: "Times the container hit its memory limit and the OOM path ran (memory.events oom)."}
	OOMKills = &metrics.Desc{Name: "container_memory_oom_kill_events_count", Unit: metrics.UnitCount, Scope: Scope, Steady: true, Kind: metrics.Counter,
		Prom: "container_oom_events_total", Help: "Count of out of memory kills in the container (memory.events oom_kill)."}
	OOMGroupKills = &metrics.Desc{Name: "container_memory_oom_group_kill_events_count", Unit: metrics.UnitCount, Scope: Scope, Steady: true,
		Help: "Group OOM kills in the container (memory.events oom_group_kill)."}
	CPULimit = &metrics.Desc{Name: "container_cpu_limit_cores", Unit: metrics.UnitCores, Scope: Scope, Steady: true,
		Help: "CPU limit of the container in cores: the smallest quota of its cgroup and ancestors, or its cpuset."}
	CPUUsage = &metrics.Desc{Name: "container_cpu_usage_cores", Unit: metrics.UnitCores, Scope: Scope,
		Help: "CPU the container used over the last interval, in cores."}
	CPUUtilization = &metrics.Desc{Name: "container_cpu_utilization_percentage", Unit: metrics.UnitPercentage, Scope: Scope, Valid: overLimit,
		Help: "CPU the container used over the last interval as a percentage of its limit (else of its CPUs)."}
	CPUThrottledPeriods = &metrics.Desc{Name: "container_cpu_throttled_periods_percentage", Unit: metrics.UnitPercentage, Scope: Scope,
		Help: "Share of the last interval's CFS periods in which the container was throttled."}
	// Cumulative counters: their meaning does not depend on the interval.
	CPUUsageSecondsTotal = &metrics.Desc{Name: "container_cpu_usage_seconds_total", Unit: metrics.UnitSeconds, Scope: Scope, Kind: metrics.Counter,
		Prom: "container_cpu_usage_seconds_total", Help: "Cumulative cpu time consumed in seconds."}
	CPUPeriodsTotal = &metrics.Desc{Name: "container_cpu_periods_total", Unit: metrics.UnitCount, Scope: Scope, Kind: metrics.Counter,
		Prom: "container_cpu_cfs_periods_total", Help: "Number of elapsed enforcement period intervals."}
	CPUThrottledPeriodsTotal = &metrics.Desc{Name: "container_cpu_throttled_periods_total", Unit: metrics.UnitCount, Scope: Scope, Kind: metrics.Counter,
		Prom: "container_cpu_cfs_throttled_periods_total", Help: "Number of throttled period intervals."}
	CPUThrottledSecondsTotal = &metrics.Desc{Name: "container_cpu_throttled_seconds_total", Unit: metrics.UnitSeconds, Scope: Scope, Kind: metrics.Counter,
		Prom: "container_cpu_cfs_throttled_seconds_total", Help: "Total time duration the container has been throttled."}
	// v1: usage and limit of different cgroups.
	CPUUsageLimitSplit = &metrics.Desc{Name: "container_cpu_usage_limit_split_count", Unit: metrics.UnitCount, Scope: Scope, Steady: true,
		Help: "1 when the container's CPU usage and CPU limit come from different cgroups (cgroup v1)."}
	PIDs = &metrics.Desc{Name: "container_pids_count", Unit: metrics.UnitCount, Scope: Scope,
		Help: "Tasks (threads included) in the container's cgroup."}
	PIDsLimit = &metrics.Desc{Name: "container_pids_limit_count", Unit: metrics.UnitCount, Scope: Scope, Steady: true,
		Help: "The container's pids.max."}
	PIDsMaxEvents = &metrics.Desc{Name: "container_pids_max_events_count", Unit: metrics.UnitCount, Scope: Scope, Steady: true,
		Help: "Forks refused because the container reached pids.max (pids.events max)."}
)

// Pressure are the cgroup's PSI series; the memory ones are read by the
// end-of-run table and forensics.
var (
	Pressure           = metrics.PressureSeries(Scope, "container's cgroup")
	PressureMemorySome = Pressure[1].Some
	PressureMemoryFull = Pressure[1].Full
)

// memorySeries are the series of the memory controller.
var memorySeries = []*metrics.Desc{
	MemoryWorkingSet, MemoryUsage, MemoryRSS, MemoryCache, MemoryPeak,
	MemoryLimit, MemoryWorkingSetPercent, MemoryHighEvents, MemoryMaxEvents,
	OOMEvents, OOMKills, OOMGroupKills,
}

// Series are every series the collector may add, as its registration
// declares them.
var Series = append(append(slices.Clone(memorySeries),
	CPULimit, CPUUsage, CPUUtilization, CPUThrottledPeriods,
	CPUUsageSecondsTotal, CPUPeriodsTotal, CPUThrottledPeriodsTotal,
	CPUThrottledSecondsTotal, CPUUsageLimitSplit,
	PIDs, PIDsLimit, PIDsMaxEvents,
), Pressure.Descs()...)
