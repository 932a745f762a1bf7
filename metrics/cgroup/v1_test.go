package cgroup

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// newV1 builds a v1 host: memory, cpu+cpuacct (co-mounted), cpuset and
// pids hierarchies, the process in /kubepods/pod1/ctr, mounted whole.
// newV1's tree.
type v1Tree struct {
	f                          *fixture
	mem, cpu, cpuset, pids     string // mount points
	memLeaf, memPod            string
	cpuLeaf, cpusetLeaf, pidsL string
}

func newV1(t *testing.T, mode Mode, memLeaf, memPod, cpuLeaf map[string]string) v1Tree {
	f := newFixture(t, mode, 8)
	const path = "/kubepods/pod1/ctr"
	lines := []string{
		"12:pids:" + path,
		"5:memory:" + path,
		"3:cpu,cpuacct:" + path,
		"2:cpuset:" + path,
		"1:name=systemd:" + path,
	}
	if mode == ModeHybrid {
		lines = append(lines, "0::/")
	}
	f.procCgroup(lines...)
	v := v1Tree{f: f}
	v.mem = f.mountV1("memory", "memory", "/")
	v.cpu = f.mountV1("cpu,cpuacct", "cpu,cpuacct", "/")
	v.cpuset = f.mountV1("cpuset", "cpuset", "/")
	v.pids = f.mountV1("pids", "pids", "/")
	f.mountV1("systemd", "name=systemd", "/")

	f.files(v.mem, v1MemoryParent(), nil)
	f.files(filepath.Join(v.mem, "kubepods"), v1MemoryParent(), nil)
	v.memPod = filepath.Join(v.mem, "kubepods/pod1")
	f.files(v.memPod, v1MemoryParent(), memPod)
	v.memLeaf = filepath.Join(v.memPod, "ctr")
	f.files(v.memLeaf, v1Memory(), memLeaf)

	v.cpuLeaf = filepath.Join(v.cpu, path)
	f.files(v.cpu, v1CPU(), nil)
	f.files(v.cpuLeaf, v1CPU(), cpuLeaf)
	f.files(v.cpuLeaf, v1CPUAcct(), nil)

	f.write(filepath.Join(v.cpuset, "cpuset.effective_cpus"), "0-7\n")
	v.cpusetLeaf = filepath.Join(v.cpuset, path)
	f.write(filepath.Join(v.cpusetLeaf, "cpuset.effective_cpus"), "0-7\n")
	if c, ok := cpuLeaf["cpuset.effective_cpus"]; ok {
		f.write(filepath.Join(v.cpusetLeaf, "cpuset.effective_cpus"), c)
	}

	v.pidsL = filepath.Join(v.pids, path)
	f.write(filepath.Join(v.pidsL, "pids.current"), "3\n")
	f.write(filepath.Join(v.pidsL, "pids.max"), "max\n")
	return v
}

func TestV1NoLimit(t *testing.T) {
	v := newV1(t, ModeV1, nil, nil, nil)
	c := v.f.collector()
	pts := collect(t, c)

	wantValue(t, pts, "container_memory_working_set_megabytes", 200*mib/1e6)
	wantSource(t, pts, "container_memory_working_set_megabytes", v.memLeaf+"/memory.usage_in_bytes, memory.stat total_inactive_file")
	wantValue(t, pts, "container_memory_usage_megabytes", 300*mib/1e6)
	wantValue(t, pts, "container_memory_rss_megabytes", 150*mib/1e6)
	wantValue(t, pts, "container_memory_cache_megabytes", 140*mib/1e6)
	wantValue(t, pts, "container_memory_peak_megabytes", 400*mib/1e6)
	wantValue(t, pts, "container_memory_oom_kill_events_count", 2)
	wantValue(t, pts, "container_memory_max_events_count", 0)
	wantSource(t, pts, "container_memory_max_events_count", v.memLeaf+"/memory.failcnt")
	wantValue(t, pts, "container_pids_count", 3)
	// 9223372036854771712 everywhere is no limit; v1 has no PSI and no
	// count of OOM situations.
	wantAbsent(t, pts, "container_memory_limit_megabytes", "container_memory_working_set_percentage",
		"container_cpu_limit_cores", "container_memory_oom_events_count", "container_memory_oom_group_kill_events_count",
		"container_pressure_memory_some_avg10_percentage", "container_pids_limit_count")

	d := c.Detect(context.Background())
	if d["version"] != "v1" || d["memory_limit_set_by"] != NoLimit || d["cpu_limit_set_by"] != NoLimit {
		t.Errorf("Detect = %v", d)
	}
	paths := d["paths"].(map[string]string)
	for ctl, want := range map[string]string{"memory": v.memLeaf, "cpu": v.cpuLeaf, "cpuacct": v.cpuLeaf, "cpuset": v.cpusetLeaf, "pids": v.pidsL} {
		if paths[ctl] != want {
			t.Errorf("paths[%s] = %q, want %q", ctl, paths[ctl], want)
		}
	}
	if _, ok := paths["unified"]; ok {
		t.Errorf("v1 host has a unified path: %v", paths)
	}
}

