//go:build linux && cgo

package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/bridge-dev/bridge/metrics"
)

// gpmMetric is one GPM metric and the series it fills.
type gpmMetric struct {
	id     nvml.GpmMetricId
	desc   *metrics.Desc
	mib    bool   // MiB/s, to megabytes per second; else a percentage, to a ratio
	source string // for `bridge sample`
}

func gm(id nvml.GpmMetricId, d *metrics.Desc, mib bool, name string) gpmMetric {
	return gpmMetric{id: id, desc: d, mib: mib, source: "nvmlGpmMetricsGet(NVML_GPM_METRIC_" + name + ")"}
}

// gpmMetrics are the metrics asked of every GPM target: DCGM reads the same
// IDs for its DCGM_FI_PROF_ fields on Hopper and later.
var gpmMetrics = []gpmMetric{
	gm(nvml.GPM_METRIC_GRAPHICS_UTIL, metrics.GPUProfGREngineActive, false, "GRAPHICS_UTIL"),
	gm(nvml.GPM_METRIC_SM_UTIL, metrics.GPUProfSMActive, false, "SM_UTIL"),
	gm(nvml.GPM_METRIC_SM_OCCUPANCY, metrics.GPUProfSMOccupancy, false, "SM_OCCUPANCY"),
	gm(nvml.GPM_METRIC_ANY_TENSOR_UTIL, metrics.GPUProfTensorActive, false, "ANY_TENSOR_UTIL"),
	gm(nvml.GPM_METRIC_DFMA_TENSOR_UTIL, metrics.GPUProfTensorDFMA, false, "DFMA_TENSOR_UTIL"),
	gm(nvml.GPM_METRIC_HMMA_TENSOR_UTIL, metrics.GPUProfTensorHMMA, false, "HMMA_TENSOR_UTIL"),
	gm(nvml.GPM_METRIC_DMMA_TENSOR_UTIL, metrics.GPUProfTensorDMMA, false, "DMMA_TENSOR_UTIL"),
	gm(nvml.GPM_METRIC_IMMA_TENSOR_UTIL, metrics.GPUProfTensorIMMA, false, "IMMA_TENSOR_UTIL"),
	gm(nvml.GPM_METRIC_DRAM_BW_UTIL, metrics.GPUProfDRAMActive, false, "DRAM_BW_UTIL"),
	gm(nvml.GPM_METRIC_FP64_UTIL, metrics.GPUProfFP64Active, false, "FP64_UTIL"),
	gm(nvml.GPM_METRIC_FP32_UTIL, metrics.GPUProfFP32Active, false, "FP32_UTIL"),
	gm(nvml.GPM_METRIC_FP16_UTIL, metrics.GPUProfFP16Active, false, "FP16_UTIL"),
	gm(nvml.GPM_METRIC_INTEGER_UTIL, metrics.GPUProfIntActive, false, "INTEGER_UTIL"),
	gm(nvml.GPM_METRIC_PCIE_TX_PER_SEC, metrics.GPUProfPCIeTx, true, "PCIE_TX_PER_SEC"),
	gm(nvml.GPM_METRIC_PCIE_RX_PER_SEC, metrics.GPUProfPCIeRx, true, "PCIE_RX_PER_SEC"),
	gm(nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, metrics.GPUProfNVLinkTx, true, "NVLINK_TOTAL_TX_PER_SEC"),
	gm(nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, metrics.GPUProfNVLinkRx, true, "NVLINK_TOTAL_RX_PER_SEC"),
}

// gpmSymbols are the NVML functions GPM uses. A driver without one of them
// would kill the process on the call, so each is looked up first.
var gpmSymbols = []string{
	"nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree",
	"nvmlGpmSampleGet", "nvmlGpmMigSampleGet", "nvmlGpmMetricsGet",
}

// gpmMinGap: NVML refreshes the GPM counters every 100 ms and documents that
// two samples must be further apart. A Collect sooner than that after the
// previous sample takes none; the next one covers both intervals.
const gpmMinGap = 100 * time.Millisecond

