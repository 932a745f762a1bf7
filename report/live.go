package report

import (
	"math"
	"strconv"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

// A running node's state line carries, besides its figures so far, its
// latest value of each signal the job's live evaluation compares across
// nodes (package jobrun: the job's min, median and max of each, a point a
// tick). A field is written only where the node has the signal's series.

// LiveSignal is one signal the live evaluation compares across a job's
// nodes.
type LiveSignal struct {
	// Field is its name in a state line, short: a line a node, 1,024 nodes
	// in one read of the job's run.
	Field string
	// Name is the signal's in the job's series (system/job_<Name>_min).
	Name string
	// of are the series it is made of (templates): the first one the
	// sample has (a GPU's SM active, else its utilization, are two signals).
	of []*metrics.Desc
	// sum: the node's value is the sum of its series' (its InfiniBand
	// ports), else their mean (its GPUs).
	sum bool
	// digits after the point it is written with.
	digits int
}

// LiveSignals are the signals of the live evaluation, in the line's order.
var LiveSignals = []LiveSignal{
	{Field: "l_sm", Name: "gpu_sm_active_ratio", of: []*metrics.Desc{metrics.GPUProfSMActive}, digits: 3},
	{Field: "l_gu", Name: "gpu_utilization_percentage", of: []*metrics.Desc{metrics.GPUUtilization}, digits: 1},
	{Field: "l_gw", Name: "gpu_power_usage_watts", of: []*metrics.Desc{metrics.GPUPowerUsage}},
	{Field: "l_mhz", Name: "gpu_sm_clock_mhz", of: []*metrics.Desc{metrics.GPUSMClock}},
	{Field: "l_gm", Name: "gpu_memory_usage_percentage", of: []*metrics.Desc{metrics.GPUMemoryUsagePercent}, digits: 1},
	{Field: "l_cpu", Name: "cpu_utilization_percentage", of: []*metrics.Desc{metrics.ContainerCPUUtilization}, digits: 1},
	{Field: "l_thr", Name: "cpu_throttled_periods_percentage", of: []*metrics.Desc{metrics.ContainerCPUThrottledPeriods}, digits: 1},
	{Field: "l_ws", Name: "memory_working_set_percentage", of: []*metrics.Desc{metrics.ContainerMemoryWorkingSetPercent}, digits: 1},
	{Field: "l_nrx", Name: "network_receive_megabytes_per_second", of: []*metrics.Desc{metrics.NetnsReceiveRate}, sum: true, digits: 1},
	{Field: "l_ntx", Name: "network_transmit_megabytes_per_second", of: []*metrics.Desc{metrics.NetnsTransmitRate}, sum: true, digits: 1},
	{Field: "l_irx", Name: "infiniband_receive_megabytes_per_second", of: []*metrics.Desc{metrics.InfinibandReceiveRate}, sum: true, digits: 1},
	{Field: "l_itx", Name: "infiniband_transmit_megabytes_per_second", of: []*metrics.Desc{metrics.InfinibandTransmitRate}, sum: true, digits: 1},
}

// Latest is a node's latest value of each live signal it has, by the
// signal's Field.
type Latest map[string]metrics.Float

// LatestOf is a node's latest values from its latest sample: each
// signal's series' values within their descriptor's range (a MIG slice's
// left out: its GPU's counts), their mean (GPUs) or sum (ports), rounded
// as the line writes them.
func LatestOf(smp metrics.Sample) Latest {
	type acc struct {
		sum float64
		n   int
	}
	by := map[*metrics.Desc]*acc{}
	for _, p := range smp.Points {
		d := p.Desc
		if d == nil || !d.Range().Holds(p.Value) {
			continue
		}
		if d.Of != nil && d.Of.PerGPU && d.MIG >= 0 {
			continue
		}
		t := template(d)
		a := by[t]
		if a == nil {
			a = &acc{}
			by[t] = a
		}
		a.sum += p.Value
		a.n++
	}
	out := Latest{}
	for _, sig := range LiveSignals {
		for _, d := range sig.of {
			a := by[d]
			if a == nil || a.n == 0 {
				continue
			}
			v := a.sum
			if !sig.sum {
				v /= float64(a.n)
			}
			scale := math.Pow10(sig.digits)
			if f, ok := metrics.Finite(math.Round(v*scale) / scale); ok {
				out[sig.Field] = f
			}
			break
		}
	}
	return out
}

// fields are l's fields of a line, in LiveSignals' order.
func (l Latest) fields() []tracker.Field {
	var fs []tracker.Field
	for _, sig := range LiveSignals {
		if v, ok := l[sig.Field]; ok {
			fs = append(fs, tracker.Field{Name: sig.Field, Value: strconv.FormatFloat(v.Float64(), 'f', -1, 64)})
		}
	}
	return fs
}

// LiveValues are a state line's latest values (its fields, ParseLine), by
// the signal's Name: each a number within the range of the series it is
// made of; a line without them (a node that ended, an older bridge's
// line) has none.
func LiveValues(fields map[string]string) map[string]float64 {
	out := map[string]float64{}
	for _, sig := range LiveSignals {
		s, ok := fields[sig.Field]
		if !ok {
			continue
		}
		v, isNum := number(s)
		if !isNum {
			continue
		}
		f, ok := metrics.Finite(v)
		if !ok || !liveRange(sig).Holds(f.Float64()) {
			continue
		}
		out[sig.Name] = f.Float64()
	}
	return out
}

// liveRange is the values a signal's line field may hold: its series'
// range, times the ports or GPUs a node may have where it sums them.
func liveRange(sig LiveSignal) metrics.Range {
	r := sig.of[0].Range()
	if sig.sum {
		r.Max *= maxInstances
	}
	return r
}

// maxInstances bounds the ports (or interfaces) a node's sum is over.
const maxInstances = 1024
