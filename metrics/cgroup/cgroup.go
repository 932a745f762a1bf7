// Package cgroup reads the container scope: the cgroup that bridge (and so its
// child, which inherits it) runs in, on cgroup v2, v1 and hybrid hosts.
//
// The layout is found once (FindLayout, locate.go): the mode by containerd's
// github.com/containerd/cgroups/v3, the leaf cgroup from <proc>/<pid>/cgroup
// and the mount points from <proc>/<pid>/mountinfo (both through procfs),
// so cgroup namespaces ("0::/") and bind-mounted subtrees resolve to the
// directories this process can actually see; the process collector looks
// for the child's tree in the same layout. The per-sample files are read
// directly, only the keys the series use, through descriptors kept open and
// re-read with pread (files.go). Limits (memory.max, cpu.max,
// cpu.cfs_quota_us, cpusets) are read directly, from the leaf and every
// visible ancestor, because the kernel enforces the tightest of them.
// Formulas follow cAdvisor/kubelet (working set = usage - inactive file).
package cgroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// Mode is the cgroup layout of a host.
type Mode string

// Modes. The zero Mode in Options means: detect it (see Options.Mode).
const (
	ModeV1          Mode = "v1"          // legacy: one hierarchy per controller
	ModeV2          Mode = "v2"          // unified
	ModeHybrid      Mode = "hybrid"      // v1 controllers plus a (often empty) v2 at <root>/unified
	ModeUnavailable Mode = "unavailable" // no cgroupfs
)

// ErrUnavailable is returned by FindLayout when the process has no cgroup this
// collector can read (no cgroupfs, no /proc/<pid>/cgroup).
var ErrUnavailable = errors.New("no readable cgroup")

// Info is what the collector found, typed for run tags.
type Info struct {
	Version Mode
	// Paths maps a controller (memory, cpu, cpuacct, cpuset, pids, unified)
	// to the absolute directory read for it.
	Paths map[string]string
	// MemoryLimitBytes is the tightest memory limit of the leaf and its
	// visible ancestors; 0 when there is none.
	MemoryLimitBytes uint64
	// MemoryLimitSetBy is the file that set it, or "no limit".
	MemoryLimitSetBy string
	// CPULimitCores is min(quota/period, cpuset size) over the leaf and its
	// visible ancestors; 0 when there is none.
	CPULimitCores float64
	// CPULimitSetBy is "<dir>/cpu.max quota", "<dir>/cpu.cfs_quota_us quota",
	// "cpuset <dir>" or "no limit".
	CPULimitSetBy string
	// CPUSplit is set on v1 when the cpu and cpuacct hierarchies place the
	// process in different cgroups: CPU usage (cpuacct) and the CPU limit
	// (cpu) are then not one container's, and no utilization is computed.
	// It says which directory each comes from; "" when they agree.
	CPUSplit string
	// AtRoot are the controllers whose cgroup is the root of its
	// hierarchy (Layout.AtRoot): their series are not read (rootSeries).
	AtRoot []string
}

// NoLimit is the SetBy value when no limit was found.
const NoLimit = "no limit"

// Collector reads the container scope. It follows metrics.Collector's
// contract: one goroutine at a time calls Collect. MemoryPoints may run
// beside it (the sampling loop's probe between samples), and Info and
// Detect on yet another goroutine: they share only the kept-file reader
// and the "no data" log under mu, and take no CPU reading.
type Collector struct {
	lay   *Layout
	log   *slog.Logger
	now   func() time.Time
	prev  *cpuReading
	files *files // descriptors kept open on cgroupfs and procfs
	// peak is v2's memory.peak opened and reset for bridge (StartPeak,
	// UsePeak); nil: memory.peak is read as any other file.
	peak atomic.Pointer[resetFile]

	mu     sync.Mutex
	logged map[string]bool // "no data" debug lines already written
}

