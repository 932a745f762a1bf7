package cgroup

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/metrics"
)

// k8sV2 builds a Kubernetes-like v2 tree: the process in
// /kubepods/burstable/pod1/ctr, the hierarchy mounted whole at <cg>.
func k8sV2(t *testing.T, leaf, pod map[string]string) (*fixture, string, string) {
	f := newFixture(t, ModeV2, 8)
	f.procCgroup("0::/kubepods/burstable/pod1/ctr")
	f.mountV2("", "/")
	f.files(f.cg, v2Root(), nil)
	f.files(filepath.Join(f.cg, "kubepods"), v2Parent(), nil)
	f.files(filepath.Join(f.cg, "kubepods/burstable"), v2Parent(), nil)
	podDir := filepath.Join(f.cg, "kubepods/burstable/pod1")
	f.files(podDir, v2Parent(), pod)
	leafDir := filepath.Join(podDir, "ctr")
	f.files(leafDir, v2Leaf(), leaf)
	return f, podDir, leafDir
}

func TestV2NoLimit(t *testing.T) {
	f, _, leaf := k8sV2(t, nil, nil)
	c := f.collector()
	pts := collect(t, c)

	wantValue(t, pts, "container_memory_working_set_megabytes", 200*mib/1e6)
	wantSource(t, pts, "container_memory_working_set_megabytes", leaf+"/memory.current, memory.stat inactive_file")
	wantValue(t, pts, "container_memory_usage_megabytes", 300*mib/1e6)
	wantValue(t, pts, "container_memory_rss_megabytes", 150*mib/1e6)
	wantValue(t, pts, "container_memory_cache_megabytes", 140*mib/1e6)
	wantValue(t, pts, "container_memory_peak_megabytes", 400*mib/1e6)
	wantValue(t, pts, "container_memory_oom_events_count", 2)
	wantValue(t, pts, "container_memory_oom_kill_events_count", 1)
	wantValue(t, pts, "container_memory_oom_group_kill_events_count", 0)
	wantValue(t, pts, "container_memory_high_events_count", 0)
	wantValue(t, pts, "container_memory_max_events_count", 3)
	wantValue(t, pts, "container_pids_max_events_count", 4)
	wantValue(t, pts, "container_pressure_memory_some_avg10_percentage", 1.5)
	wantValue(t, pts, "container_pressure_memory_full_avg10_percentage", 0.75)
	wantValue(t, pts, "container_pressure_cpu_some_avg10_percentage", 2)
	wantValue(t, pts, "container_pressure_cpu_full_avg10_percentage", 0)
	wantValue(t, pts, "container_pressure_io_some_avg10_percentage", 0.25)
	wantValue(t, pts, "container_pressure_io_full_avg10_percentage", 0.125)
	wantValue(t, pts, "container_pids_count", 7)
	wantAbsent(t, pts, "container_memory_limit_megabytes", "container_memory_working_set_percentage",
		"container_cpu_limit_cores", "container_pids_limit_count")

	d := c.Detect(context.Background())
	if d["version"] != "v2" || d["memory_limit_set_by"] != NoLimit || d["cpu_limit_set_by"] != NoLimit {
		t.Errorf("Detect = %v", d)
	}
	for _, k := range []string{"memory_limit_bytes", "cpu_limit_cores"} {
		if _, ok := d[k]; ok {
			t.Errorf("Detect has %s without a limit: %v", k, d)
		}
	}
	if got := d["paths"].(map[string]string)["memory"]; got != leaf {
		t.Errorf("memory path = %s, want %s", got, leaf)
	}
}

func TestV2LimitAtAncestorOnly(t *testing.T) {
	f, pod, _ := k8sV2(t, nil, map[string]string{"memory.max": "536870912\n", "cpu.max": "150000 100000\n"})
	// A looser limit further up must not win.
	f.write(filepath.Join(f.cg, "kubepods/memory.max"), "1073741824\n")
	c := f.collector()
	pts := collect(t, c)

	wantValue(t, pts, "container_memory_limit_megabytes", 536870912/1e6)
	wantSource(t, pts, "container_memory_limit_megabytes", pod+"/memory.max")
	wantValue(t, pts, "container_memory_working_set_percentage", 200.0/512*100)
	wantValue(t, pts, "container_cpu_limit_cores", 1.5)
	wantSource(t, pts, "container_cpu_limit_cores", pod+"/cpu.max quota")

	inf := c.Info()
	if inf.MemoryLimitBytes != 536870912 || inf.MemoryLimitSetBy != pod+"/memory.max" ||
		inf.CPULimitCores != 1.5 || inf.CPULimitSetBy != pod+"/cpu.max quota" {
		t.Errorf("Info = %+v", inf)
	}
}

