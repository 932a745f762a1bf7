// Package advice says what a job should ask for next time, from what it
// used (a memory limit and a CPU request, by the rule of the Kubernetes
// Vertical Pod Autoscaler's recommender, and, plainly, a limit it left
// mostly unused), and what a run cost at the prices the user gives. Its
// functions are pure: the end of a run (pipeline) and the job's report
// (report) give them what they measured or read. docs/metrics.md states
// the rule.
package advice

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/summary"
)

// The VPA recommender's defaults (kubernetes/autoscaler @55c37cd,
// vertical-pod-autoscaler/pkg/recommender: config/config.go
// DefaultRecommenderConfig, logic/recommender.go, model/container.go
// RecordOOM), the flag that sets each in parentheses:
// target = percentile × (1 + margin), at least the pod's minimum.
const (
	// CPUPercentile is the share of the run's CPU use the request covers
	// (--target-cpu-percentile).
	CPUPercentile = 0.9
	// Margin is added to both targets (--recommendation-margin-fraction).
	Margin = 0.15
	// MinCPUCores and MinMemoryMB are the least VPA recommends for a pod
	// (--pod-recommendation-min-cpu-millicores 25,
	// --pod-recommendation-min-memory-mb 250).
	MinCPUCores = 0.025
	MinMemoryMB = 250
	// After an OOM kill the memory the container needed is taken as
	// max(peak + 100 MiB, peak × 1.2) (--oom-min-bump-up-bytes,
	// --oom-bump-up-ratio).
	OOMBumpRatio = 1.2
	OOMMinBumpMB = 100 * (1 << 20) / metrics.Megabyte
)

// UnusedShare is bridge's own line, not VPA's: a limit whose use stayed
// below this share of it all run is said to be mostly unused.
const UnusedShare = 0.5

// Tag keys of a node's advice and cost, recorded at the end of its run
// (under the node's scope in a multi-node job); the job's report reads
// them.
const (
	TagSuggestedMemory = "bridge.suggested_memory_limit_megabytes"
	TagSuggestedCPU    = "bridge.suggested_cpu_cores"
	TagUnused          = "bridge.unused"
	TagCost            = "bridge.cost"
	TagCostBasis       = "bridge.cost_basis"
)

// Use is what a node's job used over its run.
type Use struct {
	PeakWorkingSetMB float64 // the highest working set (the kernel's mark at an OOM kill)
	PeakKnown        bool
	OOMKilled        bool    // the job died of an OOM kill (its own cgroup's or the node's)
	MemoryLimitMB    float64 // 0: no limit
	// CPUPercentileCores is the container's CPU use that CPUPercentile of
	// the run stayed under (stats.Dist, VPA's histogram), CPUPeakCores its
	// highest over a window of at least stats.MinRateWindow.
	CPUPercentileCores, CPUPeakCores float64
	CPUKnown                         bool
	CPULimitCores                    float64 // 0: no limit (or one of another cgroup)
}

// Advice is what a node's job should ask for next time, and how much of
// what it held it never used.
type Advice struct {
	MemoryLimitMB float64 // rounded up to a whole MB
	MemoryKnown   bool
	CPUCores      float64 // rounded up to a millicore
	CPUKnown      bool
	// Unused says plainly each limit whose use stayed below UnusedShare of
	// it all run.
	Unused []string
}

