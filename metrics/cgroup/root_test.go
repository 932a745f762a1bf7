package cgroup

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// containerCPUSeries are the series of a container's CPU usage and
// throttling.
var containerCPUSeries = []string{"container_cpu_usage_cores", "container_cpu_utilization_percentage",
	"container_cpu_usage_seconds_total", "container_cpu_periods_total", "container_cpu_throttled_periods_total",
	"container_cpu_throttled_seconds_total", "container_cpu_throttled_periods_percentage", "container_cpu_limit_cores",
	"container_cpu_usage_limit_split_count"}

// A v1 host process as on this project's machines: its memory cgroup is a
// child (a job's), its cpu, cpuacct, cpuset and pids cgroups are the roots
// (cgroup.sane_behavior is there only), the unified one too. The root's
// counters are the host's: no container_cpu_ or container_pids_ series,
// under any reading; memory is read as usual; Info, Detect and
// rootSeries say which controllers and series.
func TestV1RootCPUCgroupIsNotAContainer(t *testing.T) {
	f := newFixture(t, ModeHybrid, 2)
	f.procCgroup("12:pids:/", "5:memory:/job/one", "4:cpu:/", "3:cpuacct:/", "2:cpuset:/", "0::/")
	mem := f.mountV1("memory", "memory", "/")
	cpu := f.mountV1("cpu", "cpu", "/")
	acct := f.mountV1("cpuacct", "cpuacct", "/")
	cpuset := f.mountV1("cpuset", "cpuset", "/")
	pids := f.mountV1("pids", "pids", "/")
	uni := f.mountV2("unified", "/")
	for _, d := range []string{mem, cpu, acct, cpuset, pids} {
		f.write(filepath.Join(d, "cgroup.sane_behavior"), "0\n")
	}
	f.files(mem, v1MemoryParent(), nil)
	f.files(filepath.Join(mem, "job/one"), v1Memory(), nil)
	f.files(cpu, v1CPU(), nil)
	f.files(acct, v1CPUAcct(), nil)
	f.write(filepath.Join(cpuset, "cpuset.effective_cpus"), "0-1\n")
	f.write(filepath.Join(pids, "cgroup.procs"), "1\n")
	f.files(uni, map[string]string{"cgroup.controllers": "\n", "cpu.stat": "usage_usec 99000000\n"}, nil)

	c := f.collector()
	clock := time.Unix(0, 0)
	c.now = func() time.Time { return clock }
	collect(t, c)
	f.write(filepath.Join(acct, "cpuacct.usage"), "6000000000\n")
	clock = clock.Add(time.Second)
	pts := collect(t, c)

	wantAbsent(t, pts, containerCPUSeries...)
	wantAbsent(t, pts, "container_pids_count", "container_pids_limit_count", "container_pids_max_events_count")
	wantValue(t, pts, "container_memory_working_set_megabytes", 200*mib/1e6)
	wantValue(t, pts, "container_memory_peak_megabytes", 400*mib/1e6)

	inf := c.Info()
	if want := []string{"cpu", "cpuacct", "cpuset", "pids", "unified"}; !reflect.DeepEqual(inf.AtRoot, want) {
		t.Errorf("Info.AtRoot = %q, want %q", inf.AtRoot, want)
	}
	note, _ := c.Detect(context.Background())["at_root"].(string)
	if !strings.Contains(note, "cpu, cpuacct, cpuset, pids and unified cgroups are the root cgroups") || !strings.Contains(note, "not sent") {
		t.Errorf("Detect at_root = %q", note)
	}
	rs := c.rootSeries()
	for _, d := range []*metrics.Desc{metrics.ContainerCPUUsage, metrics.ContainerCPUUtilization, metrics.ContainerCPUUsageSecondsTotal, metrics.ContainerCPUPeriodsTotal, metrics.ContainerCPULimit, metrics.ContainerPIDs, metrics.ContainerPressureMemorySome} {
		if !slices.Contains(rs, d) {
			t.Errorf("rootSeries lacks %s", d.Name)
		}
	}
	for _, d := range memorySeries {
		if slices.Contains(rs, d) {
			t.Errorf("rootSeries has %s, of a memory cgroup that is a child", d.Name)
		}
	}
	// The end-of-run table is told (metrics.Partial): the root's series,
	// and, off v2, the PSI series, which the kernel keeps per cgroup only
	// on v2, are never added here; why is the note.
	series, why := c.Unproduced()
	for _, d := range append(slices.Clone(rs), metrics.ContainerPressure.Descs()...) {
		if !slices.Contains(series, d) {
			t.Errorf("Unproduced lacks %s", d.Name)
		}
	}
	if why != note {
		t.Errorf("Unproduced says %q, want the note %q", why, note)
	}
	if tag := c.StartTags(context.Background())[TagAtRoot]; tag != note {
		t.Errorf("start tag %s = %q, want the note", TagAtRoot, tag)
	}
}

// A v2 process in the real root (no cgroup namespace: the root shows
// cgroup.controllers but no cgroup.events) has no container: nothing of
// memory, CPU or pids is sent. Under a cgroup namespace, whose root is
// the container's own cgroup ("0::/" too), everything is.
func TestV2RootCgroupIsNotAContainer(t *testing.T) {
	f := newFixture(t, ModeV2, 8)
	f.procCgroup("0::/")
	f.mountV2("", "/")
	f.files(f.cg, v2Root(), map[string]string{"memory.stat": v2Leaf()["memory.stat"], "cgroup.procs": "1\n",
		"pids.current": "400\n"})
	c := f.collector()
	collect(t, c)
	pts := collect(t, c)
	if len(pts) != 0 {
		t.Errorf("the root cgroup gave %d points, want none: %v", len(pts), pts)
	}
	if want := []string{"cpu", "cpuset", "memory", "pids", "unified"}; !reflect.DeepEqual(c.Info().AtRoot, want) {
		t.Errorf("Info.AtRoot = %q, want %q", c.Info().AtRoot, want)
	}
	if len(c.rootSeries()) != len(Series) {
		t.Errorf("rootSeries has %d of the %d series", len(c.rootSeries()), len(Series))
	}

	ns := newFixture(t, ModeV2, 8)
	ns.procCgroup("0::/")
	ns.mountV2("", "/")
	ns.files(ns.cg, v2Leaf(), nil)
	c = ns.collector()
	if at := c.Info().AtRoot; len(at) != 0 || len(c.rootSeries()) != 0 {
		t.Errorf("a cgroup namespace's root: AtRoot %q, rootSeries %d; want none", at, len(c.rootSeries()))
	}
	if _, ok := c.Detect(context.Background())["at_root"]; ok {
		t.Error("Detect says at_root for a cgroup namespace's root")
	}
	// On v2, with no root cgroup, every series may be added.
	if series, why := c.Unproduced(); len(series) != 0 || why != "" {
		t.Errorf("a cgroup namespace's root: Unproduced %d series, %q; want none", len(series), why)
	}
	if _, ok := c.StartTags(context.Background())[TagAtRoot]; ok {
		t.Errorf("start tag %s for a cgroup namespace's root", TagAtRoot)
	}
}