// In a cgroup namespace the process sees "0::/" and the mount's root is its
// own cgroup: the leaf is the mount point, which is not the real root.
func TestV2CgroupNamespace(t *testing.T) {
	f := newFixture(t, ModeV2, 8)
	f.procCgroup("0::/")
	f.mountV2("", "/")
	f.files(f.cg, v2Leaf(), map[string]string{"memory.max": "1073741824\n"})
	c := f.collector()
	pts := collect(t, c)

	wantValue(t, pts, "container_memory_limit_megabytes", 1073741824/1e6)
	wantSource(t, pts, "container_memory_limit_megabytes", f.cg+"/memory.max")
	wantValue(t, pts, "container_memory_working_set_megabytes", 200*mib/1e6)
	wantValue(t, pts, "container_pressure_cpu_some_avg10_percentage", 2)
	if got := c.Info().Paths["unified"]; got != f.cg {
		t.Errorf("unified path = %s, want %s", got, f.cg)
	}
}

// A bind mount of the container's own subtree: mountinfo's root field is
// the cgroup path, which must be stripped.
func TestV2BindMountedRoot(t *testing.T) {
	f := newFixture(t, ModeV2, 8)
	f.procCgroup("0::/kubepods/pod1/ctr")
	f.mountV2("", "/kubepods/pod1/ctr")
	f.files(f.cg, v2Leaf(), map[string]string{"memory.max": "268435456\n"})
	c := f.collector()
	pts := collect(t, c)

	wantValue(t, pts, "container_memory_limit_megabytes", 268.435456)
	wantSource(t, pts, "container_memory_limit_megabytes", f.cg+"/memory.max")
	wantValue(t, pts, "container_memory_usage_megabytes", 300*mib/1e6)
	if got := c.Info().Paths["memory"]; got != f.cg {
		t.Errorf("memory path = %s, want the mount point %s", got, f.cg)
	}
}

func TestV2MissingFiles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		leaf    map[string]string
		present []string
		absent  []string
	}{
		{
			name:    "no PSI",
			leaf:    map[string]string{"cpu.pressure": "-", "memory.pressure": "-", "io.pressure": "-"},
			present: []string{"container_memory_working_set_megabytes", "container_memory_oom_kill_events_count"},
			absent: []string{"container_pressure_cpu_some_avg10_percentage", "container_pressure_memory_some_avg10_percentage",
				"container_pressure_io_full_avg10_percentage"},
		},
		{
			name:    "cpu PSI without full line",
			leaf:    map[string]string{"cpu.pressure": "some avg10=3.00 avg60=1.00 avg300=0.50 total=1000\n"},
			present: []string{"container_pressure_cpu_some_avg10_percentage", "container_pressure_io_full_avg10_percentage"},
			absent:  []string{"container_pressure_cpu_full_avg10_percentage"},
		},
		{
			// containerd reads an absent memory.peak (kernels < 5.19) as 0.
			name:    "no memory.peak",
			leaf:    map[string]string{"memory.peak": "-"},
			present: []string{"container_memory_usage_megabytes"},
			absent:  []string{"container_memory_peak_megabytes"},
		},
		{
			name:    "no memory.max at the leaf is no limit, not 0",
			leaf:    map[string]string{"memory.max": "-"},
			present: []string{"container_memory_working_set_megabytes"},
			absent:  []string{"container_memory_limit_megabytes", "container_memory_working_set_percentage"},
		},
		{
			name:    "memory controller not enabled",
			leaf:    map[string]string{"memory.current": "-", "memory.stat": "-", "memory.max": "-", "memory.events": "-", "memory.peak": "-"},
			present: []string{"container_pids_count", "container_pressure_cpu_some_avg10_percentage"},
			absent: []string{"container_memory_working_set_megabytes", "container_memory_usage_megabytes",
				"container_memory_oom_events_count"},
		},
		{
			name:    "old kernel without oom_group_kill",
			leaf:    map[string]string{"memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"},
			present: []string{"container_memory_oom_events_count", "container_memory_oom_kill_events_count"},
			absent:  []string{"container_memory_oom_group_kill_events_count"},
		},
		{
			name:    "pids limit",
			leaf:    map[string]string{"pids.max": "512\n"},
			present: []string{"container_pids_limit_count"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _, _ := k8sV2(t, tc.leaf, nil)
			pts := collect(t, f.collector())
			for _, n := range tc.present {
				if _, ok := pts[n]; !ok {
					t.Errorf("%s missing", n)
				}
			}
			wantAbsent(t, pts, tc.absent...)
			if tc.name == "pids limit" {
				wantValue(t, pts, "container_pids_limit_count", 512)
			}
		})
	}
}

