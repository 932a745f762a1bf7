package whyslow

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/stats"
)

// Fact is one figure of a window the rules read.
type Fact uint8

// The facts. Shares are 0 to 1.
const (
	GPUs             Fact = iota // whole GPUs with an activity reading
	GPUBusy                      // the GPUs' mean share of time busy (SM activity, else utilization)
	GPUSlowdown                  // the largest share of samples in which one GPU had a thermal or hardware slowdown clock event
	SlowdownGPU                  // that GPU's index
	CPULimit                     // cores the job may use: its limit, else the node's CPUs
	CPUUsed                      // cores the job used, mean
	Throttled                    // share of CFS periods throttled, mean
	Trainers                     // trainer processes, at most
	TrainerCores                 // cores the trainers used, mean
	Loaders                      // data-loading worker processes, at most
	LoaderCores                  // cores the data-loading workers used, mean
	MemorySome                   // share of time some task stalled on memory (the container's PSI), mean
	MemoryLimitHits              // times a second the usage reached the memory limit
	WorkingSetShare              // the working set's highest share of the memory limit
	MemoryLimit                  // the memory limit, MB
	IOSome                       // share of time some task stalled on I/O (PSI: the container's, else the node's), mean
	BlockedProcesses             // the job's processes in state D, mean
	LinkShare                    // the highest share of its link's rate a network port carried
	numFacts
)

// Where CPULimit comes from.
const (
	LimitContainer = "the container's limit"
	LimitNode      = "the node's CPUs"
)

// Window is what the rules read of a span of a node's samples: each fact
// with whether it was sampled, and the words its evidence needs. The zero
// Window has no fact.
type Window struct {
	Span time.Duration
	v    [numFacts]float64
	ok   [numFacts]bool
	// GPUBusyFrom says what GPUBusy was read from: "SM activity",
	// "utilization".
	GPUBusyFrom string
	// SlowdownReason names the clock event of GPUSlowdown: "hw_thermal".
	SlowdownReason string
	// CPULimitFrom is LimitContainer or LimitNode.
	CPULimitFrom string
	// IOFrom says whose PSI IOSome is: "the container's", "the node's".
	IOFrom string
	// Link names the port of LinkShare.
	Link string
}

// Set sets fact f to v.
func (w *Window) Set(f Fact, v float64) { w.v[f], w.ok[f] = v, true }

// Has reports whether fact f was sampled.
func (w Window) Has(f Fact) bool { return w.ok[f] }

// Val is fact f, 0 when it was not sampled.
func (w Window) Val(f Fact) float64 { return w.v[f] }

// slowdowns are the clock events that slow a GPU down against its will:
// thermal, the power brake, and the hardware slowdown (temperature, power
// brake, a power draw too high), the most telling first. SW power cap is
// left out: it holds a GPU at its power limit, the normal state of a fully
// used GPU.
var slowdowns = []*metrics.Desc{metrics.GPUThrottleHWThermal, metrics.GPUThrottleSWThermal, metrics.GPUThrottleHWPowerBrake, metrics.GPUThrottleHWSlowdown}