func TestV1LimitAtAncestor(t *testing.T) {
	v := newV1(t, ModeV1, nil, map[string]string{"memory.limit_in_bytes": "536870912\n"}, nil)
	// The kernel also shows the ancestor's limit in the leaf's stat.
	stat := v1Memory()["memory.stat"]
	v.f.write(filepath.Join(v.memLeaf, "memory.stat"), replaceLine(stat, "hierarchical_memory_limit", "536870912"))
	pts := collect(t, v.f.collector())
	wantValue(t, pts, "container_memory_limit_megabytes", 536870912/1e6)
	wantSource(t, pts, "container_memory_limit_megabytes", v.memPod+"/memory.limit_in_bytes")
	wantValue(t, pts, "container_memory_working_set_percentage", 200.0/512*100)
}

// hierarchical_memory_limit sees ancestors that a bind mount hides.
func TestV1HierarchicalLimit(t *testing.T) {
	f := newFixture(t, ModeV1, 8)
	f.procCgroup("5:memory:/kubepods/pod1/ctr")
	mem := f.mountV1("memory", "memory", "/kubepods/pod1/ctr")
	stat := replaceLine(v1Memory()["memory.stat"], "hierarchical_memory_limit", "1073741824")
	f.files(mem, v1Memory(), map[string]string{"memory.stat": stat})
	pts := collect(t, f.collector())
	wantValue(t, pts, "container_memory_limit_megabytes", 1073741824/1e6)
	wantSource(t, pts, "container_memory_limit_megabytes", mem+"/memory.stat hierarchical_memory_limit (an ancestor outside this view)")
}

// With memory.use_hierarchy=0 an ancestor's limit does not apply to the
// leaf, and the kernel's hierarchical_memory_limit (unlimited here) says so:
// the ancestor's memory.limit_in_bytes must not be taken.
func TestV1AncestorLimitWithoutHierarchy(t *testing.T) {
	v := newV1(t, ModeV1, map[string]string{"memory.use_hierarchy": "0\n"},
		map[string]string{"memory.limit_in_bytes": "536870912\n", "memory.use_hierarchy": "0\n"}, nil)
	c := v.f.collector()
	pts := collect(t, c)
	wantAbsent(t, pts, "container_memory_limit_megabytes", "container_memory_working_set_percentage")
	if inf := c.Info(); inf.MemoryLimitBytes != 0 || inf.MemoryLimitSetBy != NoLimit {
		t.Errorf("Info limit = %d set by %q, want no limit", inf.MemoryLimitBytes, inf.MemoryLimitSetBy)
	}
}

// Kernels before 4.13 write no oom_kill key: the counter is absent, not 0.
func TestV1NoOOMKillKey(t *testing.T) {
	v := newV1(t, ModeV1, map[string]string{"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n"}, nil, nil)
	pts := collect(t, v.f.collector())
	wantAbsent(t, pts, "container_memory_oom_kill_events_count")
	wantValue(t, pts, "container_memory_working_set_megabytes", 200*mib/1e6)
}

