package cgroup

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

// containerd's rule, read from mountinfo for a root other than
// /sys/fs/cgroup: what is mounted at the root decides, not what files are
// there.
func TestModeOfMounts(t *testing.T) {
	const root = "/host/sys/fs/cgroup"
	m := func(fs, mp string) *procfs.MountInfo { return &procfs.MountInfo{FSType: fs, MountPoint: mp} }
	overlay := m("overlay", "/")
	for _, tc := range []struct {
		name   string
		mounts []*procfs.MountInfo
		want   Mode
	}{
		{"v2", []*procfs.MountInfo{overlay, m("cgroup2", root)}, ModeV2},
		{"v2, root with a trailing slash", []*procfs.MountInfo{m("cgroup2", root+"/")}, ModeV2},
		{"v1", []*procfs.MountInfo{m("tmpfs", root), m("cgroup", root+"/memory"), m("cgroup", root+"/cpu,cpuacct")}, ModeV1},
		{"hybrid", []*procfs.MountInfo{m("tmpfs", root), m("cgroup", root+"/memory"), m("cgroup2", root+"/unified")}, ModeHybrid},
		{"cgroup2 elsewhere", []*procfs.MountInfo{m("cgroup2", "/sys/fs/cgroup")}, ModeUnavailable},
		{"a sibling that shares the prefix", []*procfs.MountInfo{m("cgroup", root+"-old/memory")}, ModeUnavailable},
		{"nothing", []*procfs.MountInfo{overlay}, ModeUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := modeOfMounts(tc.mounts, root); got != tc.want {
				t.Errorf("modeOfMounts = %s, want %s", got, tc.want)
			}
		})
	}
}

// New without a Mode, on fixture roots: the layout comes from the
// fixture's own mountinfo, and the collector reads it.
func TestNewFindsModeOfFixtureRoot(t *testing.T) {
	for _, tc := range []struct {
		want  Mode
		build func(t *testing.T) *fixture
	}{
		{ModeV2, func(t *testing.T) *fixture { f, _, _ := k8sV2(t, nil, nil); return f }},
		{ModeV1, func(t *testing.T) *fixture { return newV1(t, ModeV1, nil, nil, nil).f }},
		{ModeHybrid, func(t *testing.T) *fixture {
			v := newV1(t, ModeHybrid, nil, nil, nil)
			v.f.mountV2("unified", "/")
			return v.f
		}},
	} {
		t.Run(string(tc.want), func(t *testing.T) {
			f := tc.build(t)
			c, err := newCollector(Options{ProcRoot: f.proc, CgroupRoot: f.cg, PID: fixturePID, Log: testLog(t)})
			if err != nil {
				t.Fatal(err)
			}
			if v := c.Tags()[metrics.TagCgroupVersion]; v != string(tc.want) {
				t.Errorf("%s = %s, want %s", metrics.TagCgroupVersion, v, tc.want)
			}
			wantValue(t, collect(t, c), "container_memory_usage_megabytes", 300*mib/1e6)
		})
	}

	// No cgroup filesystem mounted under the root: unavailable, saying
	// where bridge looked.
	f := newFixture(t, "", 2)
	f.procCgroup("0::/")
	f.writeMountinfo()
	_, err := newCollector(Options{ProcRoot: f.proc, CgroupRoot: f.cg, PID: fixturePID, Log: testLog(t)})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "mountinfo") {
		t.Errorf("New on a root with no cgroup mount: %v, want ErrUnavailable naming the mountinfo read", err)
	}
}

// The end-of-run table names the high-water mark's file from the layout:
// the memory controller's hierarchy decides (v1 on hybrid hosts).
func TestPeakFile(t *testing.T) {
	f2, _, _ := k8sV2(t, nil, nil)
	hybrid := newV1(t, ModeHybrid, nil, nil, nil)
	hybrid.f.mountV2("unified", "/")
	for _, tc := range []struct {
		name string
		f    *fixture
		want string
	}{
		{"v2", f2, "memory.peak"},
		{"v1", newV1(t, ModeV1, nil, nil, nil).f, "memory.max_usage_in_bytes"},
		{"hybrid", hybrid.f, "memory.max_usage_in_bytes"},
	} {
		c := tc.f.collector()
		if got := c.PeakFile(); got != tc.want {
			t.Errorf("%s: PeakFile = %q, want %q", tc.name, got, tc.want)
		}
		if p, ok := collect(t, c)["container_memory_peak_megabytes"]; !ok || !strings.HasSuffix(p.Source, "/"+tc.want) {
			t.Errorf("%s: the peak read from %q (%v), want %s", tc.name, p.Source, ok, tc.want)
		}
	}
}
