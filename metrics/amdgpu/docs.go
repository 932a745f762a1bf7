package amdgpu

import "github.com/bridge-dev/bridge/metrics"

// docs are the collector's tables in docs/metrics.md (docgen writes them
// between the markers of their IDs): a row per series, with where it is
// read from and how it is computed. <dev> and <hwmon> are the card's; a
// compute partition's are its card's, sent under the first of the job's
// GPUs on that card (docs/metrics.md, "AMD GPUs").
var docs = []metrics.DocTable{
	{ID: "amdgpu", Columns: []string{"Source", "Formula, notes"}, Rows: []metrics.DocRow{
		{Series: []*metrics.Desc{metrics.GPUUtilization}, Cells: []string{"`<dev>/gpu_busy_percent`", "the SMU's load figure from the activity of the GPU's engines (MLflow's `gpu_{i}_utilization_percentage` on ROCm reads the same through rocm-smi)"}},
		{Series: []*metrics.Desc{metrics.GPUMemoryControllerUtilization}, Cells: []string{"`<dev>/mem_busy_percent`", "the SMU's VRAM activity (W&B: `memoryReadWriteActivity`)"}},
		{Series: []*metrics.Desc{metrics.GPUMemoryUsed}, Cells: []string{"`<dev>/mem_info_vram_used`", "bytes / 10^6"}},
		{Series: []*metrics.Desc{metrics.GPUMemoryTotal}, Cells: []string{"`<dev>/mem_info_vram_total`", "bytes / 10^6"}},
		{Series: []*metrics.Desc{metrics.GPUMemoryUsagePercent}, Cells: []string{"both", "used / total × 100"}},
		{Series: []*metrics.Desc{GTTUsed}, Cells: []string{"`<dev>/mem_info_gtt_used`", "bytes / 10^6: system memory the GPU has mapped. An APU keeps most of its GPU memory here (its VRAM is a small carve-out). Never above the total; at most 10^9 MB."}},
		{Series: []*metrics.Desc{GTTTotal}, Cells: []string{"`<dev>/mem_info_gtt_total`", "bytes / 10^6: system memory the GPU can map (a share of the node's RAM). At most 10^9 MB."}},
		{Series: []*metrics.Desc{metrics.GPUPowerUsage}, Cells: []string{"`<hwmon>/power1_average`, else `power1_input`", "µW / 10^6: the average where the GPU gives it, else the instant reading (not every product has both). Socket power: on an APU it includes the CPU."}},
		{Series: []*metrics.Desc{metrics.GPUPowerLimit}, Cells: []string{"`<hwmon>/power1_cap`", "µW / 10^6; absent when the file is an empty line (the query failed)"}},
		{Series: []*metrics.Desc{metrics.GPUPowerUsagePercent}, Cells: []string{"both", "power / cap × 100"}},
		{Series: []*metrics.Desc{metrics.GPUTemperature}, Cells: []string{"`<hwmon>/temp*_input` labelled `edge`, else `junction`", "m°C / 1000; MI300-class GPUs have no edge sensor, so it is the hotspot there; unlabelled sensors: `temp1_input`"}},
		{Series: []*metrics.Desc{metrics.GPUSMClock}, Cells: []string{"`<hwmon>/freq*_input` labelled `sclk`, else an unlabelled `freq1_input`", "Hz / 10^6: the shader clock"}},
		{Series: []*metrics.Desc{metrics.GPUMemoryClock}, Cells: []string{"`<hwmon>/freq*_input` labelled `mclk`, else an unlabelled `freq2_input`", "Hz / 10^6. Only from the memory clock's own sensor: an APU has no `freq2_*` (amdgpu hides it), and then no memory clock is sent, never `freq1` (the shader clock) in its place."}},
	}},
}
