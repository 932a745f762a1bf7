// Package process measures the child's whole process tree (the training
// command and everything it started: DataLoader workers, compilers, shells)
// from /proc/<pid>/stat.
package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

// Options configure a Collector.
type Options struct {
	// ProcRoot is where procfs is mounted; "" means /proc. Its pids must be
	// those of bridge's pid namespace.
	ProcRoot string
	// CgroupRoot is where cgroup filesystems are mounted; "" means
	// /sys/fs/cgroup. Without the children links of /proc, the tree is
	// looked for among the processes of the root's cgroup.
	CgroupRoot string
	// RootPID returns the child's pid, 0 until it has started. Required. It is
	// called once per Collect, from the Sampler's goroutine.
	RootPID func() int
	// Adopter returns the child subreaper (bridge's own pid) whose other
	// children are orphans of the job and count as part of the tree; nil or
	// 0 for none (bridge attach, whose root is not its child).
	Adopter func() int
	// Log receives debug notes; nil discards them.
	Log *slog.Logger
}

// Collector sums the process tree rooted at RootPID.
//
// Contract: as metrics.Collector. It keeps the previous reading to compute
// process_cpu_usage_cores; a change of root pid starts over.
type Collector struct {
	src string
	treeReader
	rootPID func() int
	adopter func() int
	log     *slog.Logger
	now     func() time.Time

	prev *reading
}

// reading is one scan of the tree.
type reading struct {
	root  int
	at    time.Time
	procs map[int]procTimes
}

// procTimes is what CPU accounting needs of one process, in clock ticks.
type procTimes struct {
	start    uint64 // start time: tells a reused pid from the process seen before
	ppid     int
	self     uint64 // utime + stime, all its threads
	children uint64 // cutime + cstime: children it has waited for
}

// New returns a Collector reading under opts.ProcRoot.
func New(opts Options) (*Collector, error) {
	if opts.RootPID == nil {
		return nil, errors.New("process metrics: Options.RootPID is required")
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = procfs.DefaultMountPoint
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = "/sys/fs/cgroup"
	}
	if _, err := os.Stat(opts.ProcRoot); err != nil {
		return nil, fmt.Errorf("process metrics: opening proc filesystem at %s: %w", opts.ProcRoot, err)
	}
	return &Collector{
		treeReader: newTreeReader(opts.ProcRoot, opts.CgroupRoot),
		src:        filepath.Join(opts.ProcRoot, "*", "stat"),
		rootPID:    opts.RootPID,
		adopter:    opts.Adopter,
		log:        log.With("source", "process"),
		now:        time.Now,
	}, nil
}

// Name implements metrics.Collector.
func (c *Collector) Name() string { return Name }

// Collect implements metrics.Collector. Before the child starts, and after its
// tree is gone, there is nothing to measure: no points.
func (c *Collector) Collect(ctx context.Context, b *metrics.Batch) error {
	root := c.rootPID()
	if root <= 0 {
		c.prev = nil
		return nil
	}
	now := c.now()
	adopter := 0
	if c.adopter != nil {
		adopter = c.adopter()
	}
	stats, err := c.treeStats(root, adopter)
	if err != nil {
		return fmt.Errorf("reading the process tree of pid %d under %s: %w", root, c.src, err)
	}
	if len(stats) == 0 {
		if c.prev != nil {
			c.log.Debug("process tree is gone", "pid", root)
		}
		c.prev = nil
		return nil
	}
	cur := &reading{root: root, at: now, procs: make(map[int]procTimes, len(stats))}
	var rss, threads float64
	for _, s := range stats {
		rss += float64(s.RSSPages) * pageSize
		threads += float64(s.NumThreads)
		cur.procs[s.PID] = procTimes{
			start:    s.Starttime,
			ppid:     s.PPID,
			self:     s.UTime + s.STime,
			children: uint64(max(s.CUTime, 0)) + uint64(max(s.CSTime, 0)),
		}
	}
	// A tree with no memory of its own is not the job's memory: the child
	// between fork and exec, or zombies the kernel has freed. Its RSS is
	// not a measurement of the job (the end-of-run table would show a
	// peak of 0), so it has none.
	if rss > 0 {
		b.Add(MemoryRSS, metrics.MB(rss), c.src)
	}
	b.Add(Count, float64(len(stats)), c.src)
	b.Add(Threads, threads, c.src)
	if p := c.prev; p != nil && p.root == root {
		if wall := now.Sub(p.at).Seconds(); wall > 0 {
			cores := tickSeconds(cpuTicks(p.procs, cur.procs)) / wall
			b.Add(CPUUsage, cores, c.src)
		}
	}
	c.prev = cur
	return nil
}