// Suggest applies the rule to what a job used: a memory limit of the peak
// working set, after an OOM kill VPA's bump of it, plus Margin; a CPU
// request of the CPUPercentile of the CPU use plus Margin; each at least
// VPA's minimum.
func Suggest(u Use) Advice {
	var a Advice
	if u.PeakKnown && u.PeakWorkingSetMB >= 0 {
		need := u.PeakWorkingSetMB
		if u.OOMKilled {
			need = max(need+OOMMinBumpMB, need*OOMBumpRatio)
		}
		a.MemoryLimitMB, a.MemoryKnown = math.Ceil(max(need*(1+Margin), MinMemoryMB)), true
		if u.MemoryLimitMB > 0 && !u.OOMKilled && u.PeakWorkingSetMB < UnusedShare*u.MemoryLimitMB {
			a.Unused = append(a.Unused, fmt.Sprintf("peak working set %s of %s MB: %.0f%% of the memory limit was never used",
				short(u.PeakWorkingSetMB, 0), short(u.MemoryLimitMB, 0), 100*(1-u.PeakWorkingSetMB/u.MemoryLimitMB)))
		}
	}
	if u.CPUKnown && u.CPUPercentileCores >= 0 {
		a.CPUCores, a.CPUKnown = math.Ceil(max(u.CPUPercentileCores*(1+Margin), MinCPUCores)*1000)/1000, true
		if u.CPULimitCores > 0 && u.CPUPeakCores < UnusedShare*u.CPULimitCores {
			a.Unused = append(a.Unused, fmt.Sprintf("used %s of %s cores at most: %.0f%% of the CPU limit was never used",
				short(u.CPUPeakCores, 1), short(u.CPULimitCores, 1), 100*(1-u.CPUPeakCores/u.CPULimitCores)))
		}
	}
	return a
}

// short is v to at most digits decimals, without trailing zeros.
func short(v float64, digits int) string {
	p := math.Pow(10, float64(digits))
	return strconv.FormatFloat(math.Round(v*p)/p, 'f', -1, 64)
}

// UseOf is what the job whose samples a holds used; oomKilled says
// whether it died of an OOM kill (forensics' verdict).
func UseOf(a *summary.Accumulator, oomKilled bool) Use {
	u := Use{OOMKilled: oomKilled}
	if f := a.PeakWorkingSet(); f.Known {
		u.PeakWorkingSetMB, u.PeakKnown = f.Value, true
	}
	if lim, ok := a.Get(metrics.ContainerMemoryLimit); ok && lim.Last > 0 {
		u.MemoryLimitMB = lim.Last
	}
	if cpu, ok := a.Get(metrics.ContainerCPUUsage); ok {
		if p, ok := a.Dist(metrics.ContainerCPUUsage).Percentile(CPUPercentile); ok {
			u.CPUPercentileCores, u.CPUKnown = p, true
			u.CPUPeakCores, _, _ = cpu.Rate()
		}
	}
	if _, split := a.Get(metrics.ContainerCPUUsageLimitSplit); !split {
		if lim, ok := a.Get(metrics.ContainerCPULimit); ok && lim.Last > 0 {
			u.CPULimitCores = lim.Last
		}
	}
	return u
}

// Tags are the run tags of a: a figure not known is left out.
func (a Advice) Tags() map[string]string {
	t := map[string]string{}
	if a.MemoryKnown {
		t[TagSuggestedMemory] = strconv.FormatFloat(a.MemoryLimitMB, 'f', -1, 64)
	}
	if a.CPUKnown {
		t[TagSuggestedCPU] = strconv.FormatFloat(a.CPUCores, 'f', -1, 64)
	}
	if len(a.Unused) > 0 {
		t[TagUnused] = strings.Join(a.Unused, "; ")
	}
	return t
}

// Line is a in one line of the end-of-run table ("" when nothing is
// known): what to ask for next time, then what was never used.
func (a Advice) Line() string {
	var parts []string
	if a.MemoryKnown {
		parts = append(parts, "memory limit "+short(a.MemoryLimitMB, 0)+" MB")
	}
	if a.CPUKnown {
		parts = append(parts, "CPU request "+short(a.CPUCores, 3)+" cores")
	}
	if len(parts) == 0 && len(a.Unused) == 0 {
		return ""
	}
	s := strings.Join(parts, ", ")
	if s != "" {
		s += " (VPA's rule: peak working set and 90th percentile of CPU, +15%)"
	}
	if len(a.Unused) > 0 {
		if s != "" {
			s += "; "
		}
		s += strings.Join(a.Unused, "; ")
	}
	return s
}
