package cgroup

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

const fixturePID = 4242

// fixture is a fake /proc and /sys/fs/cgroup under t.TempDir(), shaped like the
// kernel's files.
type fixture struct {
	t     *testing.T
	proc  string // <tmp>/proc
	cg    string // <tmp>/sys/fs/cgroup
	mode  Mode
	mount []string
}

func newFixture(t *testing.T, mode Mode, onlineCPUs int) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{t: t, proc: filepath.Join(root, "proc"), cg: filepath.Join(root, "sys", "fs", "cgroup"), mode: mode}
	var stat strings.Builder
	stat.WriteString("cpu  100 0 100 1000 0 0 0 0 0 0\n")
	for i := 0; i < onlineCPUs; i++ {
		fmt.Fprintf(&stat, "cpu%d 50 0 50 500 0 0 0 0 0 0\n", i)
	}
	stat.WriteString("intr 0\nctxt 0\nbtime 1700000000\nprocesses 1\nprocs_running 1\nprocs_blocked 0\n")
	f.write(filepath.Join(f.proc, "stat"), stat.String())
	return f
}

func (f *fixture) write(path, content string) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// procCgroup writes /proc/<pid>/cgroup.
func (f *fixture) procCgroup(lines ...string) {
	f.write(filepath.Join(f.proc, fmt.Sprint(fixturePID), "cgroup"), strings.Join(lines, "\n")+"\n")
}

// mountV2 adds a cgroup2 mount of hierarchy root `root` at <cg>/sub.
func (f *fixture) mountV2(sub, root string) string {
	mp := filepath.Join(f.cg, sub)
	f.mount = append(f.mount, fmt.Sprintf("%d 25 0:26 %s %s rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot",
		30+len(f.mount), root, mp))
	f.writeMountinfo()
	return mp
}

// mountV1 adds a v1 mount of `controllers` (comma separated) at <cg>/<dir>.
func (f *fixture) mountV1(dir, controllers, root string) string {
	mp := filepath.Join(f.cg, dir)
	f.mount = append(f.mount, fmt.Sprintf("%d 25 0:%d %s %s rw,nosuid,nodev,noexec,relatime shared:%d - cgroup cgroup rw,%s",
		30+len(f.mount), 40+len(f.mount), root, mp, 10+len(f.mount), controllers))
	f.writeMountinfo()
	return mp
}

func (f *fixture) writeMountinfo() {
	lines := append([]string{
		"22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w",
		"25 22 0:24 / " + f.cg + " rw,nosuid,nodev,noexec - tmpfs tmpfs rw,mode=755",
	}, f.mount...)
	f.write(filepath.Join(f.proc, fmt.Sprint(fixturePID), "mountinfo"), strings.Join(lines, "\n")+"\n")
}

// files writes name -> content into dir, over defaults.
func (f *fixture) files(dir string, defaults, over map[string]string) {
	for name, v := range defaults {
		if _, ok := over[name]; !ok {
			f.write(filepath.Join(dir, name), v)
		}
	}
	for name, v := range over {
		if v == "-" { // "-" means the file is absent
			continue
		}
		f.write(filepath.Join(dir, name), v)
	}
}

const mib = 1 << 20

// v2Leaf is a non-root v2 cgroup with memory, cpu, cpuset, pids enabled:
// 300 MiB current, 100 MiB inactive file.
func v2Leaf() map[string]string {
	return map[string]string{
		"cgroup.events":  "populated 1\nfrozen 0\n",
		"cgroup.procs":   "1\n",
		"memory.current": fmt.Sprintln(300 * mib),
		"memory.max":     "max\n",
		"memory.peak":    fmt.Sprintln(400 * mib),
		"memory.stat": fmt.Sprintf("anon %d\nfile %d\nkernel 1048576\nkernel_stack 65536\nshmem 0\nfile_mapped 4096\n"+
			"inactive_anon 0\nactive_anon %d\ninactive_file %d\nactive_file %d\nunevictable 0\npgfault 10\n",
			150*mib, 140*mib, 150*mib, 100*mib, 40*mib),
		"memory.events":         "low 0\nhigh 0\nmax 3\noom 2\noom_kill 1\noom_group_kill 0\n",
		"memory.pressure":       "some avg10=1.50 avg60=0.80 avg300=0.20 total=12345\nfull avg10=0.75 avg60=0.40 avg300=0.10 total=6789\n",
		"cpu.max":               "max 100000\n",
		"cpu.stat":              "usage_usec 5000000\nuser_usec 4000000\nsystem_usec 1000000\nnr_periods 100\nnr_throttled 10\nthrottled_usec 200000\n",
		"cpu.pressure":          "some avg10=2.00 avg60=1.00 avg300=0.50 total=1000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"io.pressure":           "some avg10=0.25 avg60=0.10 avg300=0.00 total=100\nfull avg10=0.125 avg60=0.05 avg300=0.00 total=50\n",
		"cpuset.cpus.effective": "0-7\n",
		"pids.current":          "7\n",
		"pids.max":              "max\n",
		"pids.events":           "max 4\n",
	}
}

// v2Parent is an intermediate v2 cgroup (pod, slice): limits only.
func v2Parent() map[string]string {
	return map[string]string{
		"cgroup.events":         "populated 1\nfrozen 0\n",
		"memory.max":            "max\n",
		"cpu.max":               "max 100000\n",
		"cpuset.cpus.effective": "0-7\n",
		"pids.max":              "max\n",
	}
}

