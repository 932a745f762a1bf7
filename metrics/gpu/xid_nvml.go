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

// xidWait is how long one nvmlEventSetWait blocks; it bounds how long Close
// waits for the watcher.
const xidWait = 500 * time.Millisecond

// noInstance is the GPU/compute instance ID NVML gives for a non-MIG event.
const noInstance = 0xFFFFFFFF

// xidWatch is the goroutine that waits for Xid critical errors. Its Wait
// calls bypass the guard on purpose: they block for xidWait by design, and
// would otherwise hold the one slot sampling needs.
type xidWatch struct {
	set  nvml.EventSet
	quit chan struct{}
	done chan struct{}
}

// stop asks the watcher to end and waits for it at most one wait plus grace.
func (w *xidWatch) stop(grace time.Duration) bool {
	close(w.quit)
	select {
	case <-w.done:
		return true
	case <-time.After(xidWait + grace):
		return false
	}
}

// startXidWatch registers Xid critical errors on every device that supports
// them (nvmlDeviceGetSupportedEventTypes first: registering an unsupported
// type fails on some boards) and starts the watcher.
func (c *Collector) startXidWatch(ctx context.Context) {
	var want []*device
	for _, d := range c.devices {
		types, err := get(ctx, c.g, "nvmlDeviceGetSupportedEventTypes", d.h.GetSupportedEventTypes)
		if err != nil {
			c.log.Debug("GPU events not supported", "gpu", d.index, "err", err)
			continue
		}
		if types&nvml.EventTypeXidCriticalError != 0 {
			want = append(want, d)
		}
	}
	if len(want) == 0 {
		return
	}
	set, err := get(ctx, c.g, "nvmlEventSetCreate", c.lib.EventSetCreate)
	if err != nil {
		c.log.Info("GPU Xid events not watched", "err", err)
		return
	}
	n := 0
	for _, d := range want {
		_, err := get(ctx, c.g, "nvmlDeviceRegisterEvents", func() (struct{}, nvml.Return) {
			return struct{}{}, d.h.RegisterEvents(nvml.EventTypeXidCriticalError, set)
		})
		if err != nil {
			c.log.Info("GPU Xid events not watched", "gpu", d.index, "err", err)
			continue
		}
		d.xid = true
		n++
	}
	if n == 0 {
		_, _ = get(ctx, c.g, "nvmlEventSetFree", func() (struct{}, nvml.Return) { return struct{}{}, set.Free() })
		return
	}
	c.watch = &xidWatch{set: set, quit: make(chan struct{}), done: make(chan struct{})}
	go c.watchXid(c.watch)
}

func (c *Collector) watchXid(w *xidWatch) {
	defer close(w.done)
	defer func() {
		if p := recover(); p != nil {
			c.log.Warn("GPU Xid watcher stopped", "panic", p)
		}
	}()
	for {
		select {
		case <-w.quit:
			return
		default:
		}
		if c.g.isStuck() {
			// The driver is hung; a Wait would most likely hang too.
			select {
			case <-w.quit:
				return
			case <-time.After(xidWait):
				continue
			}
		}
		ev, r := w.set.Wait(uint32(xidWait / time.Millisecond))
		switch r {
		case nvml.SUCCESS:
			c.recordXid(ev)
		case nvml.ERROR_TIMEOUT:
		default:
			c.log.Warn("GPU Xid watcher stopped", "err", fmt.Errorf("nvmlEventSetWait: %w", rerr(r)))
			return
		}
	}
}

func (c *Collector) recordXid(ev nvml.EventData) {
	if ev.EventType&nvml.EventTypeXidCriticalError == 0 {
		return
	}
	e := metrics.XidEvent{Time: time.Now(), GPU: -1, Xid: ev.EventData}
	d := c.deviceOf(ev.Device)
	if d != nil {
		e.GPU, e.UUID = d.index, d.uuid
		if d.mig && ev.GpuInstanceId != noInstance {
			e.Slice = &metrics.MIGSlice{GPUInstance: ev.GpuInstanceId, ComputeInstance: ev.ComputeInstanceId}
		}
	}
	c.mu.Lock()
	if len(c.xids) < maxXidEvents {
		c.xids = append(c.xids, e)
	}
	c.xidCount[e.GPU]++
	c.mu.Unlock()
	c.log.Warn("GPU Xid critical error", "xid", e.Xid, "gpu", e.GPU, "uuid", e.UUID)
}

// deviceOf finds the collected device an event names: by handle, or by UUID
// when the driver hands back a handle of its own.
func (c *Collector) deviceOf(h nvml.Device) *device {
	if h == nil {
		return nil
	}
	if d := c.deviceWhere(func(t *target) bool { return t.h == h }); d != nil {
		return d
	}
	uuid, err := get(context.Background(), c.g, "nvmlDeviceGetUUID", h.GetUUID)
	if err != nil {
		if !errors.Is(err, ErrClosed) {
			c.log.Debug("GPU of an Xid event unknown", "err", err)
		}
		return nil
	}
	return c.deviceWhere(func(t *target) bool { return t.uuid == uuid })
}

// deviceWhere is the collected device that, or one of whose MIG slices,
// matches.
func (c *Collector) deviceWhere(match func(*target) bool) *device {
	for _, d := range c.devices {
		if match(&d.target) {
			return d
		}
		for _, s := range d.slices {
			if match(&s.target) {
				return d
			}
		}
	}
	return nil
}

// XidEvents returns the Xid critical errors seen since New, oldest first (at
// most the first 256; the gpu_N_xid_errors_count series keep counting). The
// slice is the caller's.
func (c *Collector) XidEvents() []metrics.XidEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]metrics.XidEvent(nil), c.xids...)
}