// New returns a collector of the cgroups l found (FindLayout).
func New(l *Layout, log *slog.Logger) *Collector {
	if log == nil {
		log = slog.Default()
	}
	c := &Collector{lay: l, log: log.With("source", "cgroup"), now: time.Now, logged: map[string]bool{}}
	c.files = newFiles(func() time.Time { return c.now() })
	return c
}

// Close implements metrics.Closer: it closes the descriptors kept open for
// sampling, without waiting for a read in flight (see kfile.Reader.Close).
// Reads after it, of a Collect still running, keep nothing open.
func (c *Collector) Close() error {
	c.files.close()
	if f := c.peak.Swap(nil); f != nil {
		f.r.Close()
	}
	return nil
}

// Name implements metrics.Collector.
func (c *Collector) Name() string { return Name }

// Info returns what was found; limits are read afresh (they can be resized).
func (c *Collector) Info() Info {
	inf := Info{Version: c.lay.mode, Paths: c.lay.Paths()}
	ml, err := c.memoryLimit(nil)
	if err != nil {
		c.log.Debug("reading memory limit", "err", err)
	}
	inf.MemoryLimitSetBy = NoLimit
	if ml.ok {
		inf.MemoryLimitBytes, inf.MemoryLimitSetBy = ml.bytes, ml.setBy
	}
	cl, err := c.cpuLimit()
	if err != nil {
		c.log.Debug("reading cpu limit", "err", err)
	}
	inf.CPULimitSetBy = NoLimit
	if cl.ok {
		inf.CPULimitCores, inf.CPULimitSetBy = cl.cores, cl.setBy
	}
	inf.CPUSplit = c.cpuSplit()
	inf.AtRoot = c.lay.AtRoot()
	return inf
}

// cpuSplit describes a v1 layout whose cpu and cpuacct controllers are
// mounted apart and place the process in different cgroups; "" otherwise,
// and where either is the root: it gives no usage, or no limit.
func (c *Collector) cpuSplit() string {
	cpu, ok1 := c.lay.places[ctlCPU]
	acct, ok2 := c.lay.places[ctlCPUAcct]
	if !ok1 || !ok2 || !cpu.v1 || !acct.v1 || cpu.dir == acct.dir || cpu.rel == acct.rel || cpu.root || acct.root {
		return ""
	}
	return fmt.Sprintf("CPU usage from cgroup %s (cpuacct) but the CPU limit from cgroup %s (cpu): different cgroups, not one container's",
		acct.dir, cpu.dir)
}

// Detect implements metrics.Detector. Keys: version, paths,
// memory_limit_bytes (absent without a limit), memory_limit_set_by,
// cpu_limit_cores (absent without a limit), cpu_limit_set_by,
// cpu_usage_limit_split (only when cpu and cpuacct place bridge apart),
// at_root (only when a controller's cgroup is the root: RootNote).
func (c *Collector) Detect(ctx context.Context) map[string]any {
	inf := c.Info()
	out := map[string]any{
		"version":             string(inf.Version),
		"paths":               inf.Paths,
		"memory_limit_set_by": inf.MemoryLimitSetBy,
		"cpu_limit_set_by":    inf.CPULimitSetBy,
	}
	if inf.MemoryLimitBytes > 0 {
		out["memory_limit_bytes"] = inf.MemoryLimitBytes
	}
	if inf.CPULimitCores > 0 {
		out["cpu_limit_cores"] = metrics.FloatOf(inf.CPULimitCores)
	}
	if inf.CPUSplit != "" {
		out["cpu_usage_limit_split"] = inf.CPUSplit
	}
	if len(inf.AtRoot) > 0 {
		out["at_root"] = RootNote(inf.AtRoot)
	}
	return out
}

