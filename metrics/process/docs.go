package process

import "github.com/bridge-dev/bridge/metrics"

// docs are the collector's tables in docs/metrics.md (docgen writes them
// between the markers of their IDs): a row per series, with where it is
// read from and how it is computed.
var docs = []metrics.DocTable{
	{ID: "process", Columns: []string{"Source", "Formula"}, Rows: []metrics.DocRow{
		{Series: []*metrics.Desc{metrics.ProcessMemoryRSS}, Cells: []string{"`<proc>/*/stat`", "Σ rss × page size over the tree; none while the tree has no memory of its own (the child between fork and exec, zombies), rather than 0. Pages shared between processes (fork copy-on-write, shared memory, the same mapped files) are counted once per process, as a sum of psutil RSS would; so it can exceed the memory actually used."}},
		{Series: []*metrics.Desc{CPUUsage}, Cells: []string{"`<proc>/*/stat`", "CPU time the tree used in the interval (in ticks of 1/100 s) / 100 / interval seconds. Needs two readings. See below."}},
		{Series: []*metrics.Desc{Count}, Cells: []string{"`<proc>/*/stat`", "processes in the tree (zombies not yet reaped included)"}},
		{Series: []*metrics.Desc{Threads}, Cells: []string{"`<proc>/*/stat`", "Σ num_threads over the tree"}},
		{Series: []*metrics.Desc{metrics.ProcessIORead, metrics.ProcessIOWrite}, Cells: []string{"`<proc>/*/io`", "Δ(read_bytes), Δ(write_bytes) over the tree / interval seconds: bytes the storage layer fetched and took for it (page-cache hits, pipes and sockets not counted), accounted as CPU time is (below). Needs two readings."}},
		{Series: []*metrics.Desc{metrics.ProcessBlocked}, Cells: []string{"`<proc>/*/stat`", "processes in state D (uninterruptible sleep) when sampled"}},
	}},
	{ID: "process/roles", Columns: []string{"Source", "Formula"}, Rows: roleRows()},
}

// roleRows are the rows of the roles' series: the tree's formulas over
// the processes of each role.
func roleRows() []metrics.DocRow {
	var rows []metrics.DocRow
	for _, d := range metrics.ProcessRoles {
		rows = append(rows,
			metrics.DocRow{Series: []*metrics.Desc{d.CPU}, Cells: []string{"`<proc>/*/stat`", "as `process_cpu_usage_cores`, over the role's processes"}},
			metrics.DocRow{Series: []*metrics.Desc{d.RSS}, Cells: []string{"`<proc>/*/stat`", "as `process_memory_rss_megabytes`, over the role's processes (none while the whole tree has no RSS)"}},
			metrics.DocRow{Series: []*metrics.Desc{d.Count}, Cells: []string{"`<proc>/*/stat`", "the role's processes"}},
			metrics.DocRow{Series: []*metrics.Desc{d.IORead, d.IOWrite}, Cells: []string{"`<proc>/*/io`", "as `process_io_…`, over the role's processes"}},
		)
	}
	return rows
}
