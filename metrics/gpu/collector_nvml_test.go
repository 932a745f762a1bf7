//go:build linux && cgo

package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/metrics"
)

func testLog() (*slog.Logger, *syncbuf.Buffer) {
	b := &syncbuf.Buffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// readings sets the funcs the dgx servers leave unset, with values derived
// from the device index so that each GPU's series can be told apart.
func readings(d *server.Device) {
	i := uint32(d.Index)
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{Gpu: 50 + i, Memory: 20}, nvml.SUCCESS
	}
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		return nvml.Memory_v2{Total: 80e9, Reserved: 1e9, Used: 40e9 + uint64(i)*1e9, Free: 39e9}, nvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 350_000 + i*1000, nvml.SUCCESS }
	d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700_000, nvml.SUCCESS }
	d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
		if s != nvml.TEMPERATURE_GPU {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return 60 + i, nvml.SUCCESS
	}
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		switch c {
		case nvml.CLOCK_SM:
			return 1980, nvml.SUCCESS
		case nvml.CLOCK_MEM:
			return 2619, nvml.SUCCESS
		}
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) {
		return nvml.ClocksEventReasonSwPowerCap | nvml.ClocksThrottleReasonHwThermalSlowdown, nvml.SUCCESS
	}
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
		if c != nvml.VOLATILE_ECC {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if t == nvml.MEMORY_ERROR_TYPE_CORRECTED {
			return 3, nvml.SUCCESS
		}
		return 0, nvml.SUCCESS
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 1, 0, false, false, nvml.SUCCESS }
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return 0, nvml.SUCCESS }
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	// The energy counter gains 1 J + i mJ a reading (the first is the baseline).
	var mJ uint64 = 5_000_000
	d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { mJ += 1000 + uint64(i); return mJ, nvml.SUCCESS }
	// GPM is off unless a test turns it on (gpm_test.go).
	d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{Version: 1}, nvml.SUCCESS }
}

// fakeServer is a dgx server with n of its GPUs and every reading set.
func fakeServer(s *server.Server, n int) *server.Server {
	s.Devices = s.Devices[:n]
	for _, d := range s.Devices {
		readings(d.(*server.Device))
	}
	return s
}

func dev(s *server.Server, i int) *server.Device { return s.Devices[i].(*server.Device) }

func newCollector(t *testing.T, opts Options) (*Collector, *syncbuf.Buffer) {
	t.Helper()
	log, buf := testLog()
	opts.Log = log
	c, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, buf
}

// secondApart makes c's clock read one second later at each call, from a
// second after now: the fake counters move at a GPU's pace between reads
// that are microseconds apart in the test.
func secondApart(c *Collector) {
	var mu sync.Mutex
	at := time.Now()
	c.now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		at = at.Add(time.Second)
		return at
	}
}

// explained is a point and where it came from.
type explained struct {
	metrics.Point
	Source string
}

// collect runs Collect, asking for each point's source, and indexes the
// points by name.
func collect(t *testing.T, c *Collector) map[string]explained {
	t.Helper()
	b := metrics.Batch{Explain: true}
	if err := c.Collect(context.Background(), &b); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return index(t, &b)
}

func byName(t *testing.T, pts []metrics.Point) map[string]explained {
	t.Helper()
	return index(t, &metrics.Batch{Points: pts})
}

// index indexes b's points by name, checking that each is a series the
// registration declares (a per-GPU one by its template) and comes once.
func index(t *testing.T, b *metrics.Batch) map[string]explained {
	t.Helper()
	m := map[string]explained{}
	for i, p := range b.Points {
		if _, dup := m[p.Name()]; dup {
			t.Errorf("point %s twice", p.Name())
		}
		if d := p.Desc; !slices.Contains(Series, d) && (d.Of == nil || !slices.Contains(Series, d.Of)) {
			t.Errorf("%s is not among Series", p.Name())
		}
		e := explained{Point: p}
		if b.Explain {
			e.Source = b.Sources[i]
		}
		m[p.Name()] = e
	}
	return m
}

func wantValue(t *testing.T, pts map[string]explained, name string, want float64, unit metrics.Unit) {
	t.Helper()
	p, ok := pts[name]
	if !ok {
		t.Errorf("%s missing", name)
		return
	}
	if p.Value != want || p.Desc.Unit != unit {
		t.Errorf("%s = %v %s, want %v %s", name, p.Value, p.Desc.Unit, want, unit)
	}
}

