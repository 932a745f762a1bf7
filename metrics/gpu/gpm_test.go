//go:build linux && cgo

package gpu

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/metrics"
)

// gpmDriver fakes NVML's GPM on go-nvml's mocks, as nvml.h documents it:
// sample buffers are allocated (nvmlGpmSampleAlloc), filled from a GPU or a
// MIG GPU instance (nvmlGpmSampleGet, nvmlGpmMigSampleGet), turned two at a
// time into the metrics of the interval between them (nvmlGpmMetricsGet),
// and freed (nvmlGpmSampleFree). Each source keeps cumulative counters that
// the test advances, so a metric is right only if it is computed from the
// samples taken at the two Collects around the interval. A use the API does
// not allow fails the test: a buffer used after it is freed, freed twice,
// metrics from an unfilled buffer or from two sources.
type gpmDriver struct {
	t     testing.TB
	clock *fakeClock

	mu      sync.Mutex
	live    map[*mock.GpmSample]*gpmSnap // allocated and not freed; nil: not filled
	freed   map[*mock.GpmSample]bool
	allocs  int
	sources map[gpmSource]*gpmCounters
	// unsupported metrics per source: their NvmlReturn is NOT_SUPPORTED.
	unsupported map[gpmSource]map[nvml.GpmMetricId]bool
	events      []string // "alloc", "free", "shutdown", in order
	seq         int
}

// gpmSource is what a sample is taken of: a GPU, or GPU instance gi of one.
type gpmSource struct {
	dev nvml.Device
	gi  int // -1: the whole GPU
}

// gpmCounters are a source's cumulative counters, per metric: busy seconds
// for a percentage, MiB for a MiB/s rate. Time is the clock's, for all.
type gpmCounters struct {
	acc map[nvml.GpmMetricId]float64
}

type gpmSnap struct {
	src     gpmSource
	seq     int
	seconds float64
	acc     map[nvml.GpmMetricId]float64
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// rateMetric reports whether id is a MiB/s metric (else a percentage).
func rateMetric(id nvml.GpmMetricId) bool {
	switch id {
	case nvml.GPM_METRIC_PCIE_TX_PER_SEC, nvml.GPM_METRIC_PCIE_RX_PER_SEC,
		nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC:
		return true
	}
	return false
}

// newGPMDriver installs the fake on s, GPM supported on every GPU.
func newGPMDriver(t testing.TB, s *server.Server) *gpmDriver {
	g := &gpmDriver{t: t, clock: &fakeClock{t: time.Unix(1_700_000_000, 0)},
		live: map[*mock.GpmSample]*gpmSnap{}, freed: map[*mock.GpmSample]bool{},
		sources: map[gpmSource]*gpmCounters{}, unsupported: map[gpmSource]map[nvml.GpmMetricId]bool{}}
	s.GpmSampleAllocFunc = g.alloc
	s.GpmSampleFreeFunc = func(smp nvml.GpmSample) nvml.Return { return g.free(smp) }
	s.GpmMetricsGetFunc = g.metrics
	shutdown := s.ShutdownFunc
	s.ShutdownFunc = func() nvml.Return {
		g.mu.Lock()
		g.events = append(g.events, "shutdown")
		g.mu.Unlock()
		return shutdown()
	}
	for _, d := range s.Devices {
		d := d.(*server.Device)
		d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
			return nvml.GpmSupport{Version: 1, IsSupportedDevice: 1}, nvml.SUCCESS
		}
		d.GpmSampleGetFunc = func(smp nvml.GpmSample) nvml.Return { return g.fill(smp, gpmSource{d, -1}) }
		d.GpmMigSampleGetFunc = func(gi int, smp nvml.GpmSample) nvml.Return { return g.fill(smp, gpmSource{d, gi}) }
	}
	return g
}

func (g *gpmDriver) alloc() (nvml.GpmSample, nvml.Return) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := &mock.GpmSample{}
	s.FreeFunc = func() nvml.Return { return g.free(s) }
	g.live[s] = nil
	g.allocs++
	g.events = append(g.events, "alloc")
	return s, nvml.SUCCESS
}

func (g *gpmDriver) free(smp nvml.GpmSample) nvml.Return {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, _ := smp.(*mock.GpmSample)
	if _, ok := g.live[s]; !ok {
		g.t.Errorf("nvmlGpmSampleFree of a sample that is not allocated (freed before: %v)", g.freed[s])
		return nvml.ERROR_INVALID_ARGUMENT
	}
	delete(g.live, s)
	g.freed[s] = true
	g.events = append(g.events, "free")
	return nvml.SUCCESS
}