var pageSize = float64(os.Getpagesize())

// Close releases the files kept open, without waiting for a Collect in
// flight (see kfile.Reader.Close).
func (c *Collector) Close() error {
	c.close()
	return nil
}

// treeReader finds a tree and reads its processes' stat files, keeping them
// open between calls.
type treeReader struct {
	find  finder
	stats *statFiles
	all   map[int]procStat // reused between calls
}

func newTreeReader(procRoot, cgroupRoot string) treeReader {
	if procRoot == "" {
		procRoot = procfs.DefaultMountPoint
	}
	if cgroupRoot == "" {
		cgroupRoot = "/sys/fs/cgroup"
	}
	return treeReader{
		find:  newFinder(procRoot, cgroupRoot),
		stats: newStatFiles(procRoot),
		all:   map[int]procStat{},
	}
}

func (c *treeReader) close() {
	c.stats.close()
	c.find.close()
}

// Finder lists a process tree as the Collector finds it (children links,
// else the cgroup, else a scan), for the GPU collector's per-process memory.
// Safe for concurrent use.
type Finder struct {
	mu sync.Mutex
	r  treeReader
}

// NewFinder returns a Finder reading under procRoot and cgroupRoot ("" for
// /proc and /sys/fs/cgroup).
func NewFinder(procRoot, cgroupRoot string) *Finder {
	return &Finder{r: newTreeReader(procRoot, cgroupRoot)}
}

// Tree is as the package's Tree, without reading every process.
func (f *Finder) Tree(root, adopter int) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	stats, err := f.r.treeStats(root, adopter)
	if err != nil {
		return nil, fmt.Errorf("reading the process tree of pid %d under %s: %w", root, f.r.find.procRoot, err)
	}
	pids := make([]int, len(stats))
	for i, s := range stats {
		pids[i] = s.PID
	}
	return pids, nil
}

// Close releases the files kept open. It does not take the lock that Tree
// holds across its reads: a Tree stuck in a read cannot hold Close up.
func (f *Finder) Close() error {
	f.r.close()
	return nil
}

// treeStats reads the stat of each candidate the finder gives and returns
// those of root's tree, in Tree's order.
func (c *treeReader) treeStats(root, adopter int) ([]procStat, error) {
	pids, err := c.find.candidates(root, adopter)
	if err != nil {
		return nil, err
	}
	clear(c.all)
	for _, pid := range pids {
		if _, dup := c.all[pid]; dup {
			continue
		}
		s, gone, err := c.stats.read(pid)
		if err != nil {
			return nil, err
		}
		if !gone {
			c.all[pid] = s
		}
	}
	c.stats.sweep()
	return buildTree(c.all, root, adopter), nil
}

// cpuTicks is the CPU time the tree used between two readings.
//
// A process seen in both readings adds the growth of its own time, plus the
// growth of its children's time (children it reaped in the interval) less
// what those children had already been counted for in prev. A process new in
// cur was started in the interval: all its time, and that of children it
// reaped, is new. A process that exited and was reaped by a parent in the tree
// is thus counted to its end; one whose parent is gone too (or that was
// auto-reaped, SIGCHLD ignored) loses its time after prev, at most one
// interval of it. Nothing is ever negative.
func cpuTicks(prev, cur map[int]procTimes) uint64 {
	alreadyCounted := map[int]uint64{} // parent pid -> prev totals of its children gone since
	for pid, p := range prev {
		if c, ok := cur[pid]; !ok || c.start != p.start {
			alreadyCounted[p.ppid] += p.self + p.children
		}
	}
	var ticks uint64
	for pid, c := range cur {
		p, ok := prev[pid]
		if !ok || p.start != c.start {
			ticks += c.self + c.children
			continue
		}
		ticks += sub(c.self, p.self)
		ticks += sub(sub(c.children, p.children), alreadyCounted[pid])
	}
	return ticks
}

// tickSeconds converts clock ticks of /proc/<pid>/stat to seconds with
// procfs's own USER_HZ, which it does not export.
func tickSeconds(ticks uint64) float64 { return procfs.ProcStat{UTime: uint(ticks)}.CPUTime() }

// sub is a - b, clamped at 0.
func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}
