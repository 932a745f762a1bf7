package cgroup

import "github.com/bridge-dev/bridge/metrics"

// docs are the collector's tables in docs/metrics.md (docgen writes them
// between the markers of their IDs): a row per series, with where it is
// read from and how it is computed.
var docs = []metrics.DocTable{
	{ID: "cgroup/memory", Columns: []string{"v2 source", "v1 source", "Formula"}, Rows: []metrics.DocRow{
		{Series: []*metrics.Desc{metrics.ContainerMemoryWorkingSet}, Cells: []string{"`<leaf>/memory.current`, `memory.stat` `inactive_file`", "`<leaf>/memory.usage_in_bytes`, `memory.stat` `total_inactive_file`", "usage − inactive file pages, clamped at 0"}},
		{Series: []*metrics.Desc{metrics.ContainerMemoryUsage}, Cells: []string{"`memory.current`", "`memory.usage_in_bytes`", "raw usage, page cache included"}},
		{Series: []*metrics.Desc{metrics.ContainerMemoryLimit}, Cells: []string{"`memory.max` of the leaf and each visible ancestor", "the leaf's `memory.stat` `hierarchical_memory_limit`", "v2: the tightest of them, `max` is no limit. v1: the kernel's own answer, which includes ancestors only under `memory.use_hierarchy=1` and ancestors hidden by a bind mount; values ≥ 2^62 (the kernel writes 9223372036854771712) are no limit; the source names the visible directory whose `memory.limit_in_bytes` equals it, or says the ancestor is outside this view. Omitted when there is none."}},
		{Series: []*metrics.Desc{metrics.ContainerMemoryWorkingSetPercent}, Cells: []string{"as above", "as above", "working set / limit × 100; omitted without a limit. Named after its numerator: `container_memory_usage_megabytes` (page cache included) is not what it divides."}},
		{Series: []*metrics.Desc{metrics.ContainerMemoryRSS}, Cells: []string{"`memory.stat` `anon`", "`memory.stat` `total_rss`", "anonymous memory"}},
		{Series: []*metrics.Desc{metrics.ContainerMemoryCache}, Cells: []string{"`memory.stat` `file`", "`memory.stat` `total_cache`", "page cache (includes tmpfs/shmem)"}},
		{Series: []*metrics.Desc{metrics.ContainerMemoryPeak}, Cells: []string{"`memory.peak` (Linux ≥ 5.19; omitted when absent)", "`memory.max_usage_in_bytes`", "highest usage since the cgroup was created (or the peak was reset); on v2 from Linux 6.12, since bridge's start: bridge resets the mark for its own open file (other readers keep theirs). The end of the run takes it only where it is the job's (Peaks at the end of a run)"}},
		{Series: []*metrics.Desc{metrics.ContainerMemoryHighEvents}, Cells: []string{"`memory.events` `high`", "—", "cumulative: times usage went over `memory.high` and the cgroup was throttled into reclaim (no OOM)"}},
		{Series: []*metrics.Desc{metrics.ContainerMemoryMaxEvents}, Cells: []string{"`memory.events` `max`", "`memory.failcnt`", "cumulative: times usage reached the limit (reclaim ran; an OOM may follow); the kernel counts the same failed charge in both"}},
		{Series: []*metrics.Desc{metrics.ContainerOOMEvents}, Cells: []string{"`memory.events` `oom`", "— (v1 has no count)", "cumulative: times the cgroup hit its limit and the OOM path ran"}},
		{Series: []*metrics.Desc{metrics.ContainerOOMKills}, Cells: []string{"`memory.events` `oom_kill`", "`memory.oom_control` `oom_kill` (Linux ≥ 4.13; omitted on older kernels, never read as 0)", "cumulative: processes killed by the OOM killer in this cgroup (v2: and below)"}},
		{Series: []*metrics.Desc{metrics.ContainerOOMGroupKills}, Cells: []string{"`memory.events` `oom_group_kill` (newer kernels; omitted when absent)", "—", "cumulative: group kills (`memory.oom.group=1`, set by kubelet since 1.28 on v2)"}},
	}},
	{ID: "cgroup/cpu", Columns: []string{"v2 source", "v1 source", "Formula"}, Rows: []metrics.DocRow{
		{Series: []*metrics.Desc{metrics.ContainerCPUUsage}, Cells: []string{"`<leaf>/cpu.stat` `usage_usec`", "`<cpuacct leaf>/cpuacct.usage` (ns)", "Δusage / Δwall time. Needs two readings. At most the CPUs the cgroup may run on (its cpuset, else the online CPUs): the kernel charges CPU time at ticks, so over a short window (the sample taken as the child exits) the counter's lag alone can pass that. The end-of-run table's peak is taken over samples at least 1 s after the one before."}},
		{Series: []*metrics.Desc{metrics.ContainerCPULimit}, Cells: []string{"`cpu.max` (`$QUOTA $PERIOD`) of the leaf and each visible ancestor; `cpuset.cpus.effective` of the nearest directory that has one", "`cpu.cfs_quota_us` / `cpu.cfs_period_us` of the leaf and each visible ancestor; `cpuset.effective_cpus` (else `cpuset.cpus`) of the nearest cpuset directory", "min(quota / period over those directories, number of CPUs in the cpuset), as Go 1.25's runtime (GOMAXPROCS) and W&B do. The cpuset counts only when it is smaller than the online CPUs (`cpuN` lines in `<proc>/stat`). v2 `max` and v1 `-1` are no quota. Omitted when there is no limit."}},
		{Series: []*metrics.Desc{metrics.ContainerCPUUtilization}, Cells: []string{"as above", "as above", "usage cores / limit cores × 100; without a limit, usage cores / the cpuset size (= online CPUs) × 100, which the source then says. Needs two readings. Omitted on v1 when usage and limit come from different cgroups (see `container_cpu_usage_limit_split_count`)."}},
		{Series: []*metrics.Desc{metrics.ContainerCPUThrottledPeriods}, Cells: []string{"`cpu.stat` `nr_periods`, `nr_throttled`", "`<cpu leaf>/cpu.stat` `nr_periods`, `nr_throttled`", "Δnr_throttled / Δnr_periods × 100 over the interval. Omitted when no period elapsed (no quota anywhere, or idle). Needs two readings."}},
		{Series: []*metrics.Desc{metrics.ContainerCPUUsageSecondsTotal}, Cells: []string{"`cpu.stat` `usage_usec`", "`<cpuacct leaf>/cpuacct.usage` (ns)", "cumulative CPU time of the cgroup (cAdvisor's `container_cpu_usage_seconds_total`)"}},
		{Series: []*metrics.Desc{metrics.ContainerCPUPeriodsTotal}, Cells: []string{"`cpu.stat` `nr_periods`", "`<cpu leaf>/cpu.stat` `nr_periods`", "cumulative: CFS periods that ran with a quota. On v2 only where the cpu controller is enabled (`cpu.max` exists)."}},
		{Series: []*metrics.Desc{metrics.ContainerCPUThrottledPeriodsTotal}, Cells: []string{"`cpu.stat` `nr_throttled`", "`cpu.stat` `nr_throttled`", "cumulative: periods in which the cgroup was throttled"}},
		{Series: []*metrics.Desc{metrics.ContainerCPUThrottledSecondsTotal}, Cells: []string{"`cpu.stat` `throttled_usec`", "`cpu.stat` `throttled_time` (ns)", "cumulative: time the cgroup was throttled (cAdvisor's `container_cpu_cfs_throttled_seconds_total`). The increase over any span is the throttled time in it, whatever the sampling interval."}},
		{Series: []*metrics.Desc{metrics.ContainerCPUUsageLimitSplit}, Cells: []string{"—", "`cpuacct` and `cpu` leaves", "1, present only when the `cpu` and `cpuacct` hierarchies place bridge in different cgroups: `container_cpu_usage_cores` and `container_cpu_limit_cores` are then not one container's, no utilization is computed, and the end-of-run table does not print usage \"of limit\". The source names both directories."}},
	}},
	{ID: "cgroup/pressure", Columns: []string{"v2 source", "v1", "Formula"}, Rows: []metrics.DocRow{
		{Series: metrics.ContainerPressure.Some(), Cells: []string{"`<unified leaf>/{cpu,memory,io}.pressure` `some avg10`", "—", "share of the last 10 s in which at least one task of the cgroup was stalled on the resource"}},
		{Series: metrics.ContainerPressure.Full(), Cells: []string{"same files, `full avg10`", "—", "share of the last 10 s in which all non-idle tasks of the cgroup were stalled. cpu has no `full` line before Linux 5.13: omitted."}},
	}},
	{ID: "cgroup/pids", Columns: []string{"v2 source", "v1 source", "Formula"}, Rows: []metrics.DocRow{
		{Series: []*metrics.Desc{metrics.ContainerPIDs}, Cells: []string{"`<leaf>/pids.current`", "`<pids leaf>/pids.current`", "tasks (threads included) in the cgroup"}},
		{Series: []*metrics.Desc{metrics.ContainerPIDsLimit}, Cells: []string{"`pids.max` of the leaf", "`pids.max` of the leaf", "omitted when `max`"}},
		{Series: []*metrics.Desc{metrics.ContainerPIDsMaxEvents}, Cells: []string{"`pids.events` `max`", "`pids.events` `max`", "cumulative: forks refused because `pids.max` was reached (Linux 6.1 counts them in the forking task's cgroup)"}},
	}},
}