func (g *gpmDriver) fill(smp nvml.GpmSample, src gpmSource) nvml.Return {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, _ := smp.(*mock.GpmSample)
	if _, ok := g.live[s]; !ok {
		g.t.Errorf("a GPM sample filled that is not allocated (freed: %v)", g.freed[s])
		return nvml.ERROR_INVALID_ARGUMENT
	}
	c := g.counters(src)
	g.seq++
	snap := &gpmSnap{src: src, seq: g.seq, seconds: float64(g.clock.now().UnixNano()) / 1e9, acc: map[nvml.GpmMetricId]float64{}}
	for id, v := range c.acc {
		snap.acc[id] = v
	}
	g.live[s] = snap
	return nvml.SUCCESS
}

func (g *gpmDriver) counters(src gpmSource) *gpmCounters {
	c := g.sources[src]
	if c == nil {
		c = &gpmCounters{acc: map[nvml.GpmMetricId]float64{}}
		g.sources[src] = c
	}
	return c
}

func (g *gpmDriver) metrics(m *nvml.GpmMetricsGetType) nvml.Return {
	g.mu.Lock()
	defer g.mu.Unlock()
	s1, _ := m.Sample1.(*mock.GpmSample)
	s2, _ := m.Sample2.(*mock.GpmSample)
	a, okA := g.live[s1]
	b, okB := g.live[s2]
	switch {
	case !okA || !okB:
		g.t.Error("nvmlGpmMetricsGet on a sample that is not allocated")
		return nvml.ERROR_INVALID_ARGUMENT
	case a == nil || b == nil:
		g.t.Error("nvmlGpmMetricsGet on a sample never filled")
		return nvml.ERROR_INVALID_ARGUMENT
	case a.src != b.src:
		g.t.Errorf("nvmlGpmMetricsGet on samples of two sources: %v, %v", a.src, b.src)
		return nvml.ERROR_INVALID_ARGUMENT
	case a.seq >= b.seq:
		g.t.Error("nvmlGpmMetricsGet with Sample1 not older than Sample2")
		return nvml.ERROR_INVALID_ARGUMENT
	case m.NumMetrics == 0 || int(m.NumMetrics) > len(m.Metrics):
		g.t.Errorf("nvmlGpmMetricsGet NumMetrics %d", m.NumMetrics)
		return nvml.ERROR_INVALID_ARGUMENT
	}
	dt := b.seconds - a.seconds
	for i := range m.Metrics[:m.NumMetrics] {
		mt := &m.Metrics[i]
		id := nvml.GpmMetricId(mt.MetricId)
		if g.unsupported[a.src][id] {
			mt.NvmlReturn, mt.Value = uint32(nvml.ERROR_NOT_SUPPORTED), 0
			continue
		}
		d := b.acc[id] - a.acc[id]
		mt.NvmlReturn, mt.Value = uint32(nvml.SUCCESS), d/dt
		if !rateMetric(id) {
			mt.Value *= 100
		}
	}
	return nvml.SUCCESS
}

// run advances the clock by dt, src working at the given levels over it:
// percentages, or MiB/s for the rate metrics.
func (g *gpmDriver) run(src gpmSource, dt time.Duration, levels map[nvml.GpmMetricId]float64) {
	g.mu.Lock()
	c := g.counters(src)
	sec := dt.Seconds()
	for id, v := range levels {
		if rateMetric(id) {
			c.acc[id] += v * sec
		} else {
			c.acc[id] += v / 100 * sec
		}
	}
	g.mu.Unlock()
	g.clock.add(dt)
}

func (g *gpmDriver) liveCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.live)
}

func (g *gpmDriver) eventLog() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.events, ",")
}

// gpmCollector builds a collector on s with the driver's clock.
func gpmCollector(t *testing.T, g *gpmDriver, opts Options) (*Collector, string) {
	t.Helper()
	c, log := newCollector(t, opts)
	c.now = g.clock.now
	return c, log.String()
}

// busy are the levels of a GPU at work, and what bridge makes of them.
var busy = map[nvml.GpmMetricId]float64{
	nvml.GPM_METRIC_GRAPHICS_UTIL: 100, nvml.GPM_METRIC_SM_UTIL: 70, nvml.GPM_METRIC_SM_OCCUPANCY: 35,
	nvml.GPM_METRIC_ANY_TENSOR_UTIL: 50, nvml.GPM_METRIC_HMMA_TENSOR_UTIL: 45, nvml.GPM_METRIC_DFMA_TENSOR_UTIL: 1,
	nvml.GPM_METRIC_DMMA_TENSOR_UTIL: 2, nvml.GPM_METRIC_IMMA_TENSOR_UTIL: 4, nvml.GPM_METRIC_DRAM_BW_UTIL: 60,
	nvml.GPM_METRIC_FP64_UTIL: 3, nvml.GPM_METRIC_FP32_UTIL: 20, nvml.GPM_METRIC_FP16_UTIL: 10, nvml.GPM_METRIC_INTEGER_UTIL: 5,
	nvml.GPM_METRIC_PCIE_TX_PER_SEC: 1000, nvml.GPM_METRIC_PCIE_RX_PER_SEC: 2000,
	nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: 30000, nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 40000,
}

