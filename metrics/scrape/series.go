package scrape

import "github.com/bridge-dev/bridge/metrics"

// Series are the static series the collector maps dcgm-exporter's fields
// to (the activity series among them), as its registration declares them;
// it also makes metrics.DCGMProfiling templates of other fields and
// metrics.Passthrough series at run time.
var Series = append([]*metrics.Desc{
	metrics.GPUUtilization, metrics.GPUMemoryControllerUtilization, metrics.GPUMemoryUsed, metrics.GPUPowerUsage,
	metrics.GPUTemperature, metrics.GPUSMClock, metrics.GPULastXid,
}, metrics.GPUProfSeries...)