func TestSeveralDevices(t *testing.T) {
	s := fakeServer(dgxh100.New(), 3)
	c, _ := newCollector(t, Options{Lib: s})
	secondApart(c)
	pts := collect(t, c)
	for i := 0; i < 3; i++ {
		p := func(n string) string { return fmt.Sprintf("gpu_%d_%s", i, n) }
		fi := float64(i)
		wantValue(t, pts, p("utilization_percentage"), 50+fi, metrics.UnitPercentage)
		wantValue(t, pts, p("memory_controller_utilization_percentage"), 20, metrics.UnitPercentage)
		wantValue(t, pts, p("memory_used_megabytes"), 40_000+fi*1000, metrics.UnitMegabytes)
		wantValue(t, pts, p("memory_total_megabytes"), 80_000, metrics.UnitMegabytes)
		wantValue(t, pts, p("memory_reserved_megabytes"), 1000, metrics.UnitMegabytes)
		wantValue(t, pts, p("memory_usage_percentage"), 100*(40+fi)/80, metrics.UnitPercentage)
		wantValue(t, pts, p("power_usage_watts"), 350+fi, metrics.UnitWatts)
		wantValue(t, pts, p("power_limit_watts"), 700, metrics.UnitWatts)
		wantValue(t, pts, p("power_usage_percentage"), 100*(350+fi)/700, metrics.UnitPercentage)
		wantValue(t, pts, p("temperature_celsius"), 60+fi, metrics.UnitCelsius)
		wantValue(t, pts, p("sm_clock_mhz"), 1980, metrics.UnitMHz)
		wantValue(t, pts, p("memory_clock_mhz"), 2619, metrics.UnitMHz)
		wantValue(t, pts, p("throttle_reasons_count"), 2, metrics.UnitCount)
		wantValue(t, pts, p("throttle_sw_power_cap"), 1, metrics.UnitCount)
		wantValue(t, pts, p("throttle_hw_thermal"), 1, metrics.UnitCount)
		wantValue(t, pts, p("throttle_hw_slowdown"), 0, metrics.UnitCount)
		wantValue(t, pts, p("ecc_corrected_errors_count"), 3, metrics.UnitCount)
		wantValue(t, pts, p("ecc_uncorrected_errors_count"), 0, metrics.UnitCount)
		wantValue(t, pts, p("remapped_rows_corrected_count"), 1, metrics.UnitCount)
		wantValue(t, pts, p("remapped_rows_pending"), 0, metrics.UnitCount)
		wantValue(t, pts, p("energy_joules"), (1000+fi)/1000, metrics.UnitJoules)
		if _, ok := pts[p("xid_errors_count")]; ok {
			t.Errorf("%s present on a GPU whose Xid events are not watched", p("xid_errors_count"))
		}
	}
	for _, p := range pts {
		if p.Desc.Scope != metrics.ScopeGPU || !strings.HasPrefix(p.Name(), "gpu_") || p.Source == "" || p.Desc.Of == nil {
			t.Errorf("point %+v: want a gpu scope per-GPU series, a gpu_ name, a source", p)
		}
	}
	if len(pts) != 3*28 {
		t.Errorf("%d points, want 28 per GPU", len(pts))
	}

	det := c.Detect(context.Background())
	if det["status"] != "on" || det["driver"] != "550.54.15" || det["cuda_driver"] != "12.4" {
		t.Errorf("Detect = %v", det)
	}
	devs := det["devices"].([]map[string]any)
	if len(devs) != 3 || devs[2]["uuid"] != dev(s, 2).UUID || devs[2]["name"] != "NVIDIA H100 80GB HBM3" || devs[2]["mig"] != false {
		t.Errorf("Detect devices = %v", devs)
	}
	tags := c.Tags()
	want := map[string]string{
		"bridge.gpu.status": "on", "bridge.gpu.count": "3", "bridge.gpu.driver": "550.54.15", "bridge.gpu.cuda_driver": "12.4",
	}
	for i := 0; i < 3; i++ {
		want[fmt.Sprintf("bridge.gpu.%d.uuid", i)] = dev(s, i).UUID
		want[fmt.Sprintf("bridge.gpu.%d.name", i)] = "NVIDIA H100 80GB HBM3"
	}
	if !reflect.DeepEqual(tags, want) {
		t.Errorf("Tags = %v\nwant %v", tags, want)
	}
}

