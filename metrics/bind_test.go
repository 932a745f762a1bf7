package metrics_test

import (
	"slices"
	"testing"

	"github.com/bridge-dev/bridge/metrics"
)

// Templates shaped as the InfiniBand and RAPL collectors' are, and a plain
// series.
var (
	ibRate = &metrics.Desc{Name: "node_infiniband_<device>_port_<port>_receive_megabytes_per_second", Unit: metrics.UnitMegabytesPerSecond,
		Scope: metrics.ScopeNode, Instance: []string{"device", "port"}, Prom: "bridge_node_infiniband_receive_bytes_per_second", Help: "Bytes."}
	pkgEnergy = &metrics.Desc{Name: "node_cpu_package_<package>_energy_joules", Unit: metrics.UnitJoules, Scope: metrics.ScopeNode,
		Kind: metrics.Counter, Instance: []string{"package"}, Prom: "bridge_node_cpu_package_energy_joules_total", Help: "Energy."}
	plain = &metrics.Desc{Name: "node_load_1m", Unit: metrics.UnitLoad, Scope: metrics.ScopeNode, Prom: "node_load1", Help: "Load."}
)

// The PSI family: cpu, memory, io, each some and full, named after the
// scope (consumers read the memory ones as Pressures[1]).
func TestPressureSeries(t *testing.T) {
	ps := metrics.PressureSeries("container", "container's cgroup")
	if ps[1].Resource != "memory" || ps[1].Some.Name != "container_pressure_memory_some_avg10_percentage" ||
		ps[1].Full.Name != "container_pressure_memory_full_avg10_percentage" {
		t.Errorf("memory pressure series are %+v", ps[1])
	}
	if d := ps.Descs(); len(d) != 6 || d[0] != ps[0].Some || d[1] != ps[0].Full || d[5] != ps[2].Full {
		t.Errorf("Descs: %v", d)
	}
	if s, f := ps.Some(), ps.Full(); len(s) != 3 || len(f) != 3 || s[2] != ps[2].Some || f[0] != ps[0].Full {
		t.Errorf("Some %v Full %v", s, f)
	}
}

// A per-GPU template is sent bound to a GPU or a MIG slice; the name and
// the /metrics name are built once, by composition, never parsed back.
func TestGPUBinding(t *testing.T) {
	g := metrics.GPUMemoryUsed.ForGPU(3)
	m := metrics.GPUMemoryUsed.ForMIG(0, 7)
	for _, c := range []struct {
		d              *metrics.Desc
		name, prom     string
		gpu, mig       int
		unit           metrics.Unit
		scope          metrics.Scope
		bytesFromMB100 float64
	}{
		{g, "gpu_3_memory_used_megabytes", "bridge_gpu_memory_used_bytes", 3, -1, metrics.UnitMegabytes, metrics.ScopeGPU, 100e6},
		{m, "gpu_0_mig_7_memory_used_megabytes", "bridge_gpu_mig_memory_used_bytes", 0, 7, metrics.UnitMegabytes, metrics.ScopeGPU, 100e6},
		{metrics.GPUPowerUsage.ForGPU(1), "gpu_1_power_usage_watts", "bridge_gpu_power_usage_watts", 1, -1, metrics.UnitWatts, metrics.ScopeGPU, 100},
	} {
		if c.d.Name != c.name || c.d.PromName() != c.prom || c.d.GPU != c.gpu || c.d.MIG != c.mig || c.d.Unit != c.unit || c.d.Scope != c.scope || c.d.PerGPU {
			t.Errorf("bound: %+v, want %s %s gpu %d mig %d", *c.d, c.name, c.prom, c.gpu, c.mig)
		}
		if c.d.Unit.Base(100) != c.bytesFromMB100 {
			t.Errorf("%s: 100 -> %v, want %v", c.d.Name, c.d.Unit.Base(100), c.bytesFromMB100)
		}
	}
	if g.Of != metrics.GPUMemoryUsed || m.Of != metrics.GPUMemoryUsed {
		t.Error("a bound descriptor does not know its template")
	}
	defer func() {
		if recover() == nil {
			t.Error("binding a series that is not per GPU did not panic")
		}
	}()
	plain.ForGPU(0)
}