var busySeries = map[string]float64{
	"prof_gr_engine_active_ratio": 1, "prof_sm_active_ratio": 0.7, "prof_sm_occupancy_ratio": 0.35,
	"prof_pipe_tensor_active_ratio": 0.5, "prof_pipe_tensor_hmma_active_ratio": 0.45, "prof_pipe_tensor_dfma_active_ratio": 0.01,
	"prof_pipe_tensor_dmma_active_ratio": 0.02, "prof_pipe_tensor_imma_active_ratio": 0.04, "prof_dram_active_ratio": 0.6,
	"prof_pipe_fp64_active_ratio": 0.03, "prof_pipe_fp32_active_ratio": 0.2, "prof_pipe_fp16_active_ratio": 0.1,
	"prof_pipe_int_active_ratio": 0.05,
	// MiB/s to 10^6 bytes/s.
	"prof_pcie_tx_megabytes_per_second": 1048.576, "prof_pcie_rx_megabytes_per_second": 2097.152,
	"prof_nvlink_tx_megabytes_per_second": 31457.28, "prof_nvlink_rx_megabytes_per_second": 41943.04,
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func wantNear(t *testing.T, pts map[string]explained, name string, want float64) {
	t.Helper()
	p, ok := pts[name]
	if !ok {
		t.Errorf("%s missing", name)
		return
	}
	if !near(p.Value, want) {
		t.Errorf("%s = %v, want %v", name, p.Value, want)
	}
}

func profPoints(pts map[string]explained, prefix string) []string {
	var out []string
	for name := range pts {
		if strings.HasPrefix(name, prefix) && strings.Contains(name, "_prof_") {
			out = append(out, name)
		}
	}
	return out
}

// GPM on one GPU and not on the other (before Hopper): the documented
// sequence, values over the interval between two Collects, units as DCGM's,
// and every sample freed at Close, before nvmlShutdown.
func TestGPMActivity(t *testing.T) {
	s := fakeServer(dgxh100.New(), 2)
	drv := newGPMDriver(t, s)
	dev(s, 1).GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
		return nvml.GpmSupport{Version: 1}, nvml.SUCCESS
	}
	c, log := gpmCollector(t, drv, Options{Lib: s})
	if drv.allocs != 2 {
		t.Fatalf("%d samples allocated, want 2 for the one GPU with GPM", drv.allocs)
	}
	if strings.Count(log, "GPU activity (GPM) not available") != 1 || !strings.Contains(log, "gpu=1") {
		t.Errorf("want one info line for GPU 1; log:\n%s", log)
	}

	src := gpmSource{dev(s, 0), -1}
	drv.run(src, 5*time.Second, map[nvml.GpmMetricId]float64{nvml.GPM_METRIC_SM_UTIL: 99}) // before the first sample: not counted
	if p := profPoints(collect(t, c), "gpu_"); len(p) != 0 {
		t.Errorf("activity from one sample: %v", p)
	}
	drv.run(src, 10*time.Second, busy)
	pts := collect(t, c)
	for name, want := range busySeries {
		wantNear(t, pts, "gpu_0_"+name, want)
		if p, ok := pts["gpu_0_"+name]; ok && (p.Desc.Of == nil || p.Desc.Of.Name != name || !strings.HasPrefix(p.Source, "nvmlGpmMetricsGet(NVML_GPM_METRIC_")) {
			t.Errorf("%s: desc %+v, source %q", name, p.Desc, p.Source)
		}
	}
	if p := profPoints(pts, "gpu_1_"); len(p) != 0 {
		t.Errorf("activity on a GPU without GPM: %v", p)
	}
	if n := len(profPoints(pts, "gpu_0_")); n != len(busySeries) {
		t.Errorf("%d activity series, want %d", n, len(busySeries))
	}

	// The next interval alone: idle now.
	drv.run(src, 10*time.Second, map[nvml.GpmMetricId]float64{nvml.GPM_METRIC_SM_UTIL: 2})
	pts = collect(t, c)
	wantNear(t, pts, "gpu_0_prof_sm_active_ratio", 0.02)
	wantNear(t, pts, "gpu_0_prof_pipe_tensor_active_ratio", 0)
	if n := len(dev(s, 0).GpmSampleGetCalls()); n != 3 {
		t.Errorf("%d samples taken in 3 Collects, want one each", n)
	}
	if n := len(s.GpmMetricsGetCalls()); n != 2 {
		t.Errorf("nvmlGpmMetricsGet called %d times, want 2", n)
	}
	if n := len(dev(s, 1).GpmSampleGetCalls()); n != 0 {
		t.Errorf("GPU 1 without GPM sampled %d times", n)
	}

	det := c.Detect(context.Background())["devices"].([]map[string]any)
	if det[0]["activity"] != "GPM on" || !strings.HasPrefix(det[1]["activity"].(string), "not supported on this GPU") {
		t.Errorf("Detect activity: %v, %v", det[0]["activity"], det[1]["activity"])
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if drv.liveCount() != 0 || len(s.GpmSampleFreeCalls()) != 2 {
		t.Errorf("after Close: %d samples live, %d freed", drv.liveCount(), len(s.GpmSampleFreeCalls()))
	}
	if got := drv.eventLog(); got != "alloc,alloc,free,free,shutdown" {
		t.Errorf("calls %s, want the samples freed before nvmlShutdown", got)
	}
}

// A Collect less than NVML's 100 ms refresh after the last sample takes
// none; the next one covers the whole time since.
func TestGPMTooSoon(t *testing.T) {
	s := fakeServer(dgxh100.New(), 1)
	drv := newGPMDriver(t, s)
	c, _ := gpmCollector(t, drv, Options{Lib: s})
	src := gpmSource{dev(s, 0), -1}
	collect(t, c)
	drv.run(src, 50*time.Millisecond, map[nvml.GpmMetricId]float64{nvml.GPM_METRIC_SM_UTIL: 100})
	if p := profPoints(collect(t, c), "gpu_0_"); len(p) != 0 {
		t.Errorf("activity 50 ms after the last sample: %v", p)
	}
	if n := len(dev(s, 0).GpmSampleGetCalls()); n != 1 {
		t.Errorf("%d samples, want the second Collect to take none", n)
	}
	drv.run(src, 950*time.Millisecond, map[nvml.GpmMetricId]float64{nvml.GPM_METRIC_SM_UTIL: 0})
	wantNear(t, collect(t, c), "gpu_0_prof_sm_active_ratio", 0.05)
}

// A metric the GPU does not count (NVLink on a PCIe board) comes back with
// its own error: that series is absent, the rest present. A NaN leaves the
// collector, for the Sampler's range check to refuse and count.
func TestGPMMetricNotSupported(t *testing.T) {
	s := fakeServer(dgxh100.New(), 1)
	drv := newGPMDriver(t, s)
	src := gpmSource{dev(s, 0), -1}
	drv.unsupported[src] = map[nvml.GpmMetricId]bool{nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: true, nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: true}
	metricsGet := s.GpmMetricsGetFunc
	s.GpmMetricsGetFunc = func(m *nvml.GpmMetricsGetType) nvml.Return {
		r := metricsGet(m)
		for i := range m.Metrics[:m.NumMetrics] {
			if nvml.GpmMetricId(m.Metrics[i].MetricId) == nvml.GPM_METRIC_FP64_UTIL {
				m.Metrics[i].Value = math.NaN()
			}
		}
		return r
	}
	c, _ := gpmCollector(t, drv, Options{Lib: s})
	collect(t, c)
	drv.run(src, time.Second, busy)
	pts := collect(t, c)
	for _, gone := range []string{"prof_nvlink_tx_megabytes_per_second", "prof_nvlink_rx_megabytes_per_second"} {
		if p, ok := pts["gpu_0_"+gone]; ok {
			t.Errorf("gpu_0_%s = %v, want absent", gone, p.Value)
		}
	}
	if p, ok := pts["gpu_0_prof_pipe_fp64_active_ratio"]; !ok || !math.IsNaN(p.Value) {
		t.Errorf("gpu_0_prof_pipe_fp64_active_ratio = %v (%v), want the NaN the GPU gave", p.Value, ok)
	}
	wantNear(t, pts, "gpu_0_prof_pcie_rx_megabytes_per_second", 2097.152)
}

// Where GPM cannot run no GPM call is made: a driver without the symbols
// (looked up first: the call would kill the process), a device that says
// so, or one whose query fails (go-nvml before v0.13.1 made every driver
// answer ERROR_ARGUMENT_VERSION_MISMATCH).
func TestGPMNotAvailable(t *testing.T) {
	for _, tt := range []struct {
		name    string
		setup   func(*server.Server)
		note    string
		queries int
	}{
		{"driver without GPM", func(s *server.Server) {
			s.LookupSymbolFunc = func(name string) error {
				if name == "nvmlGpmMigSampleGet" {
					return errors.New("undefined symbol: " + name)
				}
				return nil
			}
		}, "not available: the driver has no nvmlGpmMigSampleGet", 0},
		{"before Hopper", func(s *server.Server) {
			dev(s, 0).GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{Version: 1}, nvml.SUCCESS }
		}, "not supported on this GPU (GPM needs Hopper or later)", 1},
		{"query fails", func(s *server.Server) {
			dev(s, 0).GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
				return nvml.GpmSupport{}, nvml.ERROR_ARGUMENT_VERSION_MISMATCH
			}
		}, "not supported: nvmlGpmQueryDeviceSupport: ERROR_ARGUMENT_VERSION_MISMATCH", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeServer(dgxh100.New(), 1)
			drv := newGPMDriver(t, s)
			tt.setup(s)
			c, _ := gpmCollector(t, drv, Options{Lib: s})
			for range 3 {
				drv.run(gpmSource{dev(s, 0), -1}, time.Second, busy)
				if p := profPoints(collect(t, c), "gpu_0_"); len(p) != 0 {
					t.Errorf("activity: %v", p)
				}
			}
			if got := callsMade(s, "ExtensionsCalls", "LookupSymbolCalls", "InitCalls", "SystemGetDriverVersionCalls",
				"SystemGetNVMLVersionCalls", "SystemGetCudaDriverVersionCalls", "DeviceGetCountCalls", "DeviceGetHandleByIndexCalls"); len(got) != 0 {
				t.Errorf("library calls %v", got)
			}
			if drv.allocs != 0 || len(dev(s, 0).GpmSampleGetCalls()) != 0 || len(dev(s, 0).GpmQueryDeviceSupportCalls()) != tt.queries {
				t.Errorf("%d allocs, %d samples, %d queries", drv.allocs, len(dev(s, 0).GpmSampleGetCalls()), len(dev(s, 0).GpmQueryDeviceSupportCalls()))
			}
			det := c.Detect(context.Background())["devices"].([]map[string]any)
			if a, _ := det[0]["activity"].(string); !strings.HasPrefix(a, tt.note) {
				t.Errorf("Detect activity %q, want %q", a, tt.note)
			}
		})
	}
}