// An older driver lacks the _v2 memory call and the clocks event reasons:
// looked up first, the older calls are used and the newer never called.
func TestOlderDriverSymbols(t *testing.T) {
	s := fakeServer(dgxh200.New(), 2)
	s.LookupSymbolFunc = func(name string) error {
		if name == "nvmlDeviceGetMemoryInfo_v2" || name == "nvmlDeviceGetCurrentClocksEventReasons" {
			return errors.New("undefined symbol: " + name)
		}
		return nil
	}
	for _, d := range s.Devices {
		d := d.(*server.Device)
		d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { t.Error("GetMemoryInfo_v2 called"); return nvml.Memory_v2{}, 0 }
		d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { t.Error("GetCurrentClocksEventReasons called"); return 0, 0 }
		d.GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksThrottleReasonHwSlowdown, nvml.SUCCESS }
		d.MemoryInfo.Used = 70e9 // the server takes Total from its config, in MiB
	}
	c, _ := newCollector(t, Options{Lib: s})
	pts := collect(t, c)
	total := float64(dev(s, 1).Config.MemoryMB*1024*1024) / 1e6
	wantValue(t, pts, "gpu_1_memory_used_megabytes", 70_000, metrics.UnitMegabytes)
	wantValue(t, pts, "gpu_1_memory_total_megabytes", total, metrics.UnitMegabytes)
	wantValue(t, pts, "gpu_1_throttle_hw_slowdown", 1, metrics.UnitCount)
	wantValue(t, pts, "gpu_1_throttle_reasons_count", 1, metrics.UnitCount)
	if _, ok := pts["gpu_1_memory_reserved_megabytes"]; ok {
		t.Error("reserved memory reported without the _v2 call")
	}
	if pts["gpu_0_memory_used_megabytes"].Source != "nvmlDeviceGetMemoryInfo" {
		t.Errorf("source %q", pts["gpu_0_memory_used_megabytes"].Source)
	}
}

// A device that has the _v2 symbol but does not support the call (some vGPU
// profiles) falls back to the v1 call.
func TestMemoryV2Unsupported(t *testing.T) {
	s := fakeServer(dgxh100.New(), 1)
	d := dev(s, 0)
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED }
	d.MemoryInfo.Used = 8e9
	c, _ := newCollector(t, Options{Lib: s})
	for range 2 {
		pts := collect(t, c)
		wantValue(t, pts, "gpu_0_memory_used_megabytes", 8000, metrics.UnitMegabytes)
		if src := pts["gpu_0_memory_used_megabytes"].Source; src != "nvmlDeviceGetMemoryInfo" {
			t.Errorf("source %q", src)
		}
	}
	if n := len(d.GetMemoryInfo_v2Calls()); n != 1 {
		t.Errorf("unsupported _v2 call asked %d times", n)
	}
}

func migSlice(uuid string, gi int, usedMB uint64, procs []nvml.ProcessInfo) *mock.Device {
	return &mock.Device{
		GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return gi, nvml.SUCCESS },
		GetComputeInstanceIdFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS },
		GetNameFunc:              func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3 MIG 3g.40gb", nvml.SUCCESS },
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: 40e9, Used: usedMB * 1e6}, nvml.SUCCESS
		},
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS },
	}
}