// cpu and cpuacct mounted apart, placing the process in different cgroups:
// usage and limit are reported, never divided, and the split is named.
func TestV1CPUAndCPUAcctApart(t *testing.T) {
	f := newFixture(t, ModeV1, 8)
	f.procCgroup("4:cpuacct:/", "3:cpu:/limited")
	acct := f.mountV1("cpuacct", "cpuacct", "/")
	cpu := f.mountV1("cpu", "cpu", "/")
	f.files(acct, v1CPUAcct(), nil)
	f.files(cpu, v1CPU(), nil)
	lim := filepath.Join(cpu, "limited")
	f.files(lim, v1CPU(), map[string]string{"cpu.cfs_quota_us": "50000\n"})
	c := f.collector()
	pts := collectTwice(t, c, time.Second, func() { f.write(filepath.Join(acct, "cpuacct.usage"), "6650000000\n") })
	wantValue(t, pts, "container_cpu_usage_cores", 1.65)
	wantValue(t, pts, "container_cpu_limit_cores", 0.5)
	wantValue(t, pts, "container_cpu_usage_limit_split_count", 1)
	wantAbsent(t, pts, "container_cpu_utilization_percentage")
	inf := c.Info()
	if !strings.Contains(inf.CPUSplit, acct) || !strings.Contains(inf.CPUSplit, lim) {
		t.Errorf("CPUSplit = %q, want both %s and %s", inf.CPUSplit, acct, lim)
	}
	if d := c.Detect(context.Background()); d["cpu_usage_limit_split"] != inf.CPUSplit {
		t.Errorf("Detect cpu_usage_limit_split = %v", d["cpu_usage_limit_split"])
	}
}

// Docker on v1 bind-mounts the container's own cgroup at /sys/fs/cgroup/<ctl>.
func TestV1BindMountedRoot(t *testing.T) {
	f := newFixture(t, ModeV1, 8)
	const path = "/docker/0123abcd"
	f.procCgroup("5:memory:"+path, "3:cpu,cpuacct:"+path)
	mem := f.mountV1("memory", "memory", path)
	cpu := f.mountV1("cpu,cpuacct", "cpu,cpuacct", path)
	f.files(mem, v1Memory(), map[string]string{"memory.limit_in_bytes": "268435456\n",
		"memory.stat": replaceLine(v1Memory()["memory.stat"], "hierarchical_memory_limit", "268435456")})
	f.files(cpu, v1CPU(), map[string]string{"cpu.cfs_quota_us": "50000\n"})
	f.files(cpu, v1CPUAcct(), nil)
	c := f.collector()
	pts := collect(t, c)
	wantValue(t, pts, "container_memory_limit_megabytes", 268.435456)
	wantSource(t, pts, "container_memory_limit_megabytes", mem+"/memory.limit_in_bytes")
	wantValue(t, pts, "container_cpu_limit_cores", 0.5)
	wantSource(t, pts, "container_cpu_limit_cores", cpu+"/cpu.cfs_quota_us quota")
	if inf := c.Info(); inf.Paths["memory"] != mem || inf.Paths["cpu"] != cpu {
		t.Errorf("paths = %v, want the mount points", inf.Paths)
	}
}

func TestV1CPULimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leaf  map[string]string
		want  float64
		isSet bool // cpuset, else quota
	}{
		{name: "cpuset smaller than quota", leaf: map[string]string{"cpu.cfs_quota_us": "400000\n", "cpuset.effective_cpus": "0-1\n"}, want: 2, isSet: true},
		{name: "quota smaller than cpuset", leaf: map[string]string{"cpu.cfs_quota_us": "150000\n", "cpuset.effective_cpus": "0-3\n"}, want: 1.5},
		{name: "no quota (-1), all CPUs", leaf: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newV1(t, ModeV1, nil, nil, tc.leaf)
			c := v.f.collector()
			pts := collect(t, c)
			inf := c.Info()
			switch {
			case tc.want == 0:
				wantAbsent(t, pts, "container_cpu_limit_cores")
				if inf.CPULimitSetBy != NoLimit {
					t.Errorf("set by %q", inf.CPULimitSetBy)
				}
			case tc.isSet:
				wantValue(t, pts, "container_cpu_limit_cores", tc.want)
				if want := "cpuset " + v.cpusetLeaf; inf.CPULimitSetBy != want {
					t.Errorf("set by %q, want %q", inf.CPULimitSetBy, want)
				}
			default:
				wantValue(t, pts, "container_cpu_limit_cores", tc.want)
				if want := v.cpuLeaf + "/cpu.cfs_quota_us quota"; inf.CPULimitSetBy != want {
					t.Errorf("set by %q, want %q", inf.CPULimitSetBy, want)
				}
			}
		})
	}
}