// v2Root is the v2 hierarchy's real root: no memory.max, cpu.max, events.
func v2Root() map[string]string {
	return map[string]string{
		"cgroup.controllers":    "cpuset cpu io memory pids\n",
		"cpu.stat":              "usage_usec 99000000\n",
		"cpuset.cpus.effective": "0-7\n",
	}
}

// v1Memory is a v1 memory cgroup: 300 MiB usage, 100 MiB total inactive file.
func v1Memory() map[string]string {
	return map[string]string{
		"memory.usage_in_bytes":     fmt.Sprintln(300 * mib),
		"memory.max_usage_in_bytes": fmt.Sprintln(400 * mib),
		"memory.limit_in_bytes":     "9223372036854771712\n",
		"memory.failcnt":            "0\n",
		"memory.stat": fmt.Sprintf("cache %d\nrss %d\nrss_huge 0\nshmem 0\nmapped_file 4096\ndirty 0\nwriteback 0\n"+
			"inactive_anon 0\nactive_anon %d\ninactive_file %d\nactive_file %d\nunevictable 0\n"+
			"hierarchical_memory_limit 9223372036854771712\nhierarchical_memsw_limit 9223372036854771712\n"+
			"total_cache %d\ntotal_rss %d\ntotal_rss_huge 0\ntotal_inactive_anon 0\ntotal_active_anon %d\n"+
			"total_inactive_file %d\ntotal_active_file %d\ntotal_unevictable 0\n",
			140*mib, 150*mib, 150*mib, 100*mib, 40*mib, 140*mib, 150*mib, 150*mib, 100*mib, 40*mib),
		"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		"cgroup.procs":       "1\n",
	}
}

func v1MemoryParent() map[string]string {
	return map[string]string{"memory.limit_in_bytes": "9223372036854771712\n"}
}

func v1CPU() map[string]string {
	return map[string]string{
		"cpu.cfs_quota_us":  "-1\n",
		"cpu.cfs_period_us": "100000\n",
		"cpu.stat":          "nr_periods 100\nnr_throttled 10\nthrottled_time 200000000\nnr_bursts 0\nburst_time 0\n",
	}
}

func v1CPUAcct() map[string]string {
	return map[string]string{
		"cpuacct.usage":        "5000000000\n",
		"cpuacct.stat":         "user 400\nsystem 100\n",
		"cpuacct.usage_percpu": "2500000000 2500000000\n",
	}
}

func (f *fixture) collector() *Collector {
	f.t.Helper()
	c, err := newCollector(Options{ProcRoot: f.proc, CgroupRoot: f.cg, PID: fixturePID, Mode: f.mode, Log: testLog(f.t)})
	if err != nil {
		f.t.Fatalf("FindLayout: %v", err)
	}
	return c
}

// newCollector finds the layout opts say and returns its collector.
func newCollector(opts Options) (*Collector, error) {
	l, err := FindLayout(opts)
	if err != nil {
		return nil, err
	}
	return New(l, opts.Log), nil
}

func testLog(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// explained is a point and where it came from.
type explained struct {
	metrics.Point
	Source string
}

// collect runs Collect, asking for each point's source, and indexes the
// points by name. Each must be one the registration declares.
func collect(t *testing.T, c *Collector) map[string]explained {
	t.Helper()
	b := metrics.Batch{Explain: true}
	if err := c.Collect(context.Background(), &b); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]explained{}
	for i, p := range b.Points {
		if _, dup := out[p.Name()]; dup {
			t.Errorf("point %s twice", p.Name())
		}
		if !slices.Contains(Series, p.Desc) {
			t.Errorf("%s is not among Series", p.Name())
		}
		if b.Sources[i] == "" {
			t.Errorf("%s: no source", p.Name())
		}
		out[p.Name()] = explained{p, b.Sources[i]}
	}
	return out
}

// collectTwice takes two readings `wall` apart on a fake clock; between
// them, step rewrites the counters.
func collectTwice(t *testing.T, c *Collector, wall time.Duration, step func()) map[string]explained {
	t.Helper()
	clock := time.Unix(1700000000, 0)
	c.now = func() time.Time { return clock }
	first := collect(t, c)
	for name := range first {
		if isDelta(name) {
			t.Errorf("first Collect has delta point %s", name)
		}
	}
	step()
	clock = clock.Add(wall)
	return collect(t, c)
}

func isDelta(name string) bool {
	switch name {
	case "container_cpu_usage_cores", "container_cpu_utilization_percentage",
		"container_cpu_throttled_periods_percentage":
		return true
	}
	return false
}

func wantValue(t *testing.T, pts map[string]explained, name string, want float64) {
	t.Helper()
	p, ok := pts[name]
	if !ok {
		t.Errorf("%s missing", name)
		return
	}
	if math.Abs(p.Value-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %v (source %s)", name, p.Value, want, p.Source)
	}
}

func wantAbsent(t *testing.T, pts map[string]explained, names ...string) {
	t.Helper()
	for _, n := range names {
		if p, ok := pts[n]; ok {
			t.Errorf("%s = %v present (source %s), want absent", n, p.Value, p.Source)
		}
	}
}

func wantSource(t *testing.T, pts map[string]explained, name, want string) {
	t.Helper()
	if p, ok := pts[name]; ok && p.Source != want {
		t.Errorf("%s source = %q, want %q", name, p.Source, want)
	}
}
