package rapl

import "github.com/bridge-dev/bridge/metrics"

// The node's CPU packages, from RAPL. RAPL measures a whole
// package (every core and the uncore), whoever runs on it: node scope.
var (
	PackagePower = &metrics.Desc{Name: "node_cpu_package_<package>_power_watts", Unit: metrics.UnitWatts, Scope: metrics.ScopeNode,
		Instance: []string{"package"}, Prom: "bridge_node_cpu_package_power_watts",
		Help: "Power a CPU package of the node drew over the last interval, from its RAPL energy counter."}
	PackageEnergy = &metrics.Desc{Name: "node_cpu_package_<package>_energy_joules", Unit: metrics.UnitJoules, Scope: metrics.ScopeNode, Kind: metrics.Counter,
		Instance: []string{"package"}, Prom: "bridge_node_cpu_package_energy_joules_total",
		Help: "metrics.NodeCPUEnergy a CPU package of the node used since bridge started (RAPL)."}
	Power = &metrics.Desc{Name: "node_cpu_power_watts", Unit: metrics.UnitWatts, Scope: metrics.ScopeNode,
		Help: "Power all CPU packages of the node drew over the last interval (RAPL)."}
)

// Series are every series the collector may add, as its registration
// declares them.
var Series = []*metrics.Desc{PackagePower, PackageEnergy, Power, metrics.NodeCPUEnergy}