func TestMIG(t *testing.T) {
	s := fakeServer(dgxh100.New(), 2)
	d0 := dev(s, 0)
	d0.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	d0.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
	d0.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		t.Error("the parent's process list was read on a MIG GPU")
		return nil, nvml.SUCCESS
	}
	slices := map[int]*mock.Device{
		// MIG device slots 0 and 3 hold GPU instances 2 and 9: series are
		// named by the GPU instance.
		0: migSlice("MIG-11111111-0000-0000-0000-000000000000", 2, 10_000, []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 9e9}}),
		3: migSlice("MIG-33333333-0000-0000-0000-000000000000", 9, 20_000, []nvml.ProcessInfo{{Pid: 555, UsedGpuMemory: 19e9}}),
	}
	d0.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d0.GetMigDeviceHandleByIndexFunc = func(m int) (nvml.Device, nvml.Return) {
		if m == 5 {
			return nil, nvml.ERROR_NO_PERMISSION
		}
		if sl, ok := slices[m]; ok {
			return sl, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	c, _ := newCollector(t, Options{Lib: s, ProcessTree: &fakeTree{nspids: [][]int{{4242}}}})
	for range 2 {
		pts := collect(t, c)
		wantValue(t, pts, "gpu_0_mig_2_memory_used_megabytes", 10_000, metrics.UnitMegabytes)
		wantValue(t, pts, "gpu_0_mig_2_memory_total_megabytes", 40_000, metrics.UnitMegabytes)
		wantValue(t, pts, "gpu_0_mig_2_memory_usage_percentage", 25, metrics.UnitPercentage)
		wantValue(t, pts, "gpu_0_mig_9_memory_used_megabytes", 20_000, metrics.UnitMegabytes)
		wantValue(t, pts, "gpu_0_power_usage_watts", 350, metrics.UnitWatts)
		wantValue(t, pts, "gpu_1_utilization_percentage", 51, metrics.UnitPercentage)
		wantValue(t, pts, "process_gpu_memory_megabytes", 9000, metrics.UnitMegabytes)
		wantValue(t, pts, "process_gpu_unmatched_processes_count", 1, metrics.UnitCount)
		if _, ok := pts["gpu_0_utilization_percentage"]; ok {
			t.Error("utilization reported for a MIG GPU")
		}
		for name := range pts {
			if strings.HasPrefix(name, "gpu_0_mig_") && !strings.HasPrefix(name, "gpu_0_mig_2_") && !strings.HasPrefix(name, "gpu_0_mig_9_") {
				t.Errorf("%s: a slice without permission was read, or a slice named by its MIG device slot", name)
			}
		}
	}
	if n := len(d0.GetUtilizationRatesCalls()); n != 0 {
		t.Errorf("utilization asked %d times of a GPU in MIG mode, where NVML has none", n)
	}
	det := c.Detect(context.Background())
	d := det["devices"].([]map[string]any)[0]
	ss := d["mig_slices"].([]map[string]any)
	if d["mig"] != true || len(ss) != 2 || ss[1]["index"] != 3 || ss[1]["gpu_instance"] != 9 || ss[1]["uuid"] != "MIG-33333333-0000-0000-0000-000000000000" {
		t.Errorf("Detect device 0 = %v", d)
	}
	if u, _ := d["utilization"].(string); !strings.HasPrefix(u, "not available in MIG mode") {
		t.Errorf("Detect device 0 utilization = %q, want it to say why there is none", u)
	}
	sk := det["skipped"].([]skippedDevice)
	if len(sk) != 1 || sk[0].Index != 0 || sk[0].Slice == nil || *sk[0].Slice != 5 || !strings.Contains(sk[0].Reason, "no permission") {
		t.Errorf("skipped = %+v", sk)
	}
	if tags := c.Tags(); tags["bridge.gpu.0.mig.9.uuid"] != "MIG-33333333-0000-0000-0000-000000000000" {
		t.Errorf("Tags = %v", tags)
	}

	// Selecting one slice keeps its parent's device-wide series and that slice.
	c2, _ := newCollector(t, Options{Lib: s, Select: []string{"MIG-33333333-0000-0000-0000-000000000000"}})
	pts := collect(t, c2)
	if _, ok := pts["gpu_0_mig_2_memory_used_megabytes"]; ok {
		t.Error("an unselected slice was read")
	}
	wantValue(t, pts, "gpu_0_mig_9_memory_used_megabytes", 20_000, metrics.UnitMegabytes)
	if _, ok := pts["gpu_1_power_usage_watts"]; ok {
		t.Error("an unselected GPU was read")
	}
}

func TestNoPermissionDevice(t *testing.T) {
	s := fakeServer(dgxh100.New(), 3)
	byIndex := s.DeviceGetHandleByIndexFunc
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 1 {
			return nil, nvml.ERROR_NO_PERMISSION
		}
		return byIndex(i)
	}
	c, log := newCollector(t, Options{Lib: s})
	pts := collect(t, c)
	if _, ok := pts["gpu_1_utilization_percentage"]; ok {
		t.Error("a GPU without permission was read")
	}
	wantValue(t, pts, "gpu_0_utilization_percentage", 50, metrics.UnitPercentage)
	wantValue(t, pts, "gpu_2_utilization_percentage", 52, metrics.UnitPercentage)
	if n := len(dev(s, 1).GetUtilizationRatesCalls()); n != 0 {
		t.Errorf("GPU 1 was asked %d times", n)
	}
	sk := c.Detect(context.Background())["skipped"].([]skippedDevice)
	if len(sk) != 1 || sk[0].Index != 1 || !strings.Contains(sk[0].Reason, "ERROR_NO_PERMISSION") {
		t.Errorf("skipped = %+v", sk)
	}
	if !strings.Contains(log.String(), `msg="GPU skipped" source=gpu gpu=1`) {
		t.Errorf("log:\n%s", log)
	}
}

// callsMade lists the mock methods that were called (moq records each call),
// except those allowed.
func callsMade(m any, allowed ...string) []string {
	v := reflect.ValueOf(m)
	var out []string
	for i := 0; i < v.NumMethod(); i++ {
		name := v.Type().Method(i).Name
		meth := v.Method(i)
		if !strings.HasSuffix(name, "Calls") || meth.Type().NumIn() != 0 || meth.Type().NumOut() != 1 {
			continue
		}
		if n := meth.Call(nil)[0].Len(); n > 0 && !contains(allowed, name) {
			out = append(out, fmt.Sprintf("%s (%d)", strings.TrimSuffix(name, "Calls"), n))
		}
	}
	return out
}

