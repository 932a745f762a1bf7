//go:build linux && cgo

package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/bridge-dev/bridge/metrics"
)

// Library is the NVML API the collector calls (go-nvml's nvml.Interface, which
// its mock package implements).
type Library = nvml.Interface

// target is one device or MIG slice readings are taken from.
type target struct {
	label string // "GPU 0", "GPU 0 MIG 1": for errors and logs
	// gpu and mig are its index and MIG GPU instance ID (-1: the whole
	// GPU), which the series it is read for are bound to (series).
	gpu, mig int
	bound    map[*metrics.Desc]*metrics.Desc // per-GPU template -> its series here
	uuid     string
	name     string
	h        nvml.Device
	skip     map[string]bool // readings it does not support: not asked again
}

type device struct {
	target
	index  int
	mig    bool // MIG mode on: memory, activity and processes per slice
	slices []*slice
	xid    bool // Xid events are watched

	gpm    *gpmState // nil: no GPM on the whole GPU (gpmWhy says why)
	gpmWhy string    // set by New, read-only after
	energy energy
	// energyNoted: an interval of the energy counter not counted was
	// logged (once a GPU).
	energyNoted bool
	// energyWhy says why the energy counter is not read ("" when it is);
	// set by New, read-only after.
	energyWhy string
}

// slice is one MIG device: a compute instance of a GPU instance. Its series
// are named by the GPU instance ID (gpu_N_mig_<gi>_), as nvidia-smi and
// dcgm-exporter (GPU_I_ID) number instances.
type slice struct {
	target
	index  int // MIG device index on the parent
	gi, ci int // GPU and compute instance IDs
	// reads is set on one slice per GPU instance: memory and activity are
	// the GPU instance's, shared by its compute instances, so they are read
	// (and named) once.
	reads bool
	gpm   *gpmState
}

type skippedDevice struct {
	Index  int    `json:"index"`
	Slice  *int   `json:"mig,omitempty"`
	Reason string `json:"reason"`
}

// Collector reads NVIDIA GPUs through NVML.
//
// Contract: as metrics.Collector. Collect, Detect and Tags are called from one
// goroutine at a time; XidEvents may be called from any goroutine; Close may
// be called while a timed-out Collect is still running (no NVML call starts
// after Close begins).
type Collector struct {
	lib  nvml.Interface
	real bool // the system library, not a mock
	opts Options
	log  *slog.Logger
	g    *guard

	off        string // why the collector is off; "" when on
	inited     bool   // Init succeeded, so Shutdown is owed
	driver     string
	nvmlVer    string
	cudaDriver string
	devices    []*device
	count      int // GPUs NVML sees, selected or not
	skipped    []skippedDevice
	notes      []string
	symbols    map[string]bool
	memV2      bool // nvmlDeviceGetMemoryInfo_v2 (Used excludes reserved memory)
	evReasons  bool // nvmlDeviceGetCurrentClocksEventReasons (R535+)
	tempV      bool // nvmlDeviceGetTemperatureV (R555+)
	now        func() time.Time

	gpmMu sync.Mutex // guards every gpmState; never held across an NVML call

	watch *xidWatch

	mu              sync.Mutex // guards the fields below
	xids            []metrics.XidEvent
	xidCount        map[int]int // NVML index -> Xid events seen
	procNote        string
	unmatchedLogged bool

	closeOnce sync.Once
}