// RootNote says, for the log, the run's tag, `bridge sample` and the
// end-of-run table, that the cgroups of controllers (Layout.AtRoot) are the
// host's and their container_ series are not sent.
func RootNote(controllers []string) string {
	n := strings.Join(controllers, ", ")
	if i := strings.LastIndex(n, ", "); i >= 0 {
		n = n[:i] + " and " + n[i+2:]
	}
	what := "cgroup is the root cgroup"
	if len(controllers) > 1 {
		what = "cgroups are the root cgroups"
	}
	return fmt.Sprintf("bridge's %s %s, the host's and not a container's: their container_ series are not sent", n, what)
}

// TagAtRoot says which controllers' cgroups are the host's root cgroups,
// whose container_ series are not sent (RootNote).
const TagAtRoot = "bridge.cgroup.at_root"

// Tags implements metrics.Tagger: the cgroup layout's mode
// (metrics.TagCgroupVersion).
func (c *Collector) Tags() map[string]string {
	return map[string]string{metrics.TagCgroupVersion: string(c.lay.mode)}
}

// StartTags implements metrics.StartTagger: the cgroups read, and the
// limits and the file that sets each (Info, read afresh: they can be
// resized), through the collector's kept-file reader.
func (c *Collector) StartTags(context.Context) map[string]string {
	info := c.Info()
	var paths []string
	for k, v := range info.Paths {
		paths = append(paths, k+"="+v)
	}
	sort.Strings(paths)
	t := map[string]string{
		"bridge.cgroup.path":            strings.Join(paths, " "),
		"bridge.memory_limit_set_by":    info.MemoryLimitSetBy,
		"bridge.cpu_limit_set_by":       info.CPULimitSetBy,
		"bridge.memory_limit_megabytes": NoLimit,
		"bridge.cpu_limit_cores":        NoLimit,
	}
	if info.MemoryLimitBytes > 0 {
		t["bridge.memory_limit_megabytes"] = strconv.FormatFloat(metrics.MB(float64(info.MemoryLimitBytes)), 'f', 1, 64)
	}
	if info.CPULimitCores > 0 {
		t["bridge.cpu_limit_cores"] = strconv.FormatFloat(info.CPULimitCores, 'f', 2, 64)
	}
	if info.CPUSplit != "" {
		t["bridge.cgroup.cpu_usage_limit_split"] = info.CPUSplit
	}
	if len(info.AtRoot) > 0 {
		t[TagAtRoot] = RootNote(info.AtRoot)
	}
	return t
}

// Unproduced implements metrics.Partial: the series of a root cgroup's
// controllers (rootSeries), and the PSI series where the kernel keeps none
// per cgroup (any layout but v2); why is RootNote when a controller's
// cgroup is the root.
func (c *Collector) Unproduced() (series []*metrics.Desc, why string) {
	series = c.rootSeries()
	if c.lay.mode != ModeV2 {
		series = append(series, metrics.ContainerPressure.Descs()...)
	}
	if at := c.lay.AtRoot(); len(at) > 0 {
		why = RootNote(at)
	}
	return series, why
}

// rootSeries are the series the collector does not read because their
// controller's cgroup is the root (Layout.AtRoot): every series of a root
// memory or pids cgroup; the CPU usage of a root cpuacct (v1) or cpu (v2)
// cgroup; the throttling of a root cpu cgroup; the CPU limit where cpu and
// cpuset are each the root or not mounted; PSI of a root unified cgroup.
func (c *Collector) rootSeries() []*metrics.Desc {
	var out []*metrics.Desc
	if c.atRoot(ctlMemory) {
		out = append(out, memorySeries...)
	}
	if c.usageAtRoot() {
		out = append(out, metrics.ContainerCPUUsage, metrics.ContainerCPUUtilization, metrics.ContainerCPUUsageSecondsTotal)
	}
	if c.atRoot(ctlCPU) {
		out = append(out, metrics.ContainerCPUThrottledPeriods, metrics.ContainerCPUPeriodsTotal, metrics.ContainerCPUThrottledPeriodsTotal, metrics.ContainerCPUThrottledSecondsTotal)
	}
	if c.limitAtRoot() {
		out = append(out, metrics.ContainerCPULimit)
	}
	if c.usageAtRoot() || c.atRoot(ctlCPU) {
		out = append(out, metrics.ContainerCPUUsageLimitSplit)
	}
	if c.atRoot(ctlPids) {
		out = append(out, metrics.ContainerPIDs, metrics.ContainerPIDsLimit, metrics.ContainerPIDsMaxEvents)
	}
	if c.atRoot(ctlUnified) {
		out = append(out, metrics.ContainerPressure.Descs()...)
	}
	return out
}