// trapAll sets every unset func of a moq mock to one that fails the test: an
// unset func would panic, and the collector recovers panics.
func trapAll(t *testing.T, m any) {
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		f, name := v.Field(i), v.Type().Field(i).Name
		if f.Kind() != reflect.Func || !f.IsNil() || !f.CanSet() {
			continue
		}
		ft := f.Type()
		f.Set(reflect.MakeFunc(ft, func([]reflect.Value) []reflect.Value {
			t.Errorf("NVML call %s after a failed Init", strings.TrimSuffix(name, "Func"))
			out := make([]reflect.Value, ft.NumOut())
			for j := range out {
				out[j] = reflect.Zero(ft.Out(j))
			}
			return out
		}))
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// Without libnvidia-ml.so.1 Init fails, and any further call would kill the
// process: none may happen, whatever is asked of the collector.
func TestMissingLibrary(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	trapAll(t, lib)
	c, log := newCollector(t, Options{Lib: lib, ProcessTree: &fakeTree{nspids: [][]int{{1}}}})
	pts, err := collecttest.Collect(context.Background(), c)
	if len(pts) != 0 || err != nil {
		t.Errorf("Collect = %v, %v; want nothing", pts, err)
	}
	det := c.Detect(context.Background())
	if st, _ := det["status"].(string); !strings.HasPrefix(st, "off: NVML library libnvidia-ml.so.1 not found") {
		t.Errorf("Detect = %v", det)
	}
	if tags := c.Tags(); !strings.HasPrefix(tags["bridge.gpu.status"], "off: ") || len(tags) != 1 {
		t.Errorf("Tags = %v", tags)
	}
	if len(c.XidEvents()) != 0 {
		t.Error("Xid events without NVML")
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if made := callsMade(lib, "InitCalls"); len(made) > 0 {
		t.Errorf("NVML calls after a failed Init: %v", made)
	}
	if n := len(lib.InitCalls()); n != 1 {
		t.Errorf("Init called %d times", n)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	// Every CPU-only job sees this: a debug line, not an info one.
	if len(lines) != 1 || !strings.Contains(lines[0], "level=DEBUG") || !strings.Contains(lines[0], "GPU metrics off") {
		t.Errorf("want one debug line, log:\n%s", log)
	}
}

func TestNoGPU(t *testing.T) {
	s := fakeServer(dgxh100.New(), 0)
	c, log := newCollector(t, Options{Lib: s})
	// A CPU-only container on a GPU node: a debug line, as without a driver.
	if l := log.String(); !strings.Contains(l, "level=DEBUG") || !strings.Contains(l, "GPU metrics off") || strings.Contains(l, "level=INFO") {
		t.Errorf("want one debug line, log:\n%s", l)
	}
	if pts := collect(t, c); len(pts) != 0 {
		t.Errorf("points without a GPU: %v", pts)
	}
	if st := c.Detect(context.Background())["status"]; !strings.HasPrefix(st.(string), "off: NVML sees no GPU") {
		t.Errorf("status = %v", st)
	}
	_ = c.Close()
	if n := len(s.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times after a successful Init, want once", n)
	}
}

func TestProcesses(t *testing.T) {
	tests := []struct {
		name      string
		procs     [][]nvml.ProcessInfo // per GPU
		memory    float64              // -1: no process_gpu_memory_megabytes
		matched   float64
		unmatched float64
		note      string
		holders   []int // noted on the tree: the trainers
	}{
		{"PIDs of bridge's namespace", [][]nvml.ProcessInfo{{{Pid: 4242, UsedGpuMemory: 1e9}}, {{Pid: 4243, UsedGpuMemory: 5e8}}},
			1500, 2, 0, "matched 2 of 2 GPU processes", []int{4242, 4243}},
		{"inner-namespace PID mapped by NSpid", [][]nvml.ProcessInfo{{{Pid: 7, UsedGpuMemory: 2e9}, {Pid: 555, UsedGpuMemory: 3e9}}, nil},
			2000, 1, 1, "1 by an inner-namespace PID", []int{4243}},
		{"host PIDs a container cannot map", [][]nvml.ProcessInfo{{{Pid: 98765, UsedGpuMemory: 2e9}}, {{Pid: 98766, UsedGpuMemory: 1e9}}},
			-1, 0, 2, "unmatched: NVML lists 2 GPU processes", []int{}},
		{"no GPU process yet", [][]nvml.ProcessInfo{nil, nil}, 0, 0, 0, "no GPU processes yet", []int{}},
		{"no memory figure", [][]nvml.ProcessInfo{{{Pid: 4242, UsedGpuMemory: noValue}}, nil}, -1, 1, 0, "matched 1 of 1", []int{4242}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeServer(dgxh100.New(), 2)
			for i, ps := range tt.procs {
				dev(s, i).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return ps, nvml.SUCCESS }
			}
			tree := &fakeTree{nspids: [][]int{{4242}, {4243, 7}}}
			c, log := newCollector(t, Options{Lib: s, ProcessTree: tree})
			if note := c.Detect(context.Background())["process_pids"].(string); !strings.Contains(note, tt.note) {
				t.Errorf("Detect process_pids = %q, want %q", note, tt.note)
			}
			pts := collect(t, c)
			if tt.memory >= 0 {
				wantValue(t, pts, "process_gpu_memory_megabytes", tt.memory, metrics.UnitMegabytes)
			} else if p, ok := pts["process_gpu_memory_megabytes"]; ok {
				t.Errorf("process_gpu_memory_megabytes = %v, want none", p.Value)
			}
			wantValue(t, pts, "process_gpu_processes_count", tt.matched, metrics.UnitCount)
			wantValue(t, pts, "process_gpu_unmatched_processes_count", tt.unmatched, metrics.UnitCount)
			if got := tree.Holders(); !slices.Equal(got, tt.holders) || got == nil {
				t.Errorf("GPU holders noted %#v, want %v", got, tt.holders)
			}
			if pts["process_gpu_processes_count"].Desc != metrics.ProcessGPUProcesses {
				t.Errorf("desc %+v", pts["process_gpu_processes_count"].Desc)
			}
			if unmatched := strings.Count(log.String(), "not matched to the child's tree"); unmatched != map[bool]int{true: 1}[tt.memory < 0 && tt.matched == 0] {
				t.Errorf("unmatched logged %d times; log:\n%s", unmatched, log)
			}
		})
	}
}

// xidSet is an event set whose Wait delivers queued events, then blocks for
// the wait's timeout. delivered closes when Wait is entered after the first
// event: the watcher has recorded it by then.
type xidSet struct {
	mock.EventSet
	events    chan nvml.EventData
	delivered chan struct{}
	once      sync.Once
	sent      bool
}

func newXidSet(evs ...nvml.EventData) *xidSet {
	x := &xidSet{events: make(chan nvml.EventData, len(evs)), delivered: make(chan struct{})}
	for _, e := range evs {
		x.events <- e
	}
	x.WaitFunc = func(ms uint32) (nvml.EventData, nvml.Return) {
		if x.sent && len(x.events) == 0 {
			x.once.Do(func() { close(x.delivered) })
		}
		select {
		case e := <-x.events:
			x.sent = true
			return e, nvml.SUCCESS
		case <-time.After(time.Duration(ms) * time.Millisecond):
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
	x.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
	return x
}

func TestXidEvent(t *testing.T) {
	s := fakeServer(dgxh100.New(), 2)
	d0 := dev(s, 0)
	d0.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
	}
	d0.RegisterEventsFunc = func(types uint64, _ nvml.EventSet) nvml.Return {
		if types != nvml.EventTypeXidCriticalError {
			t.Errorf("registered %#x", types)
		}
		return nvml.SUCCESS
	}
	dev(s, 1).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return {
		t.Error("events registered on a GPU that does not support them")
		return nvml.ERROR_NOT_SUPPORTED
	}
	set := newXidSet(nvml.EventData{Device: d0, EventType: nvml.EventTypeXidCriticalError, EventData: 79,
		GpuInstanceId: noInstance, ComputeInstanceId: noInstance})
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }

	c, log := newCollector(t, Options{Lib: s})
	<-set.delivered
	evs := c.XidEvents()
	if len(evs) != 1 || evs[0].GPU != 0 || evs[0].UUID != d0.UUID || evs[0].Xid != 79 || evs[0].Slice != nil {
		t.Fatalf("XidEvents = %+v", evs)
	}
	pts := collect(t, c)
	wantValue(t, pts, "gpu_0_xid_errors_count", 1, metrics.UnitCount)
	if _, ok := pts["gpu_1_xid_errors_count"]; ok {
		t.Error("gpu_1_xid_errors_count without watching GPU 1")
	}
	det := c.Detect(context.Background())["devices"].([]map[string]any)
	if det[0]["xid_events"] != "watched" || det[1]["xid_events"] != "not supported" {
		t.Errorf("Detect devices = %v", det)
	}
	if !strings.Contains(log.String(), "GPU Xid critical error") {
		t.Errorf("log:\n%s", log)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if len(set.FreeCalls()) != 1 || len(s.ShutdownCalls()) != 1 {
		t.Errorf("Free %d, Shutdown %d; want once each", len(set.FreeCalls()), len(s.ShutdownCalls()))
	}
}

// A hung NVML call: Collect returns at the timeout, the next Collect makes
// no call at all, and readings resume once the call returns.
func TestHungCall(t *testing.T) {
	s := fakeServer(dgxh100.New(), 2)
	release := make(chan struct{})
	d0 := dev(s, 0)
	d0.GetPowerUsageFunc = func() (uint32, nvml.Return) {
		if len(d0.GetPowerUsageCalls()) == 1 {
			<-release
		}
		return 350_000, nvml.SUCCESS
	}
	c, _ := newCollector(t, Options{Lib: s, CallTimeout: 20 * time.Millisecond})

	pts, err := collecttest.Collect(context.Background(), c)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Collect err = %v, want ErrTimeout", err)
	}
	if _, ok := byName(t, pts)["gpu_1_utilization_percentage"]; ok {
		t.Error("GPU 1 read while GPU 0 hung")
	}
	util1 := len(dev(s, 1).GetUtilizationRatesCalls())
	pts, err = collecttest.Collect(context.Background(), c)
	if !errors.Is(err, ErrStuck) || len(pts) != 0 {
		t.Fatalf("second Collect = %d points, %v; want none and ErrStuck", len(pts), err)
	}
	if n := len(d0.GetPowerUsageCalls()); n != 1 || len(dev(s, 1).GetUtilizationRatesCalls()) != util1 {
		t.Errorf("calls started while one hung: GetPowerUsage %d", n)
	}
	if st, _ := c.Detect(context.Background())["stuck"].(string); !strings.HasPrefix(st, "nvmlDeviceGetPowerUsage has not returned") {
		t.Errorf("Detect stuck = %q", st)
	}

	close(release)
	if err := c.g.idle(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := collect(t, c)
	wantValue(t, after, "gpu_0_power_usage_watts", 350, metrics.UnitWatts)
	wantValue(t, after, "gpu_1_utilization_percentage", 51, metrics.UnitPercentage)
}

// Close while a call hangs leaves NVML loaded rather than shut it down under
// the running call.
func TestCloseWhileHung(t *testing.T) {
	s := fakeServer(dgxh100.New(), 1)
	release := make(chan struct{})
	defer close(release)
	dev(s, 0).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { <-release; return nvml.Utilization{}, nvml.SUCCESS }
	s.ShutdownFunc = func() nvml.Return { t.Error("Shutdown under a hung call"); return nvml.SUCCESS }
	c, _ := newCollector(t, Options{Lib: s, CallTimeout: 20 * time.Millisecond})
	if _, err := collecttest.Collect(context.Background(), c); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Collect err = %v", err)
	}
	if err := c.Close(); !errors.Is(err, ErrStuck) {
		t.Errorf("Close err = %v, want ErrStuck", err)
	}
}

func TestSelection(t *testing.T) {
	s := fakeServer(dgxh100.New(), 8)
	tests := []struct {
		name string
		opts Options
		want []int
	}{
		{"by index and UUID", Options{Select: []string{"1", dev(s, 3).UUID}}, []int{1, 3}},
		{"CUDA_VISIBLE_DEVICES by UUID", Options{MatchCUDAVisible: true,
			CUDAVisibleDevices: dev(s, 5).UUID[:12] + "," + dev(s, 6).UUID}, []int{5, 6}},
		{"CUDA_VISIBLE_DEVICES with indexes keeps all", Options{MatchCUDAVisible: true, CUDAVisibleDevices: "0"}, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"both", Options{Select: []string{"5"}, MatchCUDAVisible: true, CUDAVisibleDevices: dev(s, 5).UUID + "," + dev(s, 6).UUID}, []int{5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Lib = s
			c, _ := newCollector(t, tt.opts)
			pts := collect(t, c)
			var got []int
			for i := 0; i < 8; i++ {
				if _, ok := pts[fmt.Sprintf("gpu_%d_utilization_percentage", i)]; ok {
					got = append(got, i)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("collected GPUs %v, want %v", got, tt.want)
			}
			if tags := c.Tags(); tags["bridge.gpu.count"] != fmt.Sprint(len(tt.want)) {
				t.Errorf("Tags = %v", tags)
			}
		})
	}

	c, _ := newCollector(t, Options{Lib: s, Select: []string{"1", dev(s, 3).UUID}})
	if got, want := c.Indexes(), map[string]int{dev(s, 1).UUID: 1, dev(s, 3).UUID: 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("Indexes() = %v, want the selected GPUs %v", got, want)
	}

	c, _ = newCollector(t, Options{Lib: s, Select: []string{"9"}})
	if c.Indexes() != nil {
		t.Errorf("Indexes() of a collector that is off = %v, want nil", c.Indexes())
	}
	if st := c.Detect(context.Background())["status"].(string); st != "off: no GPU selected (NVML sees 8, 8 usable)" {
		t.Errorf("status %q", st)
	}
	if _, err := New(Options{Lib: s, Select: []string{"cuda:0"}}); err == nil {
		t.Error("New accepted a malformed selection")
	}
}

// After Close no NVML call starts, even from a Collect that was still running.
func TestNoCallAfterClose(t *testing.T) {
	s := fakeServer(dgxh100.New(), 1)
	c, _ := newCollector(t, Options{Lib: s})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	before := len(dev(s, 0).GetUtilizationRatesCalls())
	_, err := collecttest.Collect(context.Background(), c)
	if !errors.Is(err, ErrClosed) || len(dev(s, 0).GetUtilizationRatesCalls()) != before {
		t.Errorf("Collect after Close: %v", err)
	}
}

// The system library: on a machine without the driver Init must fail cleanly
// and nothing else be called (a call would kill the test binary); with a
// driver, one sample must be read without error.
func TestSystemLibrary(t *testing.T) {
	c, log := newCollector(t, Options{ProcessTree: &fakeTree{nspids: [][]int{{1}}}})
	det := c.Detect(context.Background())
	st, _ := det["status"].(string)
	t.Logf("system NVML: %v", det)
	if st != "on" {
		if !strings.HasPrefix(st, "off: ") || strings.Count(log.String(), "GPU metrics off") != 1 {
			t.Fatalf("status %q, log:\n%s", st, log)
		}
		if pts, err := collecttest.Collect(context.Background(), c); len(pts) != 0 || err != nil {
			t.Errorf("Collect while off = %v, %v", pts, err)
		}
		return
	}
	pts, err := collecttest.Collect(context.Background(), c)
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	if _, ok := byName(t, pts)["gpu_"+fmt.Sprint(det["devices"].([]map[string]any)[0]["index"])+"_memory_total_megabytes"]; !ok {
		t.Errorf("no memory total for the first GPU: %v", pts)
	}
}

// Before the child starts (or after it exits) there is no tree: other jobs'
// GPU processes are not reported as unmatched.
func TestProcessesWithoutChild(t *testing.T) {
	s := fakeServer(dgxh100.New(), 1)
	dev(s, 0).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 555, UsedGpuMemory: 1e9}}, nvml.SUCCESS
	}
	c, log := newCollector(t, Options{Lib: s, ProcessTree: &fakeTree{}})
	pts := collect(t, c)
	for name := range pts {
		if strings.HasPrefix(name, "process_") {
			t.Errorf("%s without a child", name)
		}
	}
	if strings.Contains(log.String(), "not matched") {
		t.Errorf("log:\n%s", log)
	}
}

