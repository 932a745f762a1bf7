package process

import "github.com/bridge-dev/bridge/metrics"

// The child's process tree's series, each described once (the GPU
// collectors add the tree's GPU memory: metrics.ProcessGPUMemory).
var (
	Count = &metrics.Desc{Name: "process_count", Unit: metrics.UnitCount, Scope: metrics.ScopeProcess,
		Help: "Processes in the child's tree."}
	Threads = &metrics.Desc{Name: "process_threads_count", Unit: metrics.UnitCount, Scope: metrics.ScopeProcess,
		Help: "Threads of the child's process tree."}
	CPUUsage = &metrics.Desc{Name: "process_cpu_usage_cores", Unit: metrics.UnitCores, Scope: metrics.ScopeProcess,
		Help: "CPU the child's process tree used over the last interval, in cores."}
)

// Series are every series the collector may add, as its registration
// declares them: the tree's, then each role's (metrics.ProcessRoles).
var Series = func() []*metrics.Desc {
	out := []*metrics.Desc{metrics.ProcessMemoryRSS, Count, Threads, CPUUsage, metrics.ProcessIORead, metrics.ProcessIOWrite, metrics.ProcessBlocked}
	for _, r := range metrics.ProcessRoles {
		out = append(out, r.All()...)
	}
	return out
}()
