package cgroup

import (
	"slices"

	"github.com/bridge-dev/bridge/metrics"
)

// memorySeries are the series of the memory controller.
var memorySeries = []*metrics.Desc{
	metrics.ContainerMemoryWorkingSet, metrics.ContainerMemoryUsage, metrics.ContainerMemoryRSS, metrics.ContainerMemoryCache, metrics.ContainerMemoryPeak,
	metrics.ContainerMemoryLimit, metrics.ContainerMemoryWorkingSetPercent, metrics.ContainerMemoryHighEvents, metrics.ContainerMemoryMaxEvents,
	metrics.ContainerOOMEvents, metrics.ContainerOOMKills, metrics.ContainerOOMGroupKills,
}

// Series are every series the collector may add, as its registration
// declares them.
var Series = append(append(slices.Clone(memorySeries),
	metrics.ContainerCPULimit, metrics.ContainerCPUUsage, metrics.ContainerCPUUtilization, metrics.ContainerCPUThrottledPeriods,
	metrics.ContainerCPUUsageSecondsTotal, metrics.ContainerCPUPeriodsTotal, metrics.ContainerCPUThrottledPeriodsTotal,
	metrics.ContainerCPUThrottledSecondsTotal, metrics.ContainerCPUUsageLimitSplit,
	metrics.ContainerPIDs, metrics.ContainerPIDsLimit, metrics.ContainerPIDsMaxEvents,
), metrics.ContainerPressure.Descs()...)