func TestV1CPUDelta(t *testing.T) {
	v := newV1(t, ModeV1, nil, nil, map[string]string{"cpu.cfs_quota_us": "50000\n"})
	c := v.f.collector()
	pts := collectTwice(t, c, 2*time.Second, func() {
		v.f.write(filepath.Join(v.cpuLeaf, "cpuacct.usage"), "6000000000\n")
		v.f.write(filepath.Join(v.cpuLeaf, "cpu.stat"), "nr_periods 110\nnr_throttled 15\nthrottled_time 400000000\nnr_bursts 0\nburst_time 0\n")
	})
	wantValue(t, pts, "container_cpu_usage_cores", 0.5)
	wantSource(t, pts, "container_cpu_usage_cores", v.cpuLeaf+"/cpuacct.usage")
	wantValue(t, pts, "container_cpu_limit_cores", 0.5)
	wantValue(t, pts, "container_cpu_utilization_percentage", 100)
	wantValue(t, pts, "container_cpu_throttled_periods_percentage", 50)
	wantValue(t, pts, "container_cpu_usage_seconds_total", 6)
	wantValue(t, pts, "container_cpu_throttled_seconds_total", 0.4)
	wantValue(t, pts, "container_cpu_throttled_periods_total", 15)
	wantValue(t, pts, "container_cpu_periods_total", 110)
}

// Hybrid: memory and cpu bound to v1 are read there; the unified leaf is
// the real root here (no cgroup.events), whose PSI is node-wide: omitted.
func TestHybridRootUnified(t *testing.T) {
	v := newV1(t, ModeHybrid, map[string]string{"memory.stat": replaceLine(v1Memory()["memory.stat"], "hierarchical_memory_limit", "268435456")},
		map[string]string{"memory.limit_in_bytes": "268435456\n"}, nil)
	uni := v.f.mountV2("unified", "/")
	v.f.files(uni, map[string]string{
		"cgroup.controllers": "\n",
		"cpu.stat":           "usage_usec 99000000\n",
		"cpu.pressure":       "some avg10=9.00 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"memory.pressure":    "some avg10=9.00 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
	}, nil)
	c := v.f.collector()
	clock := time.Unix(0, 0)
	c.now = func() time.Time { return clock }
	collect(t, c)
	v.f.write(filepath.Join(v.cpuLeaf, "cpuacct.usage"), "5500000000\n")
	clock = clock.Add(time.Second)
	pts := collect(t, c)

	wantValue(t, pts, "container_memory_limit_megabytes", 268.435456)
	wantSource(t, pts, "container_memory_working_set_megabytes", v.memLeaf+"/memory.usage_in_bytes, memory.stat total_inactive_file")
	wantValue(t, pts, "container_cpu_usage_cores", 0.5) // from v1 cpuacct, not the v2 root's cpu.stat
	wantAbsent(t, pts, "container_pressure_cpu_some_avg10_percentage", "container_pressure_memory_some_avg10_percentage")
	inf := c.Info()
	if inf.Version != ModeHybrid || inf.Paths["unified"] != uni || inf.Paths["memory"] != v.memLeaf || inf.Paths["cpu"] != v.cpuLeaf {
		t.Errorf("Info = %+v", inf)
	}
}

// Hybrid with systemd's unified leaf (a real v2 cgroup): PSI comes from it.
func TestHybridUnifiedLeafPSI(t *testing.T) {
	v := newV1(t, ModeHybrid, nil, nil, nil)
	lines := []string{"5:memory:/kubepods/pod1/ctr", "3:cpu,cpuacct:/kubepods/pod1/ctr", "0::/system.slice/job.service"}
	v.f.procCgroup(lines...)
	uni := v.f.mountV2("unified", "/")
	leaf := filepath.Join(uni, "system.slice/job.service")
	v.f.files(leaf, map[string]string{
		"cgroup.events":   "populated 1\nfrozen 0\n",
		"cpu.stat":        "usage_usec 1\n",
		"memory.pressure": "some avg10=4.25 avg60=0.00 avg300=0.00 total=1\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=0\n",
	}, nil)
	pts := collect(t, v.f.collector())
	wantValue(t, pts, "container_pressure_memory_some_avg10_percentage", 4.25)
	wantValue(t, pts, "container_pressure_memory_full_avg10_percentage", 1)
	wantAbsent(t, pts, "container_pressure_cpu_some_avg10_percentage", "container_pressure_io_some_avg10_percentage")
	wantValue(t, pts, "container_memory_usage_megabytes", 300*mib/1e6)
}

func replaceLine(s, key, value string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, key+" ") {
			lines[i] = key + " " + value
		}
	}
	return strings.Join(lines, "\n")
}