// New initializes NVML and finds the GPUs to collect. Without a usable NVML
// (no driver library, driver not loaded, no GPU selected) it returns a
// collector that is off, logs why once at info, and makes no further NVML
// call. The error is for invalid options only.
func New(opts Options) (*Collector, error) {
	opts.defaults()
	sels, err := parseSelect(opts.Select)
	if err != nil {
		return nil, err
	}
	c := &Collector{
		lib:      opts.Lib,
		opts:     opts,
		log:      opts.Log.With("source", Name),
		g:        newGuard(opts.CallTimeout),
		symbols:  map[string]bool{},
		xidCount: map[int]int{},
		now:      time.Now,
	}
	if c.lib == nil {
		c.lib = nvml.New()
		c.real = true
	}
	ctx := context.Background()
	if _, err := get(ctx, c.g, "nvmlInit", func() (struct{}, nvml.Return) { return struct{}{}, c.lib.Init() }); err != nil {
		// No call may follow a failed Init: the library may not be loaded.
		c.g.closeDown()
		c.off = initFailure(err)
		c.log.Log(ctx, offLevel(err), "GPU metrics off", "reason", c.off)
		return c, nil
	}
	c.inited = true
	if c.discover(ctx, sels); c.off != "" {
		lvl := slog.LevelInfo
		if c.off == offNoGPU {
			lvl = slog.LevelDebug // a CPU-only container on a GPU node
		}
		c.log.Log(ctx, lvl, "GPU metrics off", "reason", c.off)
		return c, nil
	}
	c.setupGPM(ctx)
	c.setupEnergy(ctx)
	c.startXidWatch(ctx)
	return c, nil
}

// offNoGPU is why GPU metrics are off where NVML works and sees no device.
const offNoGPU = "NVML sees no GPU (in a container, NVML sees only the GPUs mounted into it)"

// offLevel is the level of the "GPU metrics off" line after a failed
// Init: debug on a machine without an NVIDIA driver (every CPU-only job
// would otherwise say it), info when a driver is there and NVML still
// cannot be used (permissions, a driver updated without a reboot).
func offLevel(err error) slog.Level {
	if errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) || errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

func initFailure(err error) string {
	switch {
	case errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND):
		return "NVML library libnvidia-ml.so.1 not found (no NVIDIA driver, or it is not mounted into this container)"
	case errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED):
		return "NVIDIA kernel driver not loaded"
	case errors.Is(err, nvml.ERROR_NO_PERMISSION):
		return "no permission to use NVML"
	case errors.Is(err, nvml.ERROR_LIB_RM_VERSION_MISMATCH):
		return "NVML library and kernel driver versions differ (driver updated without a reboot?)"
	default:
		return fmt.Sprintf("NVML init failed: %v", err)
	}
}

// rerr turns an NVML status into an error; nvml.Return is one, so callers can
// test errors.Is(err, nvml.ERROR_NOT_SUPPORTED).
func rerr(r nvml.Return) error {
	if r == nvml.SUCCESS {
		return nil
	}
	return r
}

// get runs one NVML getter under the guard.
func get[T any](ctx context.Context, g *guard, what string, f func() (T, nvml.Return)) (T, error) {
	return call(ctx, g, what, func() (T, error) {
		v, r := f()
		return v, rerr(r)
	})
}

// unsupported reports whether err means "this device cannot give this
// reading", which is remembered rather than retried.
func unsupported(err error) bool {
	return errors.Is(err, nvml.ERROR_NOT_SUPPORTED) || errors.Is(err, nvml.ERROR_NO_PERMISSION) ||
		errors.Is(err, nvml.ERROR_FUNCTION_NOT_FOUND)
}

func (c *Collector) hasSymbol(ctx context.Context, name string) bool {
	ok, err := call(ctx, c.g, "LookupSymbol "+name, func() (bool, error) {
		return c.lib.Extensions().LookupSymbol(name) == nil, nil
	})
	c.symbols[name] = ok && err == nil
	return c.symbols[name]
}

