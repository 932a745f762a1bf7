package advice

import (
	"fmt"
	"strconv"
	"time"
)

// Prices are what the user pays for a GPU and for a node, by the hour
// (--price-per-gpu-hour, --price-per-node-hour), in their own currency; 0
// is no price.
type Prices struct {
	PerGPUHour, PerNodeHour float64
}

// Set reports whether a price is given: without one there is no cost.
func (p Prices) Set() bool { return p.PerGPUHour > 0 || p.PerNodeHour > 0 }

// Cost is what a node's run cost at the prices: GPUs × hours × the GPU
// price, plus hours × the node price.
type Cost struct {
	Total float64
	// Basis says how: "2 GPUs × 1.50 h at 2.5 a GPU-hour + 1.50 h at 4 a
	// node-hour".
	Basis string
}

// CostOf is the cost of a run of d on a node with gpus GPUs at p; ok is
// false when no price is set.
func CostOf(p Prices, gpus int, d time.Duration) (c Cost, ok bool) {
	if !p.Set() {
		return Cost{}, false
	}
	h := max(d.Hours(), 0)
	var parts []string
	if p.PerGPUHour > 0 {
		c.Total += float64(gpus) * h * p.PerGPUHour
		parts = append(parts, fmt.Sprintf("%d GPUs × %s at %s a GPU-hour", gpus, hours(d), price(p.PerGPUHour)))
	}
	if p.PerNodeHour > 0 {
		c.Total += h * p.PerNodeHour
		parts = append(parts, fmt.Sprintf("%s at %s a node-hour", hours(d), price(p.PerNodeHour)))
	}
	c.Basis = parts[0]
	if len(parts) > 1 {
		c.Basis += " + " + parts[1]
	}
	return c, true
}

// hours is d as the basis says it: hours to the hundredth, a run shorter
// than that to the millisecond.
func hours(d time.Duration) string {
	if d >= 36*time.Second {
		return fmt.Sprintf("%.2f h", d.Hours())
	}
	return max(d, 0).Round(time.Millisecond).String()
}

func price(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// Tags are the run tags of c: its total to the cent, and its basis.
func (c Cost) Tags() map[string]string {
	return map[string]string{TagCost: strconv.FormatFloat(c.Total, 'f', 2, 64), TagCostBasis: c.Basis}
}
