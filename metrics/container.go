package metrics

// overLimit is the range of a percentage of the container's limit: usage
// passes its limit for a while (a CPU burst, the reads' timing, memory the
// kernel has yet to reclaim, a limit lowered under the usage), so above
// 100, but never beyond the node's CPUs over the smallest quota (1 ms a
// second) or its memory over a page.
var overLimit = Range{Min: 0, Max: 1e8}

// The container's series, each described once: metrics/cgroup adds them;
// the end-of-run table, forensics, the job's report and fast sampling near
// the limit read them.
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
	ContainerMemoryLimit = &Desc{Name: "container_memory_limit_megabytes", Unit: UnitMegabytes, Scope: ScopeContainer, Steady: true,
		Prom: "container_spec_memory_limit_bytes", Help: "Memory limit of the container in bytes (the effective one: the smallest among its cgroup and ancestors)."}
	// Working set / limit: named after its numerator.
	ContainerMemoryWorkingSetPercent = &Desc{Name: "container_memory_working_set_percentage", Unit: UnitPercentage, Scope: ScopeContainer, Valid: overLimit,
		Help: "Working set of the container as a percentage of its memory limit."}
	ContainerMemoryHighEvents = &Desc{Name: "container_memory_high_events_count", Unit: UnitCount, Scope: ScopeContainer, Steady: true,
		Help: "Times the container's memory usage went over memory.high (memory.events high)."}
	ContainerMemoryMaxEvents = &Desc{Name: "container_memory_max_events_count", Unit: UnitCount, Scope: ScopeContainer, Steady: true,
		Help: "Times the container's memory usage reached its limit (memory.events max; v1 memory.failcnt)."}
	ContainerOOMEvents = &Desc{Name: "container_memory_oom_events_count", Unit: UnitCount, Scope: ScopeContainer, Steady: true,
		Help: "Times the container hit its memory limit and the OOM path ran (memory.events oom)."}
	ContainerOOMKills = &Desc{Name: "container_memory_oom_kill_events_count", Unit: UnitCount, Scope: ScopeContainer, Steady: true, Kind: Counter,
		Prom: "container_oom_events_total", Help: "Count of out of memory kills in the container (memory.events oom_kill)."}
	ContainerOOMGroupKills = &Desc{Name: "container_memory_oom_group_kill_events_count", Unit: UnitCount, Scope: ScopeContainer, Steady: true,
		Help: "Group OOM kills in the container (memory.events oom_group_kill)."}
	ContainerCPULimit = &Desc{Name: "container_cpu_limit_cores", Unit: UnitCores, Scope: ScopeContainer, Steady: true,
		Help: "CPU limit of the container in cores: the smallest quota of its cgroup and ancestors, or its cpuset."}
	ContainerCPUUsage = &Desc{Name: "container_cpu_usage_cores", Unit: UnitCores, Scope: ScopeContainer,
		Help: "CPU the container used over the last interval, in cores."}
	ContainerCPUUtilization = &Desc{Name: "container_cpu_utilization_percentage", Unit: UnitPercentage, Scope: ScopeContainer, Valid: overLimit,
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
	ContainerCPUUsageLimitSplit = &Desc{Name: "container_cpu_usage_limit_split_count", Unit: UnitCount, Scope: ScopeContainer, Steady: true,
		Help: "1 when the container's CPU usage and CPU limit come from different cgroups (cgroup v1)."}
	ContainerPIDs = &Desc{Name: "container_pids_count", Unit: UnitCount, Scope: ScopeContainer,
		Help: "Tasks (threads included) in the container's cgroup."}
	ContainerPIDsLimit = &Desc{Name: "container_pids_limit_count", Unit: UnitCount, Scope: ScopeContainer, Steady: true,
		Help: "The container's pids.max."}
	ContainerPIDsMaxEvents = &Desc{Name: "container_pids_max_events_count", Unit: UnitCount, Scope: ScopeContainer, Steady: true,
		Help: "Forks refused because the container reached pids.max (pids.events max)."}
)

// The container's PSI series (the cgroup's *.pressure files); the memory
// ones are read by the end-of-run table and forensics.
var (
	ContainerPressure           = PressureSeries(ScopeContainer, "container's cgroup")
	ContainerPressureMemorySome = ContainerPressure[1].Some
	ContainerPressureMemoryFull = ContainerPressure[1].Full
)