// atRoot reports whether the process's cgroup of controller ctl is the
// root of its hierarchy.
func (c *Collector) atRoot(ctl string) bool {
	p, ok := c.lay.places[ctl]
	return ok && p.root
}

// usageAtRoot reports whether the CPU usage would be read from a root
// cgroup: v1's cpuacct, else v2's cpu (cpuCounters).
func (c *Collector) usageAtRoot() bool {
	if p, ok := c.lay.places[ctlCPUAcct]; ok && p.v1 {
		return p.root
	}
	p, ok := c.lay.places[ctlCPU]
	return ok && !p.v1 && p.root
}

// limitAtRoot reports whether the CPU limit could only be the host's: cpu
// and cpuset each the root or not mounted, one of them the root.
func (c *Collector) limitAtRoot() bool {
	own := func(ctl string) bool { p, ok := c.lay.places[ctl]; return ok && !p.root }
	return (c.atRoot(ctlCPU) || c.atRoot(ctlCPUSet)) && !own(ctlCPU) && !own(ctlCPUSet)
}

// Collect implements metrics.Collector. A missing file is no data (logged
// once at debug); the error joins what could not be read or parsed, and the
// points that could be read are returned with it.
func (c *Collector) Collect(ctx context.Context, b *metrics.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &round{c: c, b: b}
	r.memory()
	r.cpu()
	r.pressure()
	r.pids()
	return errors.Join(r.errs...)
}

// MemoryPoints reads only the memory files (working set, limit, share): no
// CPU reading is taken, so the deltas of the next Collect are unchanged. The
// sampling loop calls it between samples, on a goroutine of its own that
// may overlap a Collect, to notice early that the working set nears the
// limit.
func (c *Collector) MemoryPoints(ctx context.Context) ([]metrics.Point, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var b metrics.Batch
	r := &round{c: c, b: &b}
	r.memory()
	return b.Points, errors.Join(r.errs...)
}

// round is the state of one Collect.
type round struct {
	c    *Collector
	b    *metrics.Batch
	errs []error
	// v1Limit is this round's v1 memory.stat hierarchical_memory_limit
	// (read with the usage); nil on v2 or when it could not be read.
	v1Limit *uint64
}

func (r *round) add(d *metrics.Desc, v float64, source string) { r.b.Add(d, v, source) }

// source names the files a point came from, for `bridge sample`: the
// first with its directory, then the rest as written. It is "" unless the
// batch explains, so that the sampling loop builds no string for it.
func (r *round) source(dir, file string, rest ...string) string {
	if !r.b.Explain {
		return ""
	}
	return filepath.Join(dir, file) + strings.Join(rest, "")
}

// join is a source made of parts; "" unless the batch explains.
func (r *round) join(parts ...string) string {
	if !r.b.Explain {
		return ""
	}
	return strings.Join(parts, "")
}

func (r *round) fail(err error) {
	if err != nil {
		r.errs = append(r.errs, err)
	}
}

// noData logs once at debug that a file is not there.
func (c *Collector) noData(path, what string) {
	c.mu.Lock()
	seen := c.logged[path]
	c.logged[path] = true
	c.mu.Unlock()
	if !seen {
		c.log.Debug("no data", "what", what, "path", path)
	}
}
