package gpu

import "github.com/bridge-dev/bridge/metrics"

// Series are every series the NVML collector may add, as its registration
// declares them: per-GPU templates (activity from GPM among them), and the
// child's GPU memory. All are shared with other collectors and declared in
// package metrics.
var Series = append([]*metrics.Desc{
	metrics.GPUUtilization, metrics.GPUMemoryControllerUtilization, metrics.GPUPowerUsage, metrics.GPUPowerLimit,
	metrics.GPUPowerUsagePercent, metrics.GPUTemperature, metrics.GPUSMClock, metrics.GPUMemoryClock,
	metrics.GPUMemoryReserved, metrics.GPUMemoryUsed, metrics.GPUMemoryTotal, metrics.GPUMemoryUsagePercent,
	metrics.GPUThrottleReasons,
	metrics.GPUThrottleGPUIdle, metrics.GPUThrottleApplicationsClocks, metrics.GPUThrottleSWPowerCap, metrics.GPUThrottleHWSlowdown,
	metrics.GPUThrottleSyncBoost, metrics.GPUThrottleSWThermal, metrics.GPUThrottleHWThermal, metrics.GPUThrottleHWPowerBrake,
	metrics.GPUECCCorrected, metrics.GPUECCUncorrected, metrics.GPURemappedRowsCorrected, metrics.GPURemappedRowsUncorrected,
	metrics.GPURemappedRowsPending, metrics.GPURemappedRowsFailed, metrics.GPUXidErrors, metrics.GPUEnergy,
	metrics.ProcessGPUProcesses, metrics.ProcessGPUUnmatchedProcesses, metrics.ProcessGPUMemory,
}, metrics.GPUProfSeries...)
