package metrics

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// Megabytes back to bytes is exact for every byte count below 2^51: the
// property the "same value in Prometheus and MLflow" promise rests on.
func TestBytesRoundTripExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 1_000_000; i++ {
		b := float64(r.Int64N(1 << 51))
		if i < 1000 {
			b = float64(i)
		}
		if got := UnitMegabytes.Base(MB(b)); got != b {
			t.Fatalf("%v bytes -> %v MB -> %v bytes", b, MB(b), got)
		}
	}
	if UnitMegabytes.Base(MB(math.MaxUint32)) != math.MaxUint32 {
		t.Fatal("4 GiB - 1")
	}
	if UnitMegabytesPerSecond.Base(1.25) != 1.25e6 || UnitPercentage.Base(12.5) != 12.5 {
		t.Fatal("rates scale by 10^6, other units not at all")
	}
}

// A key is read back to the descriptor that made it: a static one by its
// name (the same descriptor), a per-GPU template bound to the key's GPU or
// MIG slice, an Instance template bound to the key's values, each as
// ForGPU, ForMIG and For make them; a key of none of them, or one that
// only looks like one, is not found.
func TestIndexLookup(t *testing.T) {
	x := NewIndex(ContainerCPUUsage, GPUUtilization, InfinibandReceiveRate)
	for _, want := range []*Desc{
		ContainerCPUUsage,
		GPUUtilization.ForGPU(3), GPUUtilization.ForGPU(12), GPUUtilization.ForMIG(0, 7),
		InfinibandReceiveRate.For("mlx5_0", "1"), InfinibandReceiveRate.For("ib.p12s0", "2"),
	} {
		got, ok := x.Lookup(want.Name)
		if !ok {
			t.Errorf("%s not found", want.Name)
			continue
		}
		if want == ContainerCPUUsage && got != want {
			t.Errorf("%s: a copy, want the descriptor itself", want.Name)
		}
		if got.Name != want.Name || got.Of != want.Of || got.GPU != want.GPU || got.MIG != want.MIG ||
			got.Prom != want.Prom || got.Unit != want.Unit || !slices.Equal(got.Labels, keyPartLabels(want.Labels)) {
			t.Errorf("%s: got %+v, want %+v", want.Name, got, want)
		}
	}
	for _, key := range []string{
		"container_cpu_usage_seconds_total", "gpu_3_memory_used_megabytes", "gpu_x_utilization_percentage",
		"gpu_03_utilization_percentage", "gpu__utilization_percentage", "gpu_3_mig_utilization_percentage_x",
		"node_infiniband__port_1_receive_megabytes_per_second", "node_infiniband_mlx5_0_port__receive_megabytes_per_second",
		"node_infiniband_mlx5_0_port_1_transmit_megabytes_per_second", "utilization_percentage", "",
	} {
		if d, ok := x.Lookup(key); ok {
			t.Errorf("%q found as %s", key, d.Name)
		}
	}
}

// keyPartLabels are labels as a key spells their values.
func keyPartLabels(labels []string) []string {
	out := slices.Clone(labels)
	for i := 1; i < len(out); i += 2 {
		out[i] = KeyPart(out[i])
	}
	return out
}