// gpmState is the GPM sampling of one target: a whole GPU, or a MIG GPU
// instance. It owns two samples, allocated at start and filled in turn, so
// that each Collect computes the metrics over the time since the previous
// Collect's sample: no second sample is taken for it.
//
// Its fields are guarded by Collector.gpmMu, which is never held across an
// NVML call: Close frees the samples while a Collect may be in flight. GPM is
// on for the target while it holds its samples.
type gpmState struct {
	note    string            // what `bridge sample` says of it
	samples [2]nvml.GpmSample // nil once freed, or never allocated
	last    int               // the sample the previous Collect filled
	have    bool              // samples[last] holds a reading
	at      time.Time         // when it was taken
	// gi >= 0: a MIG GPU instance, sampled with nvmlGpmMigSampleGet on
	// its parent GPU; -1: the target's own handle, with nvmlGpmSampleGet.
	gi     int
	parent nvml.Device
	// req is the nvmlGpmMetricsGet request, its metric IDs filled once:
	// ~19 KB, so not allocated per Collect. Only Collect's goroutine uses
	// it, outside gpmMu (one Collect at a time).
	req *nvml.GpmMetricsGetType
}

// gpmNote is what Detect shows of a target's GPM.
func (c *Collector) gpmNote(g *gpmState) string {
	c.gpmMu.Lock()
	defer c.gpmMu.Unlock()
	return g.note
}

// setupGPM finds out which devices support GPM and allocates the samples of
// each target: every selected GPU, or on a GPU in MIG mode every selected
// GPU instance (the parent's own figure would mix other jobs' instances
// in). Where GPM cannot run, the target keeps a note saying why, logged
// once at info.
func (c *Collector) setupGPM(ctx context.Context) {
	missing := ""
	for _, s := range gpmSymbols {
		if !c.hasSymbol(ctx, s) && missing == "" {
			missing = s
		}
	}
	logged := map[string]bool{}
	off := func(d *device, why string) {
		d.gpmWhy = why
		if !logged[why] {
			logged[why] = true
			c.log.Info("GPU activity (GPM) not available", "gpu", d.index, "reason", why)
		}
	}
	for _, d := range c.devices {
		if missing != "" {
			off(d, "not available: the driver has no "+missing+" (GPM needs a newer driver)")
			continue
		}
		sup, err := get(ctx, c.g, "nvmlGpmQueryDeviceSupport", d.h.GpmQueryDeviceSupport)
		switch {
		case err != nil:
			// go-nvml before v0.13.1 made every driver answer
			// ERROR_ARGUMENT_VERSION_MISMATCH here; any error means no GPM.
			off(d, fmt.Sprintf("not supported: %v (GPM needs Hopper or later)", err))
			continue
		case sup.IsSupportedDevice == 0:
			off(d, "not supported on this GPU (GPM needs Hopper or later)")
			continue
		}
		if !d.mig {
			d.gpm = c.newGPM(ctx, &d.target, -1, nil)
			continue
		}
		d.gpmWhy = "per MIG instance (gpu_N_mig_M_prof_…)"
		for _, s := range d.slices {
			if s.reads {
				s.gpm = c.newGPM(ctx, &s.target, s.gi, d.h)
			}
		}
	}
}

// newGPM allocates t's two samples. A failure leaves GPM off for t, and
// frees the sample already allocated.
func (c *Collector) newGPM(ctx context.Context, t *target, gi int, parent nvml.Device) *gpmState {
	g := &gpmState{gi: gi, parent: parent}
	for i := range g.samples {
		s, err := get(ctx, c.g, "nvmlGpmSampleAlloc", c.lib.GpmSampleAlloc)
		if err != nil {
			c.freeGPMSamples(ctx, t, g.samples[:i])
			g.samples = [2]nvml.GpmSample{}
			g.note = fmt.Sprintf("off: allocating samples: %v", err)
			c.log.Info("GPU activity (GPM) off", "target", t.label, "err", err)
			return g
		}
		g.samples[i] = s
	}
	g.req = &nvml.GpmMetricsGetType{Version: nvml.GPM_METRICS_GET_VERSION, NumMetrics: uint32(len(gpmMetrics))}
	for i, gm := range gpmMetrics {
		g.req.Metrics[i].MetricId = uint32(gm.id)
	}
	g.note = "on"
	return g
}

// freeGPMSamples frees samples through the guard.
func (c *Collector) freeGPMSamples(ctx context.Context, t *target, samples []nvml.GpmSample) {
	for _, s := range samples {
		if s == nil {
			continue
		}
		if _, err := get(ctx, c.g, "nvmlGpmSampleFree", func() (struct{}, nvml.Return) {
			return struct{}{}, c.lib.GpmSampleFree(s)
		}); err != nil {
			c.log.Debug("GPM sample not freed", "target", t.label, "err", err)
		}
	}
}

