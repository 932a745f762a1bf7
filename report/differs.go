package report

import (
	"fmt"
	"math"
	"sort"

	"github.com/bridge-dev/bridge/metrics"
)

// DiffersRule is the rule of the "differs from the job" column, as the
// report states it.
const DiffersRule = "more than 20% from the job's median (of 3 or more nodes) on GPU activity, network or InfiniBand throughput; CPU throttled in more than 5% of periods; Xid or uncorrected ECC errors"

// Thresholds of the rule.
const (
	differsShare     = 0.20
	differsMinNodes  = 3
	throttledPercent = 5.0
)

// A median below these is idle, where 20% is noise: not compared.
const (
	minGPUUtilPercent = 5.0
	minSMActiveRatio  = 0.05
	minMBps           = 1.0
)

// differs fills each row's Differs.
func differs(rows []Node) {
	// GPU activity: SM active where every GPU node has it (NVML GPM,
	// dcgm-exporter), else utilization (a kernel ran at all).
	activity := func(n *Node) *metrics.Float { return n.GPUSMActiveRatio }
	activityName, floor, asPercent := "GPU SM active", minSMActiveRatio, 100.0
	for i := range rows {
		if rows[i].GPUUtilizationPercent != nil && rows[i].GPUSMActiveRatio == nil {
			activity = func(n *Node) *metrics.Float { return n.GPUUtilizationPercent }
			activityName, floor, asPercent = "GPU utilization", minGPUUtilPercent, 1
			break
		}
	}
	compare(rows, activity, activityName, floor, func(v float64) string { return fmt.Sprintf("%.0f%%", v*asPercent) })
	mbps := func(v float64) string { return fmt.Sprintf("%.1f MB/s", v) }
	compare(rows, func(n *Node) *metrics.Float { return n.NetworkMBps }, "network", minMBps, mbps)
	compare(rows, func(n *Node) *metrics.Float { return n.InfinibandMBps }, "InfiniBand", minMBps, mbps)
	for i := range rows {
		n := &rows[i]
		if v := n.ThrottledSharePercent; v != nil && v.Float64() > throttledPercent {
			n.Differs = append(n.Differs, fmt.Sprintf("CPU throttled in %.0f%% of periods", v.Float64()))
		}
		if v := n.GPUXidErrors; v != nil && v.Float64() > 0 {
			n.Differs = append(n.Differs, fmt.Sprintf("%.0f GPU Xid errors", v.Float64()))
		}
		if v := n.GPUECCUncorrected; v != nil && v.Float64() > 0 {
			n.Differs = append(n.Differs, fmt.Sprintf("%.0f uncorrected GPU ECC errors", v.Float64()))
		}
	}
}

// compare flags the rows whose figure is more than differsShare from the
// median of the rows that have it.
func compare(rows []Node, fig func(*Node) *metrics.Float, name string, floor float64, show func(float64) string) {
	var vs []float64
	for i := range rows {
		if v := fig(&rows[i]); v != nil {
			vs = append(vs, v.Float64())
		}
	}
	if len(vs) < differsMinNodes {
		return
	}
	m := median(vs)
	if m < floor {
		return
	}
	for i := range rows {
		f := fig(&rows[i])
		if f == nil {
			continue
		}
		v := f.Float64()
		if math.Abs(v-m) <= differsShare*m {
			continue
		}
		rows[i].Differs = append(rows[i].Differs, fmt.Sprintf("%s %s against the job's median %s (%+.0f%%)",
			name, show(v), show(m), 100*(v-m)/m))
	}
}

func median(vs []float64) float64 {
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