// The tree is the process collector's, shared: one walk of it a Collect
// (the Tree makes that one walk a sample for all its users), and Close
// closes it too (the Tree takes any number of Closes).
func TestProcessTreeOnceACollect(t *testing.T) {
	s := fakeServer(dgxh100.New(), 2)
	for i := range 2 {
		dev(s, i).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 7, UsedGpuMemory: 1e9}}, nvml.SUCCESS
		}
	}
	tree := &fakeTree{nspids: [][]int{{4243, 7}}, err: errors.New("parsing /proc/4244/status: NSpid \"x\" is not a PID")}
	c, err := New(Options{Lib: s, ProcessTree: tree})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		var b metrics.Batch
		err := c.Collect(context.Background(), &b)
		// A process whose status could not be read is an error, and the
		// others still match.
		if err == nil || !strings.Contains(err.Error(), "4244/status") {
			t.Errorf("Collect error %v, want the tree's", err)
		}
		if got := byName(t, b.Points)["process_gpu_memory_megabytes"].Value; got != 2000 {
			t.Errorf("process_gpu_memory_megabytes = %v, want 2000 (PID 7 on two GPUs)", got)
		}
		if n := tree.walks.Load(); n != int32(i+1) {
			t.Fatalf("%d Collects asked for the tree %d times, want once each", i+1, n)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if tree.closed.Load() == 0 {
		t.Error("Close left the tree open")
	}

	// A tree that cannot be walked: the error says so, no process_ series.
	tree = &fakeTree{err: errors.New("reading the process tree of pid 100 under /proc: EIO")}
	c, _ = newCollector(t, Options{Lib: fakeServer(dgxh100.New(), 1), ProcessTree: tree})
	var b metrics.Batch
	if err := c.Collect(context.Background(), &b); err == nil || !strings.Contains(err.Error(), "listing the child's processes") {
		t.Errorf("Collect with a tree that cannot be walked: %v", err)
	}
}