// discover lists devices and MIG slices and applies the selection.
func (c *Collector) discover(ctx context.Context, sels []selector) {
	c.driver, _ = get(ctx, c.g, "nvmlSystemGetDriverVersion", c.lib.SystemGetDriverVersion)
	c.nvmlVer, _ = get(ctx, c.g, "nvmlSystemGetNVMLVersion", c.lib.SystemGetNVMLVersion)
	if v, err := get(ctx, c.g, "nvmlSystemGetCudaDriverVersion", c.lib.SystemGetCudaDriverVersion); err == nil && v > 0 {
		c.cudaDriver = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	n, err := get(ctx, c.g, "nvmlDeviceGetCount", c.lib.DeviceGetCount)
	if err != nil {
		c.off = fmt.Sprintf("listing GPUs: %v", err)
		return
	}
	c.count = n
	if n == 0 {
		c.off = offNoGPU
		return
	}
	c.memV2 = c.hasSymbol(ctx, "nvmlDeviceGetMemoryInfo_v2")
	c.evReasons = c.hasSymbol(ctx, "nvmlDeviceGetCurrentClocksEventReasons")
	// The temperature handler calls C directly and cannot be mocked: only the
	// system library gets the newer call.
	c.tempV = c.hasSymbol(ctx, "nvmlDeviceGetTemperatureV") && c.real

	var all []*device
	for i := 0; i < n; i++ {
		h, err := get(ctx, c.g, "nvmlDeviceGetHandleByIndex", func() (nvml.Device, nvml.Return) { return c.lib.DeviceGetHandleByIndex(i) })
		if err != nil {
			c.skipDevice(i, nil, err)
			continue
		}
		uuid, err := get(ctx, c.g, "nvmlDeviceGetUUID", h.GetUUID)
		if err != nil {
			c.skipDevice(i, nil, err)
			continue
		}
		name, _ := get(ctx, c.g, "nvmlDeviceGetName", h.GetName)
		d := &device{index: i, target: newTarget(fmt.Sprintf("GPU %d", i), i, -1, uuid, name, h)}
		c.discoverMIG(ctx, d)
		all = append(all, d)
	}

	infos := make([]devInfo, 0, len(all))
	for _, d := range all {
		di := devInfo{Index: d.index, UUID: d.uuid}
		for _, s := range d.slices {
			di.Slices = append(di.Slices, s.uuid)
		}
		infos = append(infos, di)
	}
	ch, notes := choose(infos, sels, c.opts.MatchCUDAVisible, c.opts.CUDAVisibleDevices)
	for _, n := range notes {
		c.log.Warn("GPU selection", "note", n)
	}
	c.notes = notes
	for _, d := range all {
		keep, ok := ch[d.index]
		if !ok {
			continue
		}
		if keep != nil {
			var kept []*slice
			for _, s := range d.slices {
				if keep[s.uuid] {
					kept = append(kept, s)
				}
			}
			d.slices = kept
		}
		readers := map[int]bool{}
		for _, s := range d.slices {
			s.reads = !readers[s.gi]
			readers[s.gi] = true
		}
		c.devices = append(c.devices, d)
	}
	if len(c.devices) == 0 {
		c.off = fmt.Sprintf("no GPU selected (NVML sees %d, %d usable)", n, len(all))
	}
}

func newTarget(label string, gpu, mig int, uuid, name string, h nvml.Device) target {
	return target{label: label, gpu: gpu, mig: mig, bound: map[*metrics.Desc]*metrics.Desc{},
		uuid: uuid, name: name, h: h, skip: map[string]bool{}}
}

// series is per-GPU template tmpl bound to t, made on first use and kept:
// a sample builds no name.
func (t *target) series(tmpl *metrics.Desc) *metrics.Desc {
	d, ok := t.bound[tmpl]
	if !ok {
		if t.mig < 0 {
			d = tmpl.ForGPU(t.gpu)
		} else {
			d = tmpl.ForMIG(t.gpu, t.mig)
		}
		t.bound[tmpl] = d
	}
	return d
}

func (c *Collector) skipDevice(i int, mig *int, err error) {
	reason := err.Error()
	if errors.Is(err, nvml.ERROR_NO_PERMISSION) {
		reason = "no permission (a container may see a GPU it is not allowed to query): " + reason
	}
	c.skipped = append(c.skipped, skippedDevice{Index: i, Slice: mig, Reason: reason})
	if mig != nil {
		c.log.Info("GPU MIG slice skipped", "gpu", i, "mig", *mig, "err", err)
		return
	}
	c.log.Info("GPU skipped", "gpu", i, "err", err)
}

func (c *Collector) discoverMIG(ctx context.Context, d *device) {
	mode, err := get(ctx, c.g, "nvmlDeviceGetMigMode", func() (int, nvml.Return) {
		cur, _, r := d.h.GetMigMode()
		return cur, r
	})
	if err != nil || mode != nvml.DEVICE_MIG_ENABLE {
		return // NOT_SUPPORTED on GPUs without MIG
	}
	d.mig = true
	max, err := get(ctx, c.g, "nvmlDeviceGetMaxMigDeviceCount", d.h.GetMaxMigDeviceCount)
	if err != nil {
		c.log.Info("GPU MIG slices not listed", "gpu", d.index, "err", err)
		return
	}
	for m := 0; m < max; m++ {
		h, err := get(ctx, c.g, "nvmlDeviceGetMigDeviceHandleByIndex", func() (nvml.Device, nvml.Return) {
			return d.h.GetMigDeviceHandleByIndex(m)
		})
		if errors.Is(err, nvml.ERROR_NOT_FOUND) {
			continue // an empty slot
		}
		if err != nil {
			c.skipDevice(d.index, &m, err)
			continue
		}
		uuid, err := get(ctx, c.g, "nvmlDeviceGetUUID", h.GetUUID)
		if err != nil {
			c.skipDevice(d.index, &m, err)
			continue
		}
		gi, err := get(ctx, c.g, "nvmlDeviceGetGpuInstanceId", h.GetGpuInstanceId)
		if err != nil {
			c.skipDevice(d.index, &m, fmt.Errorf("its GPU instance ID: %w", err))
			continue
		}
		ci, err := get(ctx, c.g, "nvmlDeviceGetComputeInstanceId", h.GetComputeInstanceId)
		if err != nil {
			ci = -1 // only shown by Detect
		}
		name, _ := get(ctx, c.g, "nvmlDeviceGetName", h.GetName)
		d.slices = append(d.slices, &slice{index: m, gi: gi, ci: ci, target: newTarget(
			fmt.Sprintf("GPU %d MIG %d", d.index, gi), d.index, gi, uuid, name, h)})
	}
}

// Name returns "gpu".
func (c *Collector) Name() string { return Name }

// reading collects the points and errors of one Collect.
type reading struct {
	ctx  context.Context
	c    *Collector
	b    *metrics.Batch
	errs []error
}

// take runs one NVML reading of t; a reading t does not support is dropped
// and remembered so it is not asked again.
func take[T any](r *reading, t *target, what string, f func() (T, nvml.Return)) (T, bool) {
	var zero T
	if t.skip[what] {
		return zero, false
	}
	v, err := get(r.ctx, r.c.g, what, f)
	if err == nil {
		return v, true
	}
	if unsupported(err) {
		t.skip[what] = true
		r.c.log.Debug("GPU reading not supported; not asked again", "target", t.label, "err", err)
		return zero, false
	}
	r.errs = append(r.errs, fmt.Errorf("%s: %w", t.label, err))
	return zero, false
}

// add adds the value of per-GPU template tmpl read from t.
func (r *reading) add(t *target, tmpl *metrics.Desc, v float64, source string) {
	r.b.Add(t.series(tmpl), v, source)
}

// Collect reads every selected GPU and MIG slice.
func (c *Collector) Collect(ctx context.Context, b *metrics.Batch) error {
	if c.off != "" {
		return nil
	}
	if what, _, stuck := c.g.stuckOn(); stuck {
		return fmt.Errorf("GPU metrics: %w (%s)", ErrStuck, what)
	}
	if c.g.isClosed() {
		return fmt.Errorf("GPU metrics: %w", ErrClosed)
	}
	r := &reading{ctx: ctx, c: c, b: b}
	for _, d := range c.devices {
		c.readDevice(r, d)
		if ctx.Err() != nil || c.g.isStuck() {
			break // the rest would fail the same way
		}
	}
	if c.opts.ProcessTree != nil && ctx.Err() == nil && !c.g.isStuck() {
		c.readProcesses(r)
	}
	return errors.Join(r.errs...)
}

func (c *Collector) readDevice(r *reading, d *device) {
	t := &d.target
	// NVML has no utilization for a GPU in MIG mode, nor per slice: not
	// asked (Detect says so), rather than reported as 0.
	if !d.mig {
		if u, ok := take(r, t, "nvmlDeviceGetUtilizationRates", t.h.GetUtilizationRates); ok {
			r.add(t, metrics.GPUUtilization, float64(u.Gpu), "nvmlDeviceGetUtilizationRates")
			r.add(t, metrics.GPUMemoryControllerUtilization, float64(u.Memory), "nvmlDeviceGetUtilizationRates")
		}
	}
	c.readGPM(r, t, d.gpm)
	c.readMemory(r, t)
	power, okP := take(r, t, "nvmlDeviceGetPowerUsage", t.h.GetPowerUsage)
	limit, okL := take(r, t, "nvmlDeviceGetEnforcedPowerLimit", t.h.GetEnforcedPowerLimit)
	if okP {
		r.add(t, metrics.GPUPowerUsage, float64(power)/1000, "nvmlDeviceGetPowerUsage")
	}
	if okL && limit > 0 {
		r.add(t, metrics.GPUPowerLimit, float64(limit)/1000, "nvmlDeviceGetEnforcedPowerLimit")
		if okP {
			r.add(t, metrics.GPUPowerUsagePercent, 100*float64(power)/float64(limit), "nvmlDeviceGetPowerUsage/nvmlDeviceGetEnforcedPowerLimit")
		}
	}
	if c.tempV {
		if v, ok := take(r, t, "nvmlDeviceGetTemperatureV", func() (nvml.Temperature, nvml.Return) { return t.h.GetTemperatureV().V1() }); ok {
			r.add(t, metrics.GPUTemperature, float64(v.Temperature), "nvmlDeviceGetTemperatureV")
		}
	} else if v, ok := take(r, t, "nvmlDeviceGetTemperature", func() (uint32, nvml.Return) { return t.h.GetTemperature(nvml.TEMPERATURE_GPU) }); ok {
		r.add(t, metrics.GPUTemperature, float64(v), "nvmlDeviceGetTemperature")
	}
	if v, ok := take(r, t, "nvmlDeviceGetClockInfo(SM)", func() (uint32, nvml.Return) { return t.h.GetClockInfo(nvml.CLOCK_SM) }); ok {
		r.add(t, metrics.GPUSMClock, float64(v), "nvmlDeviceGetClockInfo")
	}
	if v, ok := take(r, t, "nvmlDeviceGetClockInfo(MEM)", func() (uint32, nvml.Return) { return t.h.GetClockInfo(nvml.CLOCK_MEM) }); ok {
		r.add(t, metrics.GPUMemoryClock, float64(v), "nvmlDeviceGetClockInfo")
	}
	c.readEnergy(r, d)
	c.readThrottle(r, t)
	c.readErrors(r, d)
	for _, s := range d.slices {
		if s.reads {
			c.readMemory(r, &s.target)
			c.readGPM(r, &s.target, s.gpm)
		}
	}
}

func (c *Collector) readMemory(r *reading, t *target) {
	const v2 = "nvmlDeviceGetMemoryInfo_v2"
	if c.memV2 && !t.skip[v2] {
		// v2: Used is what processes allocated; Reserved is the driver's own.
		m, ok := take(r, t, v2, t.h.GetMemoryInfo_v2)
		if ok {
			c.addMemory(r, t, m.Used, m.Total, v2)
			r.add(t, metrics.GPUMemoryReserved, metrics.MB(float64(m.Reserved)), v2)
			return
		}
		if !t.skip[v2] {
			return // an error, not "unsupported": reported by take
		}
	}
	// v1 (drivers before R510): Used includes reserved memory.
	m, ok := take(r, t, "nvmlDeviceGetMemoryInfo", t.h.GetMemoryInfo)
	if ok {
		c.addMemory(r, t, m.Used, m.Total, "nvmlDeviceGetMemoryInfo")
	}
}

func (c *Collector) addMemory(r *reading, t *target, used, total uint64, source string) {
	r.add(t, metrics.GPUMemoryUsed, metrics.MB(float64(used)), source)
	r.add(t, metrics.GPUMemoryTotal, metrics.MB(float64(total)), source)
	if total > 0 {
		r.add(t, metrics.GPUMemoryUsagePercent, 100*float64(used)/float64(total), source)
	}
}

func (c *Collector) readThrottle(r *reading, t *target) {
	what, f := "nvmlDeviceGetCurrentClocksEventReasons", t.h.GetCurrentClocksEventReasons
	if !c.evReasons {
		what, f = "nvmlDeviceGetCurrentClocksThrottleReasons", t.h.GetCurrentClocksThrottleReasons
	}
	mask, ok := take(r, t, what, f)
	if !ok {
		return
	}
	flags, active := decodeThrottle(mask)
	r.add(t, metrics.GPUThrottleReasons, float64(active), what)
	for i, tr := range throttleReasons {
		r.add(t, tr.desc, flags[i], what)
	}
}

func (c *Collector) readErrors(r *reading, d *device) {
	t := &d.target
	// Volatile counters: since the driver was loaded, so a job sees errors of
	// its own era rather than the board's lifetime.
	if v, ok := take(r, t, "nvmlDeviceGetTotalEccErrors(corrected)", func() (uint64, nvml.Return) {
		return t.h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)
	}); ok {
		r.add(t, metrics.GPUECCCorrected, float64(v), "nvmlDeviceGetTotalEccErrors")
	}
	if v, ok := take(r, t, "nvmlDeviceGetTotalEccErrors(uncorrected)", func() (uint64, nvml.Return) {
		return t.h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	}); ok {
		r.add(t, metrics.GPUECCUncorrected, float64(v), "nvmlDeviceGetTotalEccErrors")
	}
	type rows struct {
		corr, unc        int
		pending, failure bool
	}
	if v, ok := take(r, t, "nvmlDeviceGetRemappedRows", func() (rows, nvml.Return) {
		a, b, p, f, ret := t.h.GetRemappedRows()
		return rows{a, b, p, f}, ret
	}); ok {
		r.add(t, metrics.GPURemappedRowsCorrected, float64(v.corr), "nvmlDeviceGetRemappedRows")
		r.add(t, metrics.GPURemappedRowsUncorrected, float64(v.unc), "nvmlDeviceGetRemappedRows")
		r.add(t, metrics.GPURemappedRowsPending, b2f(v.pending), "nvmlDeviceGetRemappedRows")
		r.add(t, metrics.GPURemappedRowsFailed, b2f(v.failure), "nvmlDeviceGetRemappedRows")
	}
	if d.xid {
		c.mu.Lock()
		n := c.xidCount[d.index]
		c.mu.Unlock()
		r.add(t, metrics.GPUXidErrors, float64(n), "nvmlEventSetWait")
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// readProcesses sums the GPU memory of the child's tree over every collected
// device (per slice on MIG devices: the parent's list would repeat them).
func (c *Collector) readProcesses(r *reading) {
	var procs []gpuProc
	listed := false
	for _, d := range c.devices {
		targets := []*target{&d.target}
		if d.mig {
			targets = targets[:0]
			for _, s := range d.slices {
				targets = append(targets, &s.target)
			}
		}
		for _, t := range targets {
			ps, ok := take(r, t, "nvmlDeviceGetComputeRunningProcesses", t.h.GetComputeRunningProcesses)
			if !ok {
				continue
			}
			listed = true
			for _, p := range ps {
				procs = append(procs, gpuProc{PID: p.Pid, Used: p.UsedGpuMemory})
			}
		}
	}
	if !listed {
		return
	}
	tree, err := c.opts.ProcessTree.NSpids(r.ctx)
	if tree == nil && err != nil {
		r.errs = append(r.errs, fmt.Errorf("listing the child's processes: %w", err))
		return
	}
	if err != nil {
		r.errs = append(r.errs, err) // the set still holds every PID that could be read
	}
	if len(tree) == 0 {
		c.opts.ProcessTree.NoteGPUHolders(Name, nil)
		return // no child yet, or it has exited: nothing to match
	}
	set := treePIDs(tree)
	m := matchProcs(set, procs)
	c.noteProcs(m)
	c.opts.ProcessTree.NoteGPUHolders(Name, holders(tree, procs))
	src := "nvmlDeviceGetComputeRunningProcesses"
	r.b.Add(metrics.ProcessGPUProcesses, float64(m.Matched), src)
	r.b.Add(metrics.ProcessGPUUnmatchedProcesses, float64(m.Processes-m.Matched), src)
	// No figure when processes exist but none is the child's (the PIDs may be
	// unmappable host PIDs: 0 would be a guess), or NVML has none for them.
	if (m.Processes > 0 && m.Matched == 0) || (m.Matched > 0 && m.NoValue == m.Matched) {
		return
	}
	r.b.Add(metrics.ProcessGPUMemory, metrics.MB(float64(m.UsedBytes)), src)
}

func (c *Collector) noteProcs(m procMatch) {
	note := m.note()
	c.mu.Lock()
	c.procNote = note
	first := m.Processes > 0 && m.Matched == 0 && !c.unmatchedLogged
	if first {
		c.unmatchedLogged = true
	}
	c.mu.Unlock()
	if first {
		c.log.Info("GPU processes not matched to the child's tree; process_gpu_memory_megabytes omitted while so", "note", note)
	}
}

// Detect says which GPUs are collected, or why the collector is off.
func (c *Collector) Detect(ctx context.Context) map[string]any {
	if c.off != "" {
		return map[string]any{"status": "off: " + c.off}
	}
	devs := make([]map[string]any, 0, len(c.devices))
	for _, d := range c.devices {
		m := map[string]any{"index": d.index, "uuid": d.uuid, "name": d.name, "mig": d.mig}
		m["activity"] = d.gpmWhy
		if d.gpm != nil {
			m["activity"] = "GPM " + c.gpmNote(d.gpm)
		}
		m["energy"] = "since bridge started (nvmlDeviceGetTotalEnergyConsumption)"
		if d.energyWhy != "" {
			m["energy"] = d.energyWhy
		}
		if d.mig {
			m["utilization"] = "not available in MIG mode: NVML gives no utilization for a GPU in MIG mode " +
				"(activity per instance: gpu_N_mig_M_prof_…, from GPM on Hopper and later)"
			var ss []map[string]any
			for _, s := range d.slices {
				sm := map[string]any{"index": s.index, "gpu_instance": s.gi, "compute_instance": s.ci, "uuid": s.uuid, "name": s.name}
				switch {
				case !s.reads:
					sm["series"] = fmt.Sprintf("those of the slice of GPU instance %d read first (one GPU instance, several compute instances)", s.gi)
				case s.gpm != nil:
					sm["activity"] = "GPM " + c.gpmNote(s.gpm)
				default:
					sm["activity"] = d.gpmWhy
				}
				ss = append(ss, sm)
			}
			m["mig_slices"] = ss
		}
		m["xid_events"] = map[bool]string{true: "watched", false: "not supported"}[d.xid]
		devs = append(devs, m)
	}
	out := map[string]any{
		"status":      "on",
		"driver":      c.driver,
		"nvml":        c.nvmlVer,
		"cuda_driver": c.cudaDriver,
		"devices":     devs,
		"symbols":     c.symbols,
	}
	if len(c.skipped) > 0 {
		out["skipped"] = c.skipped
	}
	if len(c.notes) > 0 {
		out["notes"] = c.notes
	}
	if what, since, stuck := c.g.stuckOn(); stuck {
		out["stuck"] = fmt.Sprintf("%s has not returned since %s", what, since.Format("15:04:05"))
	}
	if c.opts.ProcessTree == nil {
		out["process_pids"] = "no child process tree"
	} else {
		c.mu.Lock()
		note := c.procNote
		c.mu.Unlock()
		if note == "" {
			r := &reading{ctx: ctx, c: c, b: &metrics.Batch{}}
			c.readProcesses(r)
			c.mu.Lock()
			note = c.procNote
			c.mu.Unlock()
		}
		out["process_pids"] = note
	}
	return out
}

// Tags returns the run tags naming the collected GPUs: bridge.gpu.status,
// bridge.gpu.driver, bridge.gpu.cuda_driver, bridge.gpu.count,
// bridge.gpu.N.uuid, bridge.gpu.N.name and, for MIG slices,
// bridge.gpu.N.mig.M.uuid and bridge.gpu.N.mig.M.name (M: the GPU
// instance ID).
func (c *Collector) Tags() map[string]string {
	if c.off != "" {
		return map[string]string{"bridge.gpu.status": "off: " + c.off}
	}
	t := map[string]string{
		"bridge.gpu.status": "on",
		"bridge.gpu.count":  strconv.Itoa(len(c.devices)),
	}
	if c.driver != "" {
		t["bridge.gpu.driver"] = c.driver
	}
	if c.cudaDriver != "" {
		t["bridge.gpu.cuda_driver"] = c.cudaDriver
	}
	for _, d := range c.devices {
		p := fmt.Sprintf("bridge.gpu.%d.", d.index)
		t[p+"uuid"] = d.uuid
		t[p+"name"] = d.name
		for _, s := range d.slices {
			if !s.reads {
				continue
			}
			sp := fmt.Sprintf("%smig.%d.", p, s.gi)
			t[sp+"uuid"] = s.uuid
			t[sp+"name"] = s.name
		}
	}
	return t
}

// Close stops the Xid watcher and shuts NVML down. It makes no NVML call when
// Init failed, and leaves NVML loaded when a call is still hung (a shutdown
// under a running call could crash the process).
func (c *Collector) Close() error {
	var err error
	c.closeOnce.Do(func() {
		if c.opts.ProcessTree != nil {
			_ = c.opts.ProcessTree.Close() // shared: safe beside its other users' walks
		}
		ctx := context.Background()
		if c.watch != nil && !c.watch.stop(c.opts.CallTimeout) {
			c.g.closeDown()
			c.log.Warn("GPU Xid watcher did not stop; NVML left loaded")
			return
		}
		if c.watch != nil {
			_, _ = get(ctx, c.g, "nvmlEventSetFree", func() (struct{}, nvml.Return) { return struct{}{}, c.watch.set.Free() })
		}
		if !c.inited {
			return
		}
		err = c.g.last(ctx, "nvmlShutdown", func() error {
			c.releaseGPM()
			return rerr(c.lib.Shutdown())
		})
	})
	return err
}

// Indexes maps the UUID of each collected GPU to its NVML index (nil when
// the collector is off). The devices are fixed by New, so any goroutine may
// call it: the scrape source uses it to give dcgm-exporter's series (keyed
// by the node's index) the index NVML uses in this container.
func (c *Collector) Indexes() map[string]int {
	if len(c.devices) == 0 {
		return nil
	}
	m := make(map[string]int, len(c.devices))
	for _, d := range c.devices {
		m[d.uuid] = d.index
	}
	return m
}

// Count is the number of GPUs NVML sees, selected or not (0 without NVML):
// GPUs of other vendors are numbered after them. Fixed by New.
func (c *Collector) Count() int { return c.count }