func TestV2CPULimit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		leaf, pod map[string]string
		want      float64 // 0: no limit
		setBy     string  // with L for the leaf's directory, P for the pod's
	}{
		{name: "cpuset smaller than quota", leaf: map[string]string{"cpu.max": "400000 100000\n", "cpuset.cpus.effective": "0-1\n"}, want: 2, setBy: "cpuset L"},
		{name: "quota smaller than cpuset", leaf: map[string]string{"cpu.max": "50000 100000\n", "cpuset.cpus.effective": "0-1\n"}, want: 0.5, setBy: "L/cpu.max quota"},
		{name: "cpuset only", leaf: map[string]string{"cpuset.cpus.effective": "2,4-5\n"}, want: 3, setBy: "cpuset L"},
		{name: "cpuset of all online CPUs is no limit", leaf: map[string]string{"cpuset.cpus.effective": "0-7\n"}},
		{name: "quota at pod, tighter than leaf", leaf: map[string]string{"cpu.max": "300000 100000\n"}, pod: map[string]string{"cpu.max": "200000 100000\n"}, want: 2, setBy: "P/cpu.max quota"},
		{name: "cpuset from parent when the leaf has no cpuset controller", leaf: map[string]string{"cpuset.cpus.effective": "-"}, pod: map[string]string{"cpuset.cpus.effective": "0-3\n"}, want: 4, setBy: "cpuset P"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, pod, leaf := k8sV2(t, tc.leaf, tc.pod)
			c := f.collector()
			pts := collect(t, c)
			inf := c.Info()
			if tc.want == 0 {
				wantAbsent(t, pts, "container_cpu_limit_cores")
				if inf.CPULimitSetBy != NoLimit {
					t.Errorf("set by %q, want %q", inf.CPULimitSetBy, NoLimit)
				}
				return
			}
			wantValue(t, pts, "container_cpu_limit_cores", tc.want)
			setBy := strings.NewReplacer("cpuset L", "cpuset "+leaf, "cpuset P", "cpuset "+pod, "L/", leaf+"/", "P/", pod+"/").Replace(tc.setBy)
			if inf.CPULimitSetBy != setBy {
				t.Errorf("set by %q, want %q", inf.CPULimitSetBy, setBy)
			}
		})
	}
}

func TestV2CPUDelta(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cpuMax  string
		wantPct float64
	}{
		{name: "limit 1 core", cpuMax: "100000 100000\n", wantPct: 50},
		{name: "no limit, 8 CPUs", cpuMax: "max 100000\n", wantPct: 0.5 / 8 * 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _, leaf := k8sV2(t, map[string]string{"cpu.max": tc.cpuMax}, nil)
			c := f.collector()
			pts := collectTwice(t, c, 2*time.Second, func() {
				f.write(filepath.Join(leaf, "cpu.stat"), "usage_usec 6000000\nuser_usec 4800000\nsystem_usec 1200000\n"+
					"nr_periods 120\nnr_throttled 15\nthrottled_usec 700000\n")
			})
			wantValue(t, pts, "container_cpu_usage_cores", 0.5)
			wantValue(t, pts, "container_cpu_utilization_percentage", tc.wantPct)
			wantValue(t, pts, "container_cpu_throttled_periods_percentage", 25)
			// Cumulative, whatever the interval: the kernel's own total.
			wantValue(t, pts, "container_cpu_usage_seconds_total", 6)
			wantValue(t, pts, "container_cpu_throttled_seconds_total", 0.7)
			wantValue(t, pts, "container_cpu_throttled_periods_total", 15)
		})
	}
}

// Over a short window the counter's lag can make the rate pass every CPU
// the cgroup may use: never more than those (8 in the fixture) is reported.
func TestV2CPURateCappedAtCPUs(t *testing.T) {
	f, _, leaf := k8sV2(t, map[string]string{"cpu.max": "max 100000\n"}, nil)
	c := f.collector()
	pts := collectTwice(t, c, 50*time.Millisecond, func() {
		// 0.5 s of CPU in 50 ms: 10 cores on 8 CPUs.
		f.write(filepath.Join(leaf, "cpu.stat"), "usage_usec 5500000\nnr_periods 100\nnr_throttled 10\nthrottled_usec 500000\n")
	})
	wantValue(t, pts, "container_cpu_usage_cores", 8)
	wantValue(t, pts, "container_cpu_utilization_percentage", 100)
}

