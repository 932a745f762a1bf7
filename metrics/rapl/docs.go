package rapl

import "github.com/bridge-dev/bridge/metrics"

// docs are the collector's tables in docs/metrics.md (docgen writes them
// between the markers of their IDs): a row per series, with where it is
// read from and how it is computed.
var docs = []metrics.DocTable{
	{ID: "rapl", Columns: []string{"Source", "Formula"}, Rows: []metrics.DocRow{
		{Series: []*metrics.Desc{PackageEnergy}, Cells: []string{"`<sys>/class/powercap/intel-rapl:N/energy_uj` of the zone named `package-<package>`, or of each zone named `package-<package>-die-D`", "energy the package used since bridge started: the growth of the µJ counter / 10^6, summed over the package's dies. Needs two readings; only in a sample where each of its dies was read."}},
		{Series: []*metrics.Desc{PackagePower}, Cells: []string{"same", "energy over the last interval / interval seconds, summed over the dies likewise. Needs two readings."}},
		{Series: []*metrics.Desc{metrics.NodeCPUEnergy}, Cells: []string{"every package's `energy_uj`", "the sum over the packages; only in a sample where every package was read"}},
		{Series: []*metrics.Desc{Power}, Cells: []string{"same", "the sum over the packages, likewise"}},
	}},
}