// Frees on every path: a failed allocation frees the sample allocated
// before it; a sample call that says GPM cannot work here frees both and
// turns GPM off; a passing error keeps them and the next intervals count.
func TestGPMErrors(t *testing.T) {
	t.Run("allocation fails", func(t *testing.T) {
		s := fakeServer(dgxh100.New(), 1)
		drv := newGPMDriver(t, s)
		alloc := s.GpmSampleAllocFunc
		s.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
			if drv.allocs == 1 {
				return nil, nvml.ERROR_MEMORY
			}
			return alloc()
		}
		c, log := gpmCollector(t, drv, Options{Lib: s})
		if drv.allocs != 1 || drv.liveCount() != 0 {
			t.Errorf("%d allocated, %d live after the second allocation failed", drv.allocs, drv.liveCount())
		}
		collect(t, c)
		drv.run(gpmSource{dev(s, 0), -1}, time.Second, busy)
		if p := profPoints(collect(t, c), "gpu_0_"); len(p) != 0 || len(dev(s, 0).GpmSampleGetCalls()) != 0 {
			t.Errorf("activity %v without samples", p)
		}
		det := c.Detect(context.Background())["devices"].([]map[string]any)
		if a, _ := det[0]["activity"].(string); !strings.HasPrefix(a, "GPM off: allocating samples") || !strings.Contains(log, "GPU activity (GPM) off") {
			t.Errorf("Detect activity %q; log:\n%s", a, log)
		}
	})

	t.Run("sample not supported", func(t *testing.T) {
		s := fakeServer(dgxh100.New(), 1)
		drv := newGPMDriver(t, s)
		c, _ := gpmCollector(t, drv, Options{Lib: s})
		collect(t, c)
		// A vGPU profile without the instance's whole memory, say.
		dev(s, 0).GpmSampleGetFunc = func(nvml.GpmSample) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
		drv.run(gpmSource{dev(s, 0), -1}, time.Second, busy)
		if p := profPoints(collect(t, c), "gpu_0_"); len(p) != 0 {
			t.Errorf("activity %v", p)
		}
		if drv.liveCount() != 0 || len(s.GpmSampleFreeCalls()) != 2 {
			t.Errorf("%d samples live, %d freed; want both freed when GPM turns off", drv.liveCount(), len(s.GpmSampleFreeCalls()))
		}
		collect(t, c)
		if n := len(dev(s, 0).GpmSampleGetCalls()); n != 2 {
			t.Errorf("sampled %d times; want no call once off", n)
		}
		det := c.Detect(context.Background())["devices"].([]map[string]any)
		if a := det[0]["activity"]; a != "GPM off: nvmlGpmSampleGet: ERROR_NOT_SUPPORTED" {
			t.Errorf("Detect activity %q", a)
		}
		if err := c.Close(); err != nil || len(s.GpmSampleFreeCalls()) != 2 {
			t.Errorf("Close: %v, %d frees; want no second free", err, len(s.GpmSampleFreeCalls()))
		}
	})

	t.Run("passing errors", func(t *testing.T) {
		s := fakeServer(dgxh100.New(), 1)
		drv := newGPMDriver(t, s)
		src := gpmSource{dev(s, 0), -1}
		c, _ := gpmCollector(t, drv, Options{Lib: s})
		collect(t, c)
		fill := dev(s, 0).GpmSampleGetFunc
		fail := true
		dev(s, 0).GpmSampleGetFunc = func(smp nvml.GpmSample) nvml.Return {
			if fail {
				return nvml.ERROR_UNKNOWN
			}
			return fill(smp)
		}
		drv.run(src, time.Second, map[nvml.GpmMetricId]float64{nvml.GPM_METRIC_SM_UTIL: 90})
		if _, err := collecttest.Collect(context.Background(), c); !errors.Is(err, nvml.ERROR_UNKNOWN) || !strings.Contains(err.Error(), "GPU 0: nvmlGpmSampleGet") {
			t.Errorf("Collect err = %v", err)
		}
		fail = false
		// The buffers no longer hold one interval: this sample starts one.
		drv.run(src, time.Second, map[nvml.GpmMetricId]float64{nvml.GPM_METRIC_SM_UTIL: 90})
		if p := profPoints(collect(t, c), "gpu_0_"); len(p) != 0 {
			t.Errorf("activity across a failed sample: %v", p)
		}
		drv.run(src, time.Second, map[nvml.GpmMetricId]float64{nvml.GPM_METRIC_SM_UTIL: 40})
		wantNear(t, collect(t, c), "gpu_0_prof_sm_active_ratio", 0.4)

		metricsGet := s.GpmMetricsGetFunc
		s.GpmMetricsGetFunc = func(*nvml.GpmMetricsGetType) nvml.Return { return nvml.ERROR_UNKNOWN }
		drv.run(src, time.Second, map[nvml.GpmMetricId]float64{nvml.GPM_METRIC_SM_UTIL: 10})
		if _, err := collecttest.Collect(context.Background(), c); !errors.Is(err, nvml.ERROR_UNKNOWN) {
			t.Errorf("Collect err = %v", err)
		}
		s.GpmMetricsGetFunc = metricsGet
		drv.run(src, time.Second, map[nvml.GpmMetricId]float64{nvml.GPM_METRIC_SM_UTIL: 20})
		wantNear(t, collect(t, c), "gpu_0_prof_sm_active_ratio", 0.2)
		if drv.allocs != 2 || drv.liveCount() != 2 {
			t.Errorf("%d allocated, %d live: passing errors must keep the two samples", drv.allocs, drv.liveCount())
		}
		if err := c.Close(); err != nil || drv.liveCount() != 0 {
			t.Errorf("Close: %v, %d samples live", err, drv.liveCount())
		}
	})
}

