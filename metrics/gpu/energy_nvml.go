//go:build linux && cgo

package gpu

import (
	"context"
	"fmt"

	"github.com/bridge-dev/bridge/metrics"
)

const energyCall = "nvmlDeviceGetTotalEnergyConsumption"

// setupEnergy takes each device's baseline reading of its energy counter, at
// start: gpu_N_energy_joules is the energy used since. A device without the
// counter (before Volta) is noted and not asked again; a failed baseline
// is taken again by the first Collect.
func (c *Collector) setupEnergy(ctx context.Context) {
	if !c.hasSymbol(ctx, energyCall) {
		for _, d := range c.devices {
			d.energyWhy = "not available: the driver has no " + energyCall
		}
		return
	}
	for _, d := range c.devices {
		v, err := get(ctx, c.g, energyCall, d.h.GetTotalEnergyConsumption)
		switch {
		case err == nil:
			d.energy.add(v, c.now())
		case unsupported(err):
			d.energyWhy = fmt.Sprintf("not supported: %v (the energy counter needs Volta or later)", err)
			c.log.Debug("GPU energy counter not supported", "gpu", d.index, "err", err)
		default:
			c.log.Debug("GPU energy counter: no baseline at start", "gpu", d.index, "err", err)
		}
	}
}

func (c *Collector) readEnergy(r *reading, d *device) {
	if d.energyWhy != "" {
		return
	}
	t := &d.target
	v, ok := take(r, t, energyCall, t.h.GetTotalEnergyConsumption)
	if !ok {
		return
	}
	j, st, ok := d.energy.add(v, c.now())
	if why := st.Why(v, &d.energy.c); why != "" && !d.energyNoted {
		d.energyNoted = true
		c.log.Info("GPU energy counter: an interval not counted (driver reloaded or GPU reset?); counting on from its new value (said once a GPU)",
			"gpu", d.index, "why", why)
	}
	if ok {
		r.add(t, metrics.GPUEnergy, j, energyCall)
	}
}