// dcgm-exporter's profiling fields that GPM also gives are the GPM series'
// descriptors (one help line, unit and /metrics name per name, whichever
// source filled it); other fields get a template of their own.
func TestDCGMProfilingIsGPM(t *testing.T) {
	for _, c := range []struct {
		x    string
		rate bool
		want *metrics.Desc
	}{
		{"sm_active", false, metrics.GPUProfSMActive},
		{"pipe_tensor_hmma_active", false, metrics.GPUProfTensorHMMA},
		{"dram_active", false, metrics.GPUProfDRAMActive},
		{"pcie_tx", true, metrics.GPUProfPCIeTx},
		{"nvlink_rx", true, metrics.GPUProfNVLinkRx},
	} {
		if got := metrics.DCGMProfiling(c.x, c.rate); got != c.want {
			t.Errorf("DCGMProfiling(%q, %v) = %+v, want the GPM series %s", c.x, c.rate, got, c.want.Name)
		}
	}
	other := metrics.DCGMProfiling("nvdec0_active", false)
	if other.Name != "prof_nvdec0_active_ratio" || other.Unit != metrics.UnitRatio || !other.PerGPU || other.Help == "" {
		t.Errorf("DCGMProfiling of a field GPM lacks: %+v", other)
	}
	if got := metrics.GPUProfPCIeTx.ForGPU(2).PromName(); got != "bridge_gpu_prof_pcie_tx_bytes_per_second" {
		t.Errorf("PCIe transmit exposed as %s", got)
	}
	if got := metrics.GPUEnergy.ForGPU(0); got.PromName() != "bridge_gpu_energy_joules_total" || got.Kind != metrics.Counter || got.Name != "gpu_0_energy_joules" {
		t.Errorf("energy: %s as %s, kind %v", got.Name, got.PromName(), got.Kind)
	}
}

// A per-instance template is sent bound to one device of the node: the
// name holds the instance as a key part, /metrics one name with labels.
func TestInstanceBinding(t *testing.T) {
	d := ibRate.For("mlx5_0", "1")
	odd := ibRate.For("ibp12s0-f1.2", "2")
	p := pkgEnergy.For("1")
	for _, c := range []struct {
		d            *metrics.Desc
		name, prom   string
		labels       []string
		unit         metrics.Unit
		kind         metrics.Kind
		base100Value float64
	}{
		{d, "node_infiniband_mlx5_0_port_1_receive_megabytes_per_second", "bridge_node_infiniband_receive_bytes_per_second",
			[]string{"device", "mlx5_0", "port", "1"}, metrics.UnitMegabytesPerSecond, metrics.Gauge, 100e6},
		{odd, "node_infiniband_ibp12s0_f1_2_port_2_receive_megabytes_per_second", "bridge_node_infiniband_receive_bytes_per_second",
			[]string{"device", "ibp12s0-f1.2", "port", "2"}, metrics.UnitMegabytesPerSecond, metrics.Gauge, 100e6},
		{p, "node_cpu_package_1_energy_joules", "bridge_node_cpu_package_energy_joules_total",
			[]string{"package", "1"}, metrics.UnitJoules, metrics.Counter, 100},
	} {
		if c.d.Name != c.name || c.d.PromName() != c.prom || !slices.Equal(c.d.Labels, c.labels) || c.d.Unit != c.unit ||
			c.d.Kind != c.kind || c.d.Scope != metrics.ScopeNode || len(c.d.Instance) != 0 || c.d.PerGPU {
			t.Errorf("bound: %+v, want %s %s %v", *c.d, c.name, c.prom, c.labels)
		}
		if c.d.Unit.Base(100) != c.base100Value {
			t.Errorf("%s: 100 -> %v, want %v", c.d.Name, c.d.Unit.Base(100), c.base100Value)
		}
	}
	if d.Of != ibRate || p.Of != pkgEnergy {
		t.Error("a bound descriptor does not know its template")
	}
	for _, bad := range []func(){
		func() { plain.For("x") },
		func() { ibRate.For("mlx5_0") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("binding with the wrong labels did not panic")
				}
			}()
			bad()
		}()
	}
}