// Close while a GPM call hangs frees nothing under it (and leaves NVML
// loaded); no sample is used after Close.
func TestGPMCloseWhileHung(t *testing.T) {
	s := fakeServer(dgxh100.New(), 1)
	drv := newGPMDriver(t, s)
	c, _ := gpmCollector(t, drv, Options{Lib: s, CallTimeout: 20 * time.Millisecond})
	collect(t, c)
	release := make(chan struct{})
	fill := dev(s, 0).GpmSampleGetFunc
	dev(s, 0).GpmSampleGetFunc = func(smp nvml.GpmSample) nvml.Return { <-release; return fill(smp) }
	drv.run(gpmSource{dev(s, 0), -1}, time.Second, busy)
	if _, err := collecttest.Collect(context.Background(), c); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Collect err = %v, want ErrTimeout", err)
	}
	if err := c.Close(); !errors.Is(err, ErrStuck) {
		t.Errorf("Close err = %v, want ErrStuck", err)
	}
	close(release)
	if err := c.g.idle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(s.GpmSampleFreeCalls()); n != 0 {
		t.Errorf("%d samples freed under a hung call", n)
	}
	if _, err := collecttest.Collect(context.Background(), c); !errors.Is(err, ErrClosed) {
		t.Errorf("Collect after Close: %v", err)
	}
	if n := len(s.GpmMetricsGetCalls()); n != 0 {
		t.Errorf("metrics computed after Close: %d", n)
	}
}