// WindowOf reads the window's facts from set, the stats of the window's
// samples, which span span.
func WindowOf(set *stats.Set, span time.Duration) Window {
	w := Window{Span: span}
	type gpu struct {
		sm, util    float64
		hasSM, hasU bool
		slices      []float64 // MIG slices' SM activity
	}
	gpus := map[int]*gpu{}
	type slowdown struct {
		share       float64
		gpu, reason int
	}
	var slow []slowdown
	at := func(i int) *gpu {
		if gpus[i] == nil {
			gpus[i] = &gpu{}
		}
		return gpus[i]
	}
	type port struct{ rate, link float64 }
	ports := map[string]*port{}
	set.Each(func(_ string, d *metrics.Desc, st stats.Stat) {
		if d == nil || d.Of == nil || st.N == 0 {
			return
		}
		if !d.Of.PerGPU {
			if len(d.Labels) != 4 { // device, its name, port, its number
				return
			}
			key := d.Labels[1] + "/" + d.Labels[3]
			if ports[key] == nil {
				ports[key] = &port{}
			}
			switch d.Of {
			case metrics.InfinibandReceiveRate, metrics.InfinibandTransmitRate:
				_, mean, _ := st.Rate()
				ports[key].rate = max(ports[key].rate, mean)
			case metrics.InfinibandLinkRate:
				ports[key].link = st.Last
			}
			return
		}
		switch {
		case d.Of == metrics.GPUProfSMActive && d.MIG >= 0:
			g := at(d.GPU)
			g.slices = append(g.slices, st.Mean())
		case d.MIG >= 0:
		case d.Of == metrics.GPUProfSMActive:
			g := at(d.GPU)
			g.sm, g.hasSM = st.Mean(), true
		case d.Of == metrics.GPUUtilization:
			g := at(d.GPU)
			g.util, g.hasU = st.Mean()/100, true
		default:
			for i, s := range slowdowns {
				if d.Of == s {
					slow = append(slow, slowdown{share: st.Mean(), gpu: d.GPU, reason: i})
				}
			}
		}
	})
	// The slowdown of the largest share; of equal shares, the first GPU's,
	// and its first reason in slowdowns' order.
	if len(slow) > 0 {
		first := slices.MinFunc(slow, func(a, b slowdown) int {
			return cmp.Or(cmp.Compare(b.share, a.share), cmp.Compare(a.gpu, b.gpu), cmp.Compare(a.reason, b.reason))
		})
		w.Set(GPUSlowdown, first.share)
		w.Set(SlowdownGPU, float64(first.gpu))
		w.SlowdownReason = strings.TrimPrefix(slowdowns[first.reason].Name, "throttle_")
	}
	var busy float64
	n, sm := 0, 0
	for _, g := range gpus {
		switch {
		case g.hasSM:
			busy += g.sm
			sm++
		case len(g.slices) > 0:
			s := 0.0
			for _, v := range g.slices {
				s += v
			}
			busy += s / float64(len(g.slices))
			sm++
		case g.hasU:
			busy += g.util
		default:
			continue
		}
		n++
	}
	if n > 0 {
		w.Set(GPUs, float64(n))
		w.Set(GPUBusy, busy/float64(n))
		switch sm {
		case n:
			w.GPUBusyFrom = "SM activity"
		case 0:
			w.GPUBusyFrom = "utilization"
		default:
			w.GPUBusyFrom = "SM activity, else utilization"
		}
	}

	// The network: the port that carried the largest share of its link's
	// rate, either way.
	for _, key := range slices.Sorted(maps.Keys(ports)) {
		p := ports[key]
		if p.link > 0 && (!w.Has(LinkShare) || p.rate/p.link > w.Val(LinkShare)) {
			w.Set(LinkShare, p.rate/p.link)
			w.Link = "InfiniBand port " + key
		}
	}

	// The CPU: the container's where its cgroup is read, else the tree's.
	_, split := set.Get(metrics.ContainerCPUUsageLimitSplit)
	if lim, ok := set.Get(metrics.ContainerCPULimit); ok && lim.Last > 0 && !split {
		w.Set(CPULimit, lim.Last)
		w.CPULimitFrom = LimitContainer
	} else if cpus, ok := set.Get(metrics.NodeCPUCount); ok && cpus.Last > 0 {
		w.Set(CPULimit, cpus.Last)
		w.CPULimitFrom = LimitNode
	}
	if u, ok := set.Get(metrics.ContainerCPUUsage); ok {
		_, mean, _ := u.Rate()
		w.Set(CPUUsed, mean)
	}
	if th, ok := set.Get(metrics.ContainerCPUThrottledPeriods); ok {
		w.Set(Throttled, th.Mean()/100)
	}
	treeCPU, haveTree := 0.0, false
	for r, d := range metrics.ProcessRoles {
		c, ok := set.Get(d.CPU)
		if !ok {
			continue
		}
		_, mean, _ := c.Rate()
		treeCPU, haveTree = treeCPU+mean, true
		count := 0.0
		if n, ok := set.Get(d.Count); ok {
			count = n.Peak
		}
		switch metrics.Role(r) {
		case metrics.RoleTrainer:
			w.Set(Trainers, count)
			w.Set(TrainerCores, mean)
		case metrics.RoleDataLoader:
			w.Set(Loaders, count)
			w.Set(LoaderCores, mean)
		}
	}
	if haveTree && !w.Has(CPUUsed) {
		w.Set(CPUUsed, treeCPU)
	}

	// Memory: the cgroup's PSI (v2), else its limit hits (v1's failcnt).
	if some, ok := set.Get(metrics.ContainerPressureMemorySome); ok {
		w.Set(MemorySome, some.Mean()/100)
	}
	if hits, ok := set.Get(metrics.ContainerMemoryMaxEvents); ok && span > 0 {
		w.Set(MemoryLimitHits, max(hits.Last-hits.First, 0)/span.Seconds())
	}
	if ws, ok := set.Get(metrics.ContainerMemoryWorkingSetPercent); ok {
		w.Set(WorkingSetShare, ws.Peak/100)
	}
	if lim, ok := set.Get(metrics.ContainerMemoryLimit); ok {
		w.Set(MemoryLimit, lim.Last)
	}

	// Storage: the cgroup's PSI, else the node's; the tree's blocked
	// processes.
	if io, ok := set.Get(metrics.ContainerPressure[2].Some); ok {
		w.Set(IOSome, io.Mean()/100)
		w.IOFrom = "the container's"
	} else if io, ok := set.Get(metrics.NodePressure[2].Some); ok {
		w.Set(IOSome, io.Mean()/100)
		w.IOFrom = "the node's"
	}
	if b, ok := set.Get(metrics.ProcessBlocked); ok {
		w.Set(BlockedProcesses, b.Mean())
	}
	return w
}

// String lists the window's facts, for a failing test.
func (w Window) String() string {
	var b strings.Builder
	for f := range numFacts {
		if w.ok[f] {
			b.WriteString(strconv.Itoa(int(f)) + "=" + strconv.FormatFloat(w.v[f], 'g', 4, 64) + " ")
		}
	}
	return strings.TrimSpace(b.String())
}
