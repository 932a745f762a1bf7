package amdgpu

import "github.com/bridge-dev/bridge/metrics"

// Series are every series the collector may add, as its registration
// declares them: the per-GPU templates that mean what NVIDIA's do, and the
// child's GPU memory (declared in package metrics, shared with the NVML
// collector).
var Series = []*metrics.Desc{
	metrics.GPUUtilization, metrics.GPUMemoryControllerUtilization, metrics.GPUPowerUsage, metrics.GPUPowerLimit,
	metrics.GPUPowerUsagePercent, metrics.GPUTemperature, metrics.GPUSMClock, metrics.GPUMemoryClock,
	metrics.GPUMemoryUsed, metrics.GPUMemoryTotal, metrics.GPUMemoryUsagePercent,
	metrics.ProcessGPUProcesses, metrics.ProcessGPUUnmatchedProcesses, metrics.ProcessGPUMemory,
}