// MIG: the job's instances from CUDA_VISIBLE_DEVICES (MIG- UUIDs), each
// sampled through its parent with its GPU instance ID, named by it; an
// instance of two compute instances read once; the parent's utilization
// said to be unavailable, and no whole-GPU activity (it would mix in other
// jobs' instances).
func TestMIGActivity(t *testing.T) {
	s := fakeServer(dgxh100.New(), 2)
	drv := newGPMDriver(t, s)
	d0 := dev(s, 0)
	d0.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	slots := map[int]*mock.Device{
		0: migSlice("MIG-aaaaaaaa-0000-0000-0000-000000000000", 1, 5000, nil),
		1: migSlice("MIG-bbbbbbbb-0000-0000-0000-000000000000", 5, 6000, nil),
		2: migSlice("MIG-cccccccc-0000-0000-0000-000000000000", 5, 6000, nil), // GI 5's second compute instance
		3: migSlice("MIG-dddddddd-0000-0000-0000-000000000000", 13, 7000, nil),
	}
	slots[2].GetComputeInstanceIdFunc = func() (int, nvml.Return) { return 1, nvml.SUCCESS }
	d0.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d0.GetMigDeviceHandleByIndexFunc = func(m int) (nvml.Device, nvml.Return) {
		if sl, ok := slots[m]; ok {
			return sl, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	cuda := "MIG-bbbbbbbb-0000-0000-0000-000000000000,MIG-cccccccc,MIG-dddddddd-0000-0000-0000-000000000000"
	c, _ := gpmCollector(t, drv, Options{Lib: s, MatchCUDAVisible: true, CUDAVisibleDevices: cuda})
	if drv.allocs != 4 {
		t.Errorf("%d samples allocated, want 2 for each of the 2 visible GPU instances", drv.allocs)
	}
	collect(t, c)
	drv.run(gpmSource{d0, 5}, time.Second, map[nvml.GpmMetricId]float64{nvml.GPM_METRIC_SM_UTIL: 80, nvml.GPM_METRIC_GRAPHICS_UTIL: 100})
	drv.run(gpmSource{d0, 13}, time.Second, map[nvml.GpmMetricId]float64{nvml.GPM_METRIC_SM_UTIL: 10})
	pts := collect(t, c)
	// Each ran for 1 s of the 2 s between the Collects.
	wantNear(t, pts, "gpu_0_mig_5_prof_sm_active_ratio", 0.4)
	wantNear(t, pts, "gpu_0_mig_5_prof_gr_engine_active_ratio", 0.5)
	wantNear(t, pts, "gpu_0_mig_13_prof_sm_active_ratio", 0.05)
	wantValue(t, pts, "gpu_0_mig_5_memory_used_megabytes", 6000, metrics.UnitMegabytes)
	wantValue(t, pts, "gpu_0_mig_13_memory_used_megabytes", 7000, metrics.UnitMegabytes)
	for _, absent := range []string{"gpu_0_mig_1_memory_used_megabytes", "gpu_0_utilization_percentage", "gpu_0_prof_sm_active_ratio"} {
		if p, ok := pts[absent]; ok {
			t.Errorf("%s = %v, want absent", absent, p.Value)
		}
	}
	if p := profPoints(pts, "gpu_1_"); len(p) != 0 {
		t.Errorf("GPU 1 is not in CUDA_VISIBLE_DEVICES: %v", p)
	}
	if n := len(d0.GpmSampleGetCalls()); n != 0 {
		t.Errorf("the MIG parent sampled whole %d times", n)
	}
	gis := map[int]int{}
	for _, call := range d0.GpmMigSampleGetCalls() {
		gis[call.N]++
	}
	if len(gis) != 2 || gis[5] != 2 || gis[13] != 2 {
		t.Errorf("nvmlGpmMigSampleGet per GPU instance: %v, want GI 5 and 13 twice each", gis)
	}
	if n := len(slots[2].GetMemoryInfo_v2Calls()); n != 0 {
		t.Errorf("GI 5's second compute instance read %d times", n)
	}
	if n := len(d0.GetUtilizationRatesCalls()); n != 0 {
		t.Errorf("utilization asked of a GPU in MIG mode %d times", n)
	}

	det := c.Detect(context.Background())["devices"].([]map[string]any)
	if u, _ := det[0]["utilization"].(string); !strings.HasPrefix(u, "not available in MIG mode") {
		t.Errorf("Detect utilization %q", u)
	}
	if a := det[0]["activity"]; a != "per MIG instance (gpu_N_mig_M_prof_…)" {
		t.Errorf("Detect activity %q", a)
	}
	ss := det[0]["mig_slices"].([]map[string]any)
	if len(ss) != 3 || ss[0]["gpu_instance"] != 5 || ss[0]["activity"] != "GPM on" || ss[1]["compute_instance"] != 1 || ss[1]["series"] == nil {
		t.Errorf("Detect mig_slices %v", ss)
	}
	tags := c.Tags()
	if tags["bridge.gpu.0.mig.5.uuid"] != "MIG-bbbbbbbb-0000-0000-0000-000000000000" || tags["bridge.gpu.0.mig.13.uuid"] == "" {
		t.Errorf("Tags %v", tags)
	}
	if err := c.Close(); err != nil || drv.liveCount() != 0 {
		t.Errorf("Close: %v, %d samples live", err, drv.liveCount())
	}
}

// gpu_N_energy_joules: the energy since start, from the first reading (at
// New) on; absent while the counter has not moved and where it is not
// supported; a counter that goes back is an interval not counted, and
// counts on from its new value.
func TestEnergy(t *testing.T) {
	t.Run("counter", func(t *testing.T) {
		s := fakeServer(dgxh100.New(), 1)
		readings := []uint64{9_000_000, 9_000_000, 9_002_500, 9_004_000, 1_500, 2_000}
		i := 0
		dev(s, 0).GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
			v := readings[min(i, len(readings)-1)]
			i++
			return v, nvml.SUCCESS
		}
		c, log := newCollector(t, Options{Lib: s})
		secondApart(c)
		if _, ok := collect(t, c)["gpu_0_energy_joules"]; ok {
			t.Error("energy reported while the counter has not moved from the baseline")
		}
		for _, want := range []float64{2.5, 4, 4, 4.5} {
			p := collect(t, c)["gpu_0_energy_joules"]
			if p.Desc == nil || !near(p.Value, want) || p.Desc.Of != metrics.GPUEnergy || p.Source != energyCall {
				t.Errorf("gpu_0_energy_joules = %+v, want %v J", p, want)
			}
		}
		if !strings.Contains(log.String(), "went back from 9004000 to 1500") {
			t.Errorf("reset not logged:\n%s", log)
		}
	})
	t.Run("not supported", func(t *testing.T) {
		s := fakeServer(dgxh100.New(), 1)
		dev(s, 0).GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		c, _ := newCollector(t, Options{Lib: s})
		for range 2 {
			if _, ok := collect(t, c)["gpu_0_energy_joules"]; ok {
				t.Error("energy without a counter")
			}
		}
		if n := len(dev(s, 0).GetTotalEnergyConsumptionCalls()); n != 1 {
			t.Errorf("counter asked %d times, want once", n)
		}
		det := c.Detect(context.Background())["devices"].([]map[string]any)
		if e, _ := det[0]["energy"].(string); !strings.HasPrefix(e, "not supported") {
			t.Errorf("Detect energy %q", e)
		}
	})
	t.Run("no baseline at start", func(t *testing.T) {
		s := fakeServer(dgxh100.New(), 1)
		n := 0
		dev(s, 0).GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
			n++
			if n == 1 {
				return 0, nvml.ERROR_UNKNOWN
			}
			return uint64(1000 * n), nvml.SUCCESS
		}
		c, _ := newCollector(t, Options{Lib: s})
		secondApart(c)
		if _, ok := collect(t, c)["gpu_0_energy_joules"]; ok {
			t.Error("energy from the first reading, taken as the baseline")
		}
		wantNear(t, collect(t, c), "gpu_0_energy_joules", 1)
	})
}

// Many GPUs: one Collect's cost is the same GPM calls per GPU (one sample,
// one metrics call), however long the job runs.
func TestGPMCallsPerCollect(t *testing.T) {
	s := fakeServer(dgxh100.New(), 8)
	drv := newGPMDriver(t, s)
	c, _ := gpmCollector(t, drv, Options{Lib: s})
	for i := range 5 {
		for j := range 8 {
			drv.run(gpmSource{dev(s, j), -1}, time.Second, busy)
		}
		pts := collect(t, c)
		if want := map[bool]int{true: 0, false: 8 * len(busySeries)}[i == 0]; len(profPoints(pts, "gpu_")) != want {
			t.Errorf("Collect %d: %d activity series, want %d", i, len(profPoints(pts, "gpu_")), want)
		}
	}
	if drv.allocs != 16 || len(s.GpmMetricsGetCalls()) != 4*8 {
		t.Errorf("%d allocations, %d metrics calls", drv.allocs, len(s.GpmMetricsGetCalls()))
	}
	for j := range 8 {
		if n := len(dev(s, j).GpmSampleGetCalls()); n != 5 {
			t.Errorf("GPU %d sampled %d times in 5 Collects", j, n)
		}
	}
}