// readGPM takes t's sample for this Collect and, when the previous Collect
// left one, adds the metrics of the interval between the two.
func (c *Collector) readGPM(r *reading, t *target, g *gpmState) {
	if g == nil {
		return
	}
	now := c.now()
	c.gpmMu.Lock()
	if g.samples[0] == nil || (g.have && now.Sub(g.at) < gpmMinGap) {
		c.gpmMu.Unlock()
		return
	}
	prevIdx, nextIdx := g.last, 1-g.last
	prev, next, had := g.samples[prevIdx], g.samples[nextIdx], g.have
	c.gpmMu.Unlock()

	what := "nvmlGpmSampleGet"
	sample := func() nvml.Return { return t.h.GpmSampleGet(next) }
	if g.gi >= 0 {
		what = "nvmlGpmMigSampleGet"
		sample = func() nvml.Return { return g.parent.GpmMigSampleGet(g.gi, next) }
	}
	_, err := get(r.ctx, c.g, what, func() (struct{}, nvml.Return) { return struct{}{}, sample() })
	c.gpmMu.Lock()
	if err != nil {
		g.have = false // what the buffers hold is no longer one interval
	} else {
		g.last, g.have, g.at = nextIdx, true, now
	}
	c.gpmMu.Unlock()
	if err != nil {
		c.gpmFailed(r, t, g, err)
		return
	}
	if !had {
		return // the first sample: the next Collect has the interval
	}
	m := g.req
	m.Sample1, m.Sample2 = prev, next
	for i := range gpmMetrics {
		// No result of the previous Collect may pass for one of this.
		m.Metrics[i].NvmlReturn, m.Metrics[i].Value = uint32(nvml.ERROR_UNKNOWN), 0
	}
	if _, err := get(r.ctx, c.g, "nvmlGpmMetricsGet", func() (struct{}, nvml.Return) {
		return struct{}{}, c.lib.GpmMetricsGet(m)
	}); err != nil {
		c.gpmFailed(r, t, g, err)
		return
	}
	for i, gm := range gpmMetrics {
		v, ret := m.Metrics[i].Value, nvml.Return(m.Metrics[i].NvmlReturn)
		// A metric this GPU does not count comes back with its own error;
		// a value out of range is the Sampler's to leave out.
		if ret != nvml.SUCCESS {
			continue
		}
		if gm.mib {
			v = metrics.MB(v * (1 << 20))
		} else {
			v /= 100
		}
		r.add(t, gm.desc, v, gm.source)
	}
}

// gpmFailed handles a failed GPM call: one that says GPM cannot work here
// turns it off for the target (its samples freed, Detect saying why);
// another is this Collect's error, and the next Collect tries again.
func (c *Collector) gpmFailed(r *reading, t *target, g *gpmState, err error) {
	if !unsupported(err) && !errors.Is(err, nvml.ERROR_ARGUMENT_VERSION_MISMATCH) {
		r.errs = append(r.errs, fmt.Errorf("%s: %w", t.label, err))
		return
	}
	c.gpmMu.Lock()
	samples := g.samples
	g.samples, g.note = [2]nvml.GpmSample{}, fmt.Sprintf("off: %v", err)
	c.gpmMu.Unlock()
	c.log.Info("GPU activity (GPM) off", "target", t.label, "err", err)
	c.freeGPMSamples(r.ctx, t, samples[:])
}

// gpmStates lists every target's GPM state.
func (c *Collector) gpmStates() []*gpmState {
	var out []*gpmState
	for _, d := range c.devices {
		if d.gpm != nil {
			out = append(out, d.gpm)
		}
		for _, s := range d.slices {
			if s.gpm != nil {
				out = append(out, s.gpm)
			}
		}
	}
	return out
}

// releaseGPM frees every sample still held. It runs as part of the final
// NVML call (Close), holding the guard's slot: no other call is in flight,
// and none starts after it, so no Collect can use a sample freed here.
func (c *Collector) releaseGPM() {
	var samples []nvml.GpmSample
	c.gpmMu.Lock()
	for _, g := range c.gpmStates() {
		for _, s := range g.samples {
			if s != nil {
				samples = append(samples, s)
			}
		}
		g.samples, g.note = [2]nvml.GpmSample{}, "off: closed"
	}
	c.gpmMu.Unlock()
	for _, s := range samples {
		if r := c.lib.GpmSampleFree(s); r != nvml.SUCCESS {
			c.log.Debug("GPM sample not freed", "err", r)
		}
	}
}
