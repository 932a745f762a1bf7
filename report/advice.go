package report

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/bridge-dev/bridge/advice"
	"github.com/bridge-dev/bridge/metrics"
)

// costDesc is the range a node's cost tag is read within: a sum of money,
// not negative, finite.
var costDesc = &metrics.Desc{Name: "cost", Unit: metrics.UnitCount, Help: "A node's cost at the user's prices."}

// advise gives row the advice its bridge recorded (rec), else, for a node
// that recorded none (still running, or an older bridge), what
// advice.Suggest makes of its figures: its peak working set (OOM-bumped
// when it was OOM-killed) and the 90th percentile of its CPU.
func advise(row *Node, rec record) {
	if rec.unused != "" {
		row.Unused = strings.Split(rec.unused, "; ")
	}
	row.CostBasis = rec.costBasis
	if row.SuggestedMemoryLimitMB != nil || row.SuggestedCPUCores != nil {
		return
	}
	u := advice.Use{OOMKilled: oomKilled(rec.reason)}
	if v := row.PeakWorkingSetMB; v != nil {
		u.PeakWorkingSetMB, u.PeakKnown = v.Float64(), true
	}
	if v := row.MemoryLimitMB; v != nil {
		u.MemoryLimitMB = v.Float64()
	}
	if v := row.CPUPercentileCores; v != nil {
		u.CPUPercentileCores, u.CPUKnown = v.Float64(), true
		if p := row.CPUPeakCores; p != nil {
			u.CPUPeakCores = p.Float64()
		}
	}
	if v := row.CPULimitCores; v != nil {
		u.CPULimitCores = v.Float64()
	}
	a := advice.Suggest(u)
	if a.MemoryKnown {
		row.SuggestedMemoryLimitMB = num(a.MemoryLimitMB)
	}
	if a.CPUKnown {
		row.SuggestedCPUCores = num(a.CPUCores)
	}
	if row.Unused == nil {
		row.Unused = a.Unused
	}
}

// jobFigures sets the job's energy (every node's GPUs and CPU packages),
// the energy per step where the run's own series reached a step, and the
// job's cost, from the rows.
func (r *Report) jobFigures(run Run) {
	var energy, cost float64
	var haveEnergy, haveCost bool
	for _, n := range r.Nodes {
		for _, v := range []*metrics.Float{n.GPUEnergyJoules, n.NodeCPUEnergyJoules} {
			if v != nil {
				energy, haveEnergy = energy+v.Float64(), true
			}
		}
		if n.Cost != nil {
			cost, haveCost = cost+n.Cost.Float64(), true
		}
	}
	if haveEnergy {
		r.EnergyJoules = num(energy)
	}
	if haveCost {
		r.Cost = num(cost)
	}
	if run.Step > 0 {
		r.Steps = run.Step
		if haveEnergy {
			r.EnergyPerStepJoules = num(energy / float64(run.Step))
		}
	}
}

// suggested is the node's "next run asks for" cell.
func suggested(n *Node) string {
	var parts []string
	if v := n.SuggestedMemoryLimitMB; v != nil {
		parts = append(parts, fmt.Sprintf("memory %.0f MB", v.Float64()))
	}
	if v := n.SuggestedCPUCores; v != nil {
		parts = append(parts, fmt.Sprintf("CPU %s cores", strconv.FormatFloat(v.Float64(), 'f', -1, 64)))
	}
	return strings.Join(parts, ", ")
}

// JobLine is the job's energy, its energy per step and its cost in one
// line, "" when none is known: "energy 12.3 kJ over 100 steps, 123 J a
// step (GPUs and CPU packages); cost 13.50".
func (r *Report) JobLine() string {
	var parts []string
	if r.EnergyJoules != nil {
		s := "energy " + joules(r.EnergyJoules.Float64())
		if r.EnergyPerStepJoules != nil {
			s += fmt.Sprintf(" over %d steps, %s a step", r.Steps, perStep(r.EnergyPerStepJoules.Float64()))
		}
		if len(r.Nodes) > 1 {
			s += " (GPUs and CPU packages of every node)"
		} else {
			s += " (GPUs and CPU packages)"
		}
		parts = append(parts, s)
	}
	if r.Cost != nil {
		parts = append(parts, fmt.Sprintf("cost %.2f", r.Cost.Float64()))
	}
	return strings.Join(parts, "; ")
}

// perStep is an energy per step with the digits a small one needs.
func perStep(j float64) string {
	if j >= 1000 {
		return joules(j)
	}
	return strconv.FormatFloat(j, 'g', 4, 64) + " J"
}
