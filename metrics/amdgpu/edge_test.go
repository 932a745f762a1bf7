package amdgpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/metrics"
)

// An APU, from its own fixture: its memory clock is not sent (its hwmon
// has no freq2_*; freq1, the shader clock, is not read in its place), its
// GTT is, beside the small VRAM carve-out, and its power has no cap.
func TestAPU(t *testing.T) {
	root := t.TempDir()
	write(t, root, apuCard(files{}, 0, 128, "0000:c4:00.0"))
	c, err := newIn(t, root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := collect(t, c)
	if err != nil {
		t.Fatal(err)
	}
	checkValues(t, got, map[string]float64{
		"gpu_0_utilization_percentage":     23,
		"gpu_0_temperature_celsius":        51,
		"gpu_0_sm_clock_mhz":               2700,
		"gpu_0_power_usage_watts":          18,
		"gpu_0_memory_used_megabytes":      314.5728,
		"gpu_0_memory_total_megabytes":     536.870912,
		"gpu_0_memory_usage_percentage":    100 * 314572800.0 / 536870912,
		"gpu_0_memory_gtt_used_megabytes":  6442.450944,
		"gpu_0_memory_gtt_total_megabytes": 16791.703552,
	})
	files, _ := c.Detect(context.Background())["gpus"].([]map[string]any)[0]["files"].([]string)
	if n := len(slices.DeleteFunc(slices.Clone(files), func(f string) bool { return !strings.HasSuffix(f, "freq1_input") })); n != 1 {
		t.Errorf("freq1_input read %d times, want once (the shader clock): %v", n, files)
	}
}

// The memory clock is read only from the memory clock's own sensor, one
// fixture a layout.
func TestMemoryClockOwnSensor(t *testing.T) {
	h := hwmonOf(0)
	for _, tc := range []struct {
		name   string
		change files
		remove []string
		want   float64 // 0: no memory clock
	}{
		{name: "labelled mclk", want: 1600},
		{name: "mclk labelled at another place", remove: []string{h + "freq2_input", h + "freq2_label"},
			change: files{h + "freq3_input": "900000000\n", h + "freq3_label": "mclk\n"}, want: 900},
		{name: "unlabelled: freq2", remove: []string{h + "freq1_label", h + "freq2_label"}, want: 1600},
		{name: "no freq2 (an APU)", remove: []string{h + "freq2_input", h + "freq2_label"}},
		{name: "no freq2, unlabelled freq1", remove: []string{h + "freq2_input", h + "freq2_label", h + "freq1_label"}},
		{name: "freq2 labelled as something else", change: files{h + "freq2_label": "fclk\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			f := amdCard(kfdNodes(files{}, [2]int{1234, 128}), 0, 128, "0000:03:00.0", "")
			for k, v := range tc.change {
				f[k] = v
			}
			write(t, root, f)
			for _, r := range tc.remove {
				if err := os.Remove(filepath.Join(root, r)); err != nil {
					t.Fatal(err)
				}
			}
			c, err := newIn(t, root, Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := collect(t, c)
			v, ok := got["gpu_0_memory_clock_mhz"]
			if ok != (tc.want != 0) || v != tc.want {
				t.Errorf("memory clock %v (sent %v), want %v", v, ok, tc.want)
			}
			if got["gpu_0_sm_clock_mhz"] != 1700 {
				t.Errorf("shader clock %v, want 1700", got["gpu_0_sm_clock_mhz"])
			}
		})
	}
}

// mi300Node is two MI300X, as ROCm sees them: card0 (0000:03:00.0) in a
// two-partition mode (DPX), card8 (0000:23:00.0) whole (SPX). Each card
// has its seven amdgpu_xcp platform devices (the driver registers them in
// every mode); KFD lists card0's two partitions (renderD128, its own, and
// renderD129, amdgpu_xcp_0's), then card8 (renderD136). The partition's
// location_id is its card's ORed with its number (partition << part).
func mi300Node(t *testing.T, part int) string {
	root := t.TempDir()
	f, ln0 := mi300Card(files{}, 0, 128, "0000:03:00.0", 0)
	f, ln8 := mi300Card(f, 8, 136, "0000:23:00.0", 7)
	kfdPartitionNodes(f,
		kfdNodeFixture{gpuID: 41000, render: 128, location: 0x300},
		kfdNodeFixture{gpuID: 41001, render: 129, location: 0x300 | 1<<part},
		kfdNodeFixture{gpuID: 52000, render: 136, location: 0x2300})
	f["sys/class/kfd/kfd/proc/"] = ""
	write(t, root, f)
	links(t, root, ln0)
	links(t, root, ln8)
	return root
}

// MI300 in a compute partition mode: ROCm numbers GPUs by KFD node, so
// ROCR_VISIBLE_DEVICES=1 is card0's second partition, whose render node
// belongs to an amdgpu_xcp platform device (no DRIVER=amdgpu). It is
// mapped to card0 by its PCI location; the child's 1 GiB on it counts;
// card0's readings are sent once, under the first of the job's GPUs on it.
func TestPartitions(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name     string
		part     int // where location_id holds the partition: bit 0 (most kernels) or 28
		env      []string
		remove   []string
		want     []string // card and partition of gpu_0, gpu_1, ...
		figures  []bool   // which carry their card's readings
		childMiB float64
	}{
		{name: "ROCR_VISIBLE_DEVICES=1: card0's second partition", env: []string{"ROCR_VISIBLE_DEVICES", "1"},
			want: []string{"card0/1"}, figures: []bool{true}, childMiB: metrics.MB(gib)},
		{name: "location_id partition in bits 31:28", part: 28, env: []string{"ROCR_VISIBLE_DEVICES", "1"},
			want: []string{"card0/1"}, figures: []bool{true}, childMiB: metrics.MB(gib)},
		{name: "every GPU, by KFD node", want: []string{"card0/0", "card0/1", "card8/-1"}, figures: []bool{true, false, true},
			childMiB: metrics.MB(gib + 2*gib + 4*gib)},
		{name: "a container given only the partition's render node", remove: []string{"dev/dri/renderD128", "dev/dri/renderD136"},
			want: []string{"card0/1"}, figures: []bool{true}, childMiB: metrics.MB(gib)},
		{name: "HIP picks from what ROCR left", env: []string{"ROCR_VISIBLE_DEVICES", "2,1", "HIP_VISIBLE_DEVICES", "1"},
			want: []string{"card0/1"}, figures: []bool{true}, childMiB: metrics.MB(gib)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := mi300Node(t, tc.part)
			f := kfdProc(files{}, 100, map[int]uint64{41001: gib, 41000: 2 * gib, 52000: 4 * gib})
			write(t, root, f)
			for _, r := range tc.remove {
				if err := os.Remove(filepath.Join(root, r)); err != nil {
					t.Fatal(err)
				}
			}
			c, err := newIn(t, root, Options{LookupEnv: env(tc.env...), ProcessTree: fakeTree{100}})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i, g := range c.gpus {
				got = append(got, g.card.name+"/"+itoa(g.partition))
				if g.index != i || g.figures != tc.figures[i] {
					t.Errorf("gpu_%d (index %d): carries its card's readings %v, want %v", i, g.index, g.figures, tc.figures[i])
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("job GPUs %v, want %v (notes %q)", got, tc.want, c.notes)
			}
			vals, err := collect(t, c)
			if err != nil {
				t.Fatal(err)
			}
			if v := vals["process_gpu_memory_megabytes"]; v != tc.childMiB {
				t.Errorf("the child's GPU memory %v MB, want %v", v, tc.childMiB)
			}
			for i, fig := range tc.figures {
				_, ok := vals[metrics.GPUMemoryUsed.ForGPU(i).Name]
				if ok != fig {
					t.Errorf("gpu_%d memory used sent %v, want %v: %v", i, ok, fig, vals)
				}
			}
			if n := len(tc.figures); len(vals) != 3+len(mi300CardSeries(tc.figures)) {
				t.Errorf("%d points for %d GPUs: %v", len(vals), n, vals)
			}
			d := c.Detect(context.Background())["gpus"].([]map[string]any)
			tags := c.Tags()
			for i, g := range c.gpus {
				if g.partition >= 0 {
					if d[i]["partition"] != g.partition || !strings.Contains(tags["bridge.gpu."+itoa(i)+".partition"], "card0") {
						t.Errorf("gpu_%d: detect %v, tags %v: want its partition named", i, d[i], tags)
					}
					if _, ok := tags["bridge.gpu."+itoa(i)+".uuid"]; ok {
						t.Errorf("gpu_%d, a partition, tagged with its card's UUID as its own: %v", i, tags)
					}
				}
				if !g.figures && !strings.Contains(d[i]["card_figures"].(string), "gpu_0") {
					t.Errorf("gpu_%d: detect %v; want it to say gpu_0 carries its card's readings", i, d[i])
				}
			}
		})
	}
}

// mi300CardSeries are the card readings the fixture gives, once for each
// GPU that carries them.
func mi300CardSeries(figures []bool) []string {
	var out []string
	for i, f := range figures {
		if f {
			for k := range mi210(itoa(i)) {
				out = append(out, k)
			}
		}
	}
	return out
}

// A KFD node whose render node is no card's and whose location no card
// has is left out, saying so; the others are numbered without it.
func TestPartitionWithoutCard(t *testing.T) {
	root := t.TempDir()
	f, ln := mi300Card(files{}, 0, 128, "0000:03:00.0", 0)
	kfdPartitionNodes(f,
		kfdNodeFixture{gpuID: 41000, render: 128, location: 0x300},
		kfdNodeFixture{gpuID: 41001, render: 129, location: 0x4100})
	write(t, root, f)
	links(t, root, ln)
	c, err := newIn(t, root, Options{LookupEnv: env("ROCR_VISIBLE_DEVICES", "1")})
	if !errors.Is(err, ErrNoneForJob) || !strings.Contains(err.Error(), "KFD node 2 (renderD129)") {
		t.Fatalf("New: %v, %v; want none for the job, KFD node 2 named", c, err)
	}
}