func TestV2CPUCounterReset(t *testing.T) {
	f, _, leaf := k8sV2(t, nil, nil)
	c := f.collector()
	pts := collectTwice(t, c, time.Second, func() {
		// The cgroup was recreated: counters restart from 0.
		f.write(filepath.Join(leaf, "cpu.stat"), "usage_usec 1000\nnr_periods 1\nnr_throttled 0\nthrottled_usec 0\n")
	})
	wantAbsent(t, pts, "container_cpu_usage_cores", "container_cpu_throttled_periods_percentage")
	wantValue(t, pts, "container_cpu_throttled_periods_total", 0)
}

func TestV2NoPeriodsNoThrottleShare(t *testing.T) {
	f, _, _ := k8sV2(t, nil, nil)
	c := f.collector()
	pts := collectTwice(t, c, time.Second, func() {})
	wantValue(t, pts, "container_cpu_usage_cores", 0)
	wantAbsent(t, pts, "container_cpu_throttled_periods_percentage")
}

func TestV2MalformedFileIsAnError(t *testing.T) {
	f, pod, _ := k8sV2(t, nil, map[string]string{"memory.max": "lots\n"})
	c := f.collector()
	pts, err := collecttest.Collect(context.Background(), c)
	if !errors.Is(err, ErrFormat) {
		t.Fatalf("err = %v, want ErrFormat", err)
	}
	if want := pod + "/memory.max"; !strings.Contains(err.Error(), want) {
		t.Errorf("err %q does not name %s", err, want)
	}
	if len(pts) == 0 {
		t.Error("the readable points were dropped with the error")
	}
}

// An unparsable v2 single value (a torn read, a kernel's new format) is
// absent and an error naming the file, never 0: containerd's reader read
// it as 0, which a chart shows as a measurement. The other series of the
// round still count.
func TestV2UnparsableValueIsAbsentNotZero(t *testing.T) {
	for _, tc := range []struct {
		file, content string
		absent        []string // what the file gives
		present       []string // the rest of the round
	}{
		{"memory.current", "lots\n", []string{"container_memory_working_set_megabytes", "container_memory_usage_megabytes",
			"container_memory_peak_megabytes", "container_memory_working_set_percentage"},
			[]string{"container_pids_count", "container_cpu_periods_total"}},
		{"memory.current", "max\n", []string{"container_memory_usage_megabytes"}, []string{"container_pids_count"}},
		{"memory.peak", "12ab\n", []string{"container_memory_peak_megabytes"},
			[]string{"container_memory_usage_megabytes", "container_memory_working_set_megabytes"}},
		{"memory.peak", "\n", []string{"container_memory_peak_megabytes"}, []string{"container_memory_usage_megabytes"}},
		{"pids.current", "many\n", []string{"container_pids_count", "container_pids_limit_count"},
			[]string{"container_memory_usage_megabytes"}},
		{"pids.max", "1.5e3\n", []string{"container_pids_limit_count"}, []string{"container_pids_count"}},
	} {
		t.Run(tc.file+" "+strings.TrimSpace(tc.content), func(t *testing.T) {
			leaf := map[string]string{tc.file: tc.content}
			if tc.file == "pids.max" || tc.file == "pids.current" {
				leaf["pids.max"] = "512\n" // a limit that would show
			}
			if tc.file == "pids.max" {
				leaf["pids.max"] = tc.content
			}
			f, _, ctr := k8sV2(t, leaf, map[string]string{"memory.max": "1073741824\n"})
			b := metrics.Batch{Explain: true}
			err := f.collector().Collect(context.Background(), &b)
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), filepath.Join(ctr, tc.file)) {
				t.Errorf("err = %v, want ErrFormat naming %s", err, filepath.Join(ctr, tc.file))
			}
			got := map[string]explained{}
			for i, p := range b.Points {
				got[p.Name()] = explained{p, b.Sources[i]}
			}
			wantAbsent(t, got, tc.absent...)
			for _, n := range tc.present {
				if _, ok := got[n]; !ok {
					t.Errorf("%s missing: the rest of the round must count", n)
				}
			}
		})
	}
}
