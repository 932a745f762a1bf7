package scrape

import "github.com/bridge-dev/bridge/metrics"

// docs are the collector's tables in docs/metrics.md (docgen writes them
// between the markers of their IDs): a row per series, with where it is
// read from and how it is computed.
var docs = []metrics.DocTable{
	{ID: "scrape", Columns: []string{"dcgm-exporter field", "Formula"}, Rows: []metrics.DocRow{
		{Series: []*metrics.Desc{metrics.GPULastXid}, Cells: []string{"`DCGM_FI_DEV_XID_ERRORS`", "the last Xid error code, as dcgm-exporter reports it: a code, not a count"}},
		{Family: "gpu_N_prof_<x>_ratio", Unit: metrics.UnitRatio, Cells: []string{"`DCGM_FI_PROF_<X>`", "a profiling field, as served; the fields of the activity table above are those same series"}},
		{Family: "gpu_N_prof_<x>_megabytes_per_second", Unit: metrics.UnitMegabytesPerSecond, Cells: []string{"`DCGM_FI_PROF_<X>_BYTES`", "bytes per second / 10^6"}},
	}},
}
