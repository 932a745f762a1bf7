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
	}},
}
