package amdgpu

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/procfs/sysfs"

	"github.com/bridge-dev/bridge/harness/closetest"
	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/metrics"
)

// env is a LookupEnv over a fixed set of variables.
func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func newIn(t *testing.T, root string, o Options) (*Collector, error) {
	t.Helper()
	o.SysRoot, o.DevRoot = filepath.Join(root, "sys"), filepath.Join(root, "dev")
	if o.LookupEnv == nil {
		o.LookupEnv = env()
	}
	c, err := New(o)
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func collect(t *testing.T, c *Collector) (map[string]float64, error) {
	t.Helper()
	pts, err := collecttest.Collect(context.Background(), c)
	out := map[string]float64{}
	for _, p := range pts {
		if _, dup := out[p.Name()]; dup {
			t.Errorf("%s added twice", p.Name())
		}
		out[p.Name()] = p.Value
	}
	return out, err
}

func checkValues(t *testing.T, got, want map[string]float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d points %v\nwant %d %v", len(got), got, len(want), want)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || math.Abs(g-v) > 1e-9*math.Max(1, math.Abs(v)) {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

// mi210 is what amdCard's files give for gpu_N.
func mi210(n string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range map[string]float64{
		"utilization_percentage":                   37,
		"memory_controller_utilization_percentage": 12,
		"memory_used_megabytes":                    1073.741824,
		"memory_total_megabytes":                   68702.69952,
		"memory_usage_percentage":                  100 * 1073741824.0 / 68702699520,
		"memory_gtt_used_megabytes":                11.464704,
		"memory_gtt_total_megabytes":               134180.323328,
		"power_usage_watts":                        281,
		"power_limit_watts":                        300,
		"power_usage_percentage":                   100 * 281.0 / 300,
		"temperature_celsius":                      45,
		"sm_clock_mhz":                             1700,
		"memory_clock_mhz":                         1600,
	} {
		out["gpu_"+n+"_"+k] = v
	}
	return out
}

// The readings, one fixture per edge case: the files of an MI210 as the
// driver writes them, and what each variation gives.
func TestReadings(t *testing.T) {
	const h = "sys/class/drm/card0/device/hwmon/hwmon3/"
	const d = "sys/class/drm/card0/device/"
	without := func(m map[string]float64, keys ...string) map[string]float64 {
		out := map[string]float64{}
		for k, v := range m {
			if !slices.Contains(keys, k) {
				out[k] = v
			}
		}
		return out
	}
	with := func(m map[string]float64, kv map[string]float64) map[string]float64 {
		out := without(m)
		for k, v := range kv {
			out[k] = v
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		change files    // written over the card's files
		remove []string // files removed
		want   map[string]float64
		err    string // Collect's error names this
	}{
		{name: "MI210", want: mi210("0")},
		{name: "no edge sensor (MI300X): junction", remove: []string{h + "temp1_input", h + "temp1_label"},
			want: with(mi210("0"), map[string]float64{"gpu_0_temperature_celsius": 52})},
		{name: "unlabelled sensors: temp1", remove: []string{h + "temp1_label", h + "temp2_label", h + "temp3_label"},
			change: files{h + "temp1_input": "47000\n"}, want: with(mi210("0"), map[string]float64{"gpu_0_temperature_celsius": 47})},
		{name: "instant power only", remove: []string{h + "power1_average"}, change: files{h + "power1_input": "150000000\n"},
			want: with(mi210("0"), map[string]float64{"gpu_0_power_usage_watts": 150, "gpu_0_power_usage_percentage": 50})},
		{name: "power cap query failed (empty line)", change: files{h + "power1_cap": "\n"},
			want: without(mi210("0"), "gpu_0_power_limit_watts", "gpu_0_power_usage_percentage")},
		{name: "no mem_busy_percent", remove: []string{d + "mem_busy_percent"},
			want: without(mi210("0"), "gpu_0_memory_controller_utilization_percentage")},
		{name: "no hwmon", remove: []string{h},
			want: without(mi210("0"), "gpu_0_power_usage_watts", "gpu_0_power_limit_watts", "gpu_0_power_usage_percentage",
				"gpu_0_temperature_celsius", "gpu_0_sm_clock_mhz", "gpu_0_memory_clock_mhz")},
		{name: "zero VRAM total: no percentage", change: files{d + "mem_info_vram_total": "0\n"},
			want: with(without(mi210("0"), "gpu_0_memory_usage_percentage"), map[string]float64{"gpu_0_memory_total_megabytes": 0})},
		{name: "malformed", change: files{d + "gpu_busy_percent": "busy\n"},
			want: without(mi210("0"), "gpu_0_utilization_percentage"), err: "card0/device/gpu_busy_percent"},
		{name: "below zero", change: files{h + "temp1_input": "-5000\n"},
			want: with(mi210("0"), map[string]float64{"gpu_0_temperature_celsius": -5})},
		{name: "a fraction", change: files{d + "mem_busy_percent": "1.5\n"},
			want: without(mi210("0"), "gpu_0_memory_controller_utilization_percentage"), err: "mem_busy_percent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			f := amdCard(kfdNodes(files{}, [2]int{1234, 128}), 0, 128, "0000:03:00.0", "2ea8c1e4a2b6f0d3")
			for k, v := range tc.change {
				f[k] = v
			}
			write(t, root, f)
			for _, r := range tc.remove {
				if err := os.RemoveAll(filepath.Join(root, r)); err != nil {
					t.Fatal(err)
				}
			}
			c, err := newIn(t, root, Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := collect(t, c)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("Collect: %v; want an error naming %q", err, tc.err)
			}
			checkValues(t, got, tc.want)
		})
	}
}

// A file gone after start (the GPU hot-unplugged, a reading the card
// stopped answering) is no data, not an error.
func TestFileGone(t *testing.T) {
	root := t.TempDir()
	write(t, root, amdCard(kfdNodes(files{}, [2]int{1234, 128}), 0, 128, "0000:03:00.0", ""))
	c, err := newIn(t, root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "sys/class/drm/card0/device/gpu_busy_percent")); err != nil {
		t.Fatal(err)
	}
	got, err := collect(t, c)
	if err != nil || len(got) != len(mi210("0"))-1 {
		t.Errorf("got %v, %v; want every series but utilization, no error", got, err)
	}
}

// The fixture is laid out as prometheus/procfs reads it too: its reader of
// amdgpu cards gets the same figures.
func TestFixtureAgreesWithProcfs(t *testing.T) {
	root := t.TempDir()
	write(t, root, amdCard(files{}, 0, 128, "0000:03:00.0", "2ea8c1e4a2b6f0d3"))
	fs, err := sysfs.NewFS(filepath.Join(root, "sys"))
	if err != nil {
		t.Fatal(err)
	}
	stats, err := fs.ClassDRMCardAMDGPUStats()
	if err != nil || len(stats) != 1 {
		t.Fatalf("procfs: %v, %v", stats, err)
	}
	s := stats[0]
	c, err := newIn(t, root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := collect(t, c)
	if float64(s.GPUBusyPercent) != got["gpu_0_utilization_percentage"] || metrics.MB(float64(s.MemoryVRAMUsed)) != got["gpu_0_memory_used_megabytes"] ||
		metrics.MB(float64(s.MemoryVRAMSize)) != got["gpu_0_memory_total_megabytes"] || s.UniqueID != "2ea8c1e4a2b6f0d3" {
		t.Errorf("procfs reads %+v; bridge %v", s, got)
	}
}

// Which GPUs are the job's, and how they are numbered: one fixture each.
func TestJobGPUs(t *testing.T) {
	// Two MI210s whose card numbers do not follow ROCm's order (KFD's
	// node order): card9 is ROCm's GPU 0, card1 its GPU 1; an Intel iGPU as
	// card0.
	two := func() files {
		f := otherCard(files{}, 0)
		amdCard(f, 1, 129, "0000:c3:00.0", "aaaaaaaaaaaaaaaa")
		amdCard(f, 9, 128, "0000:03:00.0", "bbbbbbbbbbbbbbbb")
		return kfdNodes(f, [2]int{1111, 128}, [2]int{2222, 129})
	}
	for _, tc := range []struct {
		name   string
		files  files
		remove []string
		offset int
		env    []string
		want   []string // card of gpu_<offset>, gpu_<offset+1>, ...
		err    error
		note   string // Detect's left_out, or the error, says this
	}{
		{name: "no drm class", files: files{"sys/class/": ""}, err: ErrNoGPU},
		{name: "only another driver's card", files: otherCard(files{}, 0), err: ErrNoGPU},
		{name: "KFD order", files: two(), want: []string{"card9", "card1"}},
		{name: "card10 and later", files: func() files {
			f := amdCard(files{}, 10, 130, "0000:10:00.0", "")
			return kfdNodes(f, [2]int{3333, 130})
		}(), want: []string{"card10"}},
		{name: "without KFD: card order", files: two(), remove: []string{"sys/class/kfd"}, want: []string{"card1", "card9"}},
		{name: "a card KFD does not list", files: func() files {
			f := two()
			f["sys/class/kfd/kfd/topology/nodes/2/gpu_id"] = "0\n"
			return f
		}(), want: []string{"card9"}, note: "card1 (0000:c3:00.0): no KFD topology node"},
		{name: "a render node not in the container", files: two(), remove: []string{"dev/dri/renderD128"},
			want: []string{"card1"}, note: "renderD128 is not here"},
		{name: "no render node at all", files: two(), remove: []string{"dev/dri"}, err: ErrNoneForJob, note: "renderD129 is not here"},
		{name: "after NVIDIA's", files: two(), offset: 2, want: []string{"card9", "card1"}},
		{name: "ROCR index", files: two(), env: []string{"ROCR_VISIBLE_DEVICES", "1"}, want: []string{"card1"}},
		{name: "ROCR UUID, reordered", files: two(), env: []string{"ROCR_VISIBLE_DEVICES", "GPU-AAAAAAAAAAAAAAAA,0"}, want: []string{"card1", "card9"}},
		{name: "HIP over ROCR", files: two(), env: []string{"ROCR_VISIBLE_DEVICES", "1,0", "HIP_VISIBLE_DEVICES", "1"}, want: []string{"card9"}},
		{name: "CUDA_VISIBLE_DEVICES read by HIP", files: two(), env: []string{"CUDA_VISIBLE_DEVICES", "1"}, want: []string{"card1"}},
		{name: "CUDA_VISIBLE_DEVICES beside NVIDIA GPUs is theirs", files: two(), offset: 1, env: []string{"CUDA_VISIBLE_DEVICES", "1"},
			want: []string{"card9", "card1"}},
		{name: "HIP wins over CUDA", files: two(), env: []string{"HIP_VISIBLE_DEVICES", "0", "CUDA_VISIBLE_DEVICES", "1"}, want: []string{"card9"}},
		{name: "bad entries", files: two(), env: []string{"ROCR_VISIBLE_DEVICES", "7,GPU-nothere,1,1"}, want: []string{"card1"},
			note: `"7" names none`},
		{name: "set empty: none", files: two(), env: []string{"ROCR_VISIBLE_DEVICES", ""}, err: ErrNoneForJob},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, tc.files)
			for _, r := range tc.remove {
				if err := os.RemoveAll(filepath.Join(root, r)); err != nil {
					t.Fatal(err)
				}
			}
			c, err := newIn(t, root, Options{Offset: tc.offset, LookupEnv: env(tc.env...)})
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.note) {
					t.Fatalf("New: %v; want %v saying %q", err, tc.err, tc.note)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var cards []string
			for i, g := range c.gpus {
				if g.index != tc.offset+i {
					t.Errorf("GPU %s numbered %d, want %d", g.card.name, g.index, tc.offset+i)
				}
				cards = append(cards, g.card.name)
			}
			if !slices.Equal(cards, tc.want) {
				t.Errorf("job GPUs %v, want %v", cards, tc.want)
			}
			got, _ := collect(t, c)
			for i := range tc.want {
				if _, ok := got[metrics.GPUName(tc.offset+i, -1, "utilization_percentage")]; !ok {
					t.Errorf("no series for gpu_%d: %v", tc.offset+i, got)
				}
			}
			if len(got) != len(tc.want)*len(mi210("0")) {
				t.Errorf("%d points for %d GPUs: %v", len(got), len(tc.want), got)
			}
			if tc.note != "" && !strings.Contains(strings.Join(c.notes, "\n"), tc.note) {
				t.Errorf("notes %q lack %q", c.notes, tc.note)
			}
			tags := c.Tags()
			if tags["bridge.gpu."+itoa(tc.offset)+".vendor"] != "amd" || tags["bridge.gpu.amd_count"] != itoa(len(tc.want)) {
				t.Errorf("tags %v", tags)
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// The child's VRAM from KFD's per-process files: its processes' vram on
// the job's GPUs, matched by PID; another job's processes and GPUs are not
// counted.
func TestProcessVRAM(t *testing.T) {
	const gib = 1 << 30
	base := func() files {
		f := amdCard(files{}, 0, 128, "0000:03:00.0", "")
		amdCard(f, 1, 129, "0000:c3:00.0", "")
		return kfdNodes(f, [2]int{1234, 128}, [2]int{5678, 129})
	}
	for _, tc := range []struct {
		name    string
		procs   func(files) files
		tree    []int
		env     []string
		want    map[string]float64 // process_gpu_ series
		errText string
		holders []int // noted on the tree: the trainers
	}{
		{name: "the tree's processes", procs: func(f files) files {
			kfdProc(f, 100, map[int]uint64{1234: gib, 5678: 2 * gib}) // the child, on both GPUs
			kfdProc(f, 101, map[int]uint64{1234: 512 << 20})          // a worker
			return kfdProc(f, 900, map[int]uint64{1234: 8 * gib})     // another job
		}, tree: []int{100, 101, 102},
			want:    map[string]float64{"process_gpu_memory_megabytes": metrics.MB(3*gib + 512<<20), "process_gpu_processes_count": 3, "process_gpu_unmatched_processes_count": 1},
			holders: []int{100, 101}},
		{name: "only the job's GPUs", procs: func(f files) files {
			return kfdProc(f, 100, map[int]uint64{1234: gib, 5678: 2 * gib})
		}, tree: []int{100}, env: []string{"ROCR_VISIBLE_DEVICES", "1"},
			want:    map[string]float64{"process_gpu_memory_megabytes": metrics.MB(2 * gib), "process_gpu_processes_count": 1, "process_gpu_unmatched_processes_count": 0},
			holders: []int{100}},
		{name: "none matched (host PIDs in a container)", procs: func(f files) files {
			return kfdProc(f, 900, map[int]uint64{1234: gib})
		}, tree: []int{7},
			want: map[string]float64{"process_gpu_processes_count": 0, "process_gpu_unmatched_processes_count": 1}},
		{name: "no KFD process yet", procs: func(f files) files { return f }, tree: []int{7},
			want: map[string]float64{"process_gpu_memory_megabytes": 0, "process_gpu_processes_count": 0, "process_gpu_unmatched_processes_count": 0}},
		{name: "no child", procs: func(f files) files { return kfdProc(f, 900, map[int]uint64{1234: gib}) }, tree: nil,
			want: map[string]float64{}},
		{name: "malformed vram", procs: func(f files) files {
			f = kfdProc(f, 100, map[int]uint64{1234: gib})
			f["sys/class/kfd/kfd/proc/100/vram_1234"] = "a lot\n"
			return f
		}, tree: []int{100}, errText: "proc/100/vram_1234",
			want:    map[string]float64{"process_gpu_processes_count": 1, "process_gpu_unmatched_processes_count": 0},
			holders: []int{100}}, // it holds VRAM, whatever its file says
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			f := tc.procs(base())
			f["sys/class/kfd/kfd/proc/"] = ""
			write(t, root, f)
			tree := &holderTree{fakeTree: fakeTree(tc.tree)}
			c, err := newIn(t, root, Options{LookupEnv: env(tc.env...), ProcessTree: tree})
			if err != nil {
				t.Fatal(err)
			}
			got, err := collect(t, c)
			if tc.errText == "" && err != nil || tc.errText != "" && (err == nil || !strings.Contains(err.Error(), tc.errText)) {
				t.Errorf("Collect: %v; want an error naming %q", err, tc.errText)
			}
			proc := map[string]float64{}
			for k, v := range got {
				if strings.HasPrefix(k, "process_") {
					proc[k] = v
				}
			}
			checkValues(t, proc, tc.want)
			if tc.tree != nil && !slices.Equal(tree.holders, tc.holders) {
				t.Errorf("GPU holders noted %v, want %v", tree.holders, tc.holders)
			}
			if d := c.Detect(context.Background()); tc.tree != nil && d["process_pids"] == "" {
				t.Errorf("detect says nothing of the match: %v", d)
			}
		})
	}
}

// Without KFD there is no per-process figure, and Detect says why.
func TestNoKFD(t *testing.T) {
	root := t.TempDir()
	write(t, root, amdCard(files{}, 0, 128, "0000:03:00.0", ""))
	c, err := newIn(t, root, Options{ProcessTree: fakeTree{1}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := collect(t, c)
	checkValues(t, got, mi210("0"))
	if d := c.Detect(context.Background()); !strings.Contains(d["process_pids"].(string), "no KFD") {
		t.Errorf("detect %v", d)
	}
}

func TestVisible(t *testing.T) {
	gpus := []visibleGPU{{UUID: "GPU-aa"}, {UUID: "GPU-bb"}, {}, {UUID: "GPU-dd"}}
	for _, tc := range []struct {
		name  string
		env   []string
		cuda  bool
		keep  []int
		notes int
	}{
		{"unset", nil, false, []int{0, 1, 2, 3}, 0},
		{"indexes", []string{"ROCR_VISIBLE_DEVICES", "3,1"}, false, []int{3, 1}, 0},
		{"spaces and empty entries", []string{"ROCR_VISIBLE_DEVICES", " 2 ,, 0"}, false, []int{2, 0}, 0},
		{"uuid any case", []string{"ROCR_VISIBLE_DEVICES", "gpu-BB"}, false, []int{1}, 0},
		{"hip indexes ROCR's list", []string{"ROCR_VISIBLE_DEVICES", "3,2,1", "HIP_VISIBLE_DEVICES", "0,2"}, false, []int{3, 1}, 0},
		{"out of range", []string{"HIP_VISIBLE_DEVICES", "4,-1,0"}, false, []int{0}, 2},
		{"repeated", []string{"ROCR_VISIBLE_DEVICES", "1,1"}, false, []int{1}, 1},
		{"cuda ignored without cuda", []string{"CUDA_VISIBLE_DEVICES", "1"}, false, []int{0, 1, 2, 3}, 0},
		{"cuda read with cuda", []string{"CUDA_VISIBLE_DEVICES", "1"}, true, []int{1}, 0},
		{"empty", []string{"ROCR_VISIBLE_DEVICES", ""}, false, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keep, notes := visible(gpus, env(tc.env...), tc.cuda)
			if !slices.Equal(keep, tc.keep) || len(notes) != tc.notes {
				t.Errorf("keep %v notes %q; want %v and %d notes", keep, notes, tc.keep, tc.notes)
			}
		})
	}
}

// Close beside a Collect stuck for real reading gpu_busy_percent (a FIFO
// nobody writes): Close does not wait, nothing races, nothing stays open.
func TestCloseWhileReadHangs(t *testing.T) {
	root := t.TempDir()
	write(t, root, amdCard(kfdNodes(files{}, [2]int{1234, 128}), 0, 128, "0000:03:00.0", ""))
	c, err := newIn(t, root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "sys/class/drm/card0/device/gpu_busy_percent")
	closetest.CloseWhileReadHangs(t, c, root, closetest.Fifo(t, path, "40\n"))
}
