// Package process measures the child's whole process tree (the training
// command and everything it started: DataLoader workers, compilers, shells)
// from /proc/<pid>/stat. The Tree, walked once a sample, is shared with the
// GPU collectors, which match their processes against it.
package process

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

// Collector sums the child's process tree (a Tree it may share with the
// GPU collectors), whole and by role (metrics.Role).
//
// Contract: as metrics.Collector. It keeps the previous reading to compute
// the CPU and I/O rates; a change of root pid starts over.
type Collector struct {
	tree *Tree
	src  string
	log  *slog.Logger
	io   *ioFiles

	// Collect's own, between calls.
	prev  *reading
	cmd   *cmdlines
	idx   map[int]int
	roles []metrics.Role
	// seen: a role that had a process since the root started keeps its
	// series (0 without one), so that a chart of it has no holes.
	seen [metrics.NumRoles]bool
}

// reading is one scan of the tree.
type reading struct {
	root  int
	at    time.Time
	procs map[int]procTimes
}

// procTimes is what CPU and I/O accounting needs of one process: its
// counters, in clock ticks and bytes, and its role.
type procTimes struct {
	start    uint64 // start time: tells a reused pid from the process seen before
	ppid     int
	self     uint64 // utime + stime, all its threads
	children uint64 // cutime + cstime: children it has waited for
	// ioRead, ioWrite: storage bytes, its own and its reaped children's;
	// hasIO: its io file was read.
	ioRead, ioWrite uint64
	hasIO           bool
	role            metrics.Role
}

// New returns a Collector of tree; log (nil: discarded) receives debug
// notes.
func New(tree *Tree, log *slog.Logger) *Collector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Collector{tree: tree, src: tree.src(), log: log.With("source", "process"),
		io: newIOFiles(tree.procRoot), cmd: newCmdlines(tree.procRoot), idx: map[int]int{}}
}

// Name implements metrics.Collector.
func (c *Collector) Name() string { return Name }

// Collect implements metrics.Collector. Before the child starts, and after its
// tree is gone, there is nothing to measure: no points.
func (c *Collector) Collect(ctx context.Context, b *metrics.Batch) error {
	w, err := c.tree.get(ctx, false)
	if err != nil {
		return err
	}
	root, stats, now := w.root, w.procs, w.at
	if root <= 0 {
		c.prev, c.seen = nil, [metrics.NumRoles]bool{}
		return nil
	}
	if len(stats) == 0 {
		if c.prev != nil {
			c.log.Debug("process tree is gone", "pid", root)
		}
		c.prev, c.seen = nil, [metrics.NumRoles]bool{}
		return nil
	}
	if p := c.prev; p != nil && p.root != root {
		c.seen = [metrics.NumRoles]bool{}
	}
	c.roles = slices.Grow(c.roles[:0], len(stats))[:len(stats)]
	gpu := c.tree.gpuHolders()
	classify(stats, c.idx, gpu, func(i int) bool {
		s := &stats[i]
		return launcherComms[string(s.comm[:s.commN])] || (interpreter(s) && c.cmd.launcher(ctx, s))
	}, c.roles)
	c.cmd.sweep()

	cur := &reading{root: root, at: now, procs: make(map[int]procTimes, len(stats))}
	var rss [metrics.NumRoles]float64
	var count [metrics.NumRoles]int
	var threads, blocked float64
	for i := range stats {
		s := &stats[i]
		r := c.roles[i]
		rss[r] += float64(s.RSSPages) * pageSize
		count[r]++
		c.seen[r] = true
		threads += float64(s.NumThreads)
		if s.State == 'D' {
			blocked++
		}
		t := procTimes{
			start:    s.Starttime,
			ppid:     s.PPID,
			self:     s.UTime + s.STime,
			children: uint64(max(s.CUTime, 0)) + uint64(max(s.CSTime, 0)),
			role:     r,
		}
		t.ioRead, t.ioWrite, t.hasIO = c.io.read(s.PID)
		cur.procs[s.PID] = t
	}
	c.io.sweep()
	// A tree with no memory of its own is not the job's memory: the child
	// between fork and exec, or zombies the kernel has freed. Its RSS is
	// not a measurement of the job (the end-of-run table would show a
	// peak of 0), so it has none.
	total := 0.0
	for _, v := range rss {
		total += v
	}
	if total > 0 {
		b.Add(metrics.ProcessMemoryRSS, metrics.MB(total), c.src)
	}
	b.Add(Count, float64(len(stats)), c.src)
	b.Add(Threads, threads, c.src)
	b.Add(metrics.ProcessBlocked, blocked, c.src)
	for r := range metrics.NumRoles {
		if !c.seen[r] {
			continue
		}
		d := metrics.ProcessRoles[r]
		if total > 0 {
			b.Add(d.RSS, metrics.MB(rss[r]), c.src)
		}
		b.Add(d.Count, float64(count[r]), c.src)
	}
	if p := c.prev; p != nil && p.root == root {
		if wall := now.Sub(p.at).Seconds(); wall > 0 {
			c.rates(b, p.procs, cur.procs, wall)
		}
	}
	c.prev = cur
	return nil
}

// rates adds the CPU and I/O rates of the interval, whole and by role.
func (c *Collector) rates(b *metrics.Batch, prev, cur map[int]procTimes, wall float64) {
	var ticks, ioR, ioW [metrics.NumRoles]uint64
	intervalUse(prev, cur, func(p procTimes, t, r, w uint64) {
		ticks[p.role] += t
		ioR[p.role] += r
		ioW[p.role] += w
	})
	var allT, allR, allW uint64
	for r := range metrics.NumRoles {
		allT, allR, allW = allT+ticks[r], allR+ioR[r], allW+ioW[r]
	}
	b.Add(CPUUsage, tickSeconds(allT)/wall, c.src)
	b.Add(metrics.ProcessIORead, metrics.MB(float64(allR))/wall, c.src)
	b.Add(metrics.ProcessIOWrite, metrics.MB(float64(allW))/wall, c.src)
	for r := range metrics.NumRoles {
		if !c.seen[r] {
			continue
		}
		d := metrics.ProcessRoles[r]
		b.Add(d.CPU, tickSeconds(ticks[r])/wall, c.src)
		b.Add(d.IORead, metrics.MB(float64(ioR[r]))/wall, c.src)
		b.Add(d.IOWrite, metrics.MB(float64(ioW[r]))/wall, c.src)
	}
}

var pageSize = float64(os.Getpagesize())

// LastProcesses implements metrics.ProcessLister: the processes of the
// tree's last walk that found it (Tree.LastProcesses).
func (c *Collector) LastProcesses() metrics.ProcessList { return c.tree.LastProcesses() }

// Close releases the tree's files kept open, and the collector's, without
// waiting for a Collect in flight (see Tree.Close).
func (c *Collector) Close() error {
	c.io.close()
	return c.tree.Close()
}

// intervalUse calls use with the CPU ticks and the storage bytes read and
// written each process of cur accounts for between two readings; their sum
// is the tree's.
//
// A process seen in both readings adds the growth of its own time, plus the
// growth of its children's time (children it reaped in the interval) less
// what those children had already been counted for in prev. A process new in
// cur was started in the interval: all its time, and that of children it
// reaped, is new. A process that exited and was reaped by a parent in the tree
// is thus counted to its end; one whose parent is gone too (or that was
// auto-reaped, SIGCHLD ignored) loses its time after prev, at most one
// interval of it. Nothing is ever negative. Storage bytes follow the same
// rule: the kernel adds a reaped child's to its parent's counters, which
// hold the process's own and its reaped children's together; a process
// whose counters could not be read in prev counts none in this interval.
func intervalUse(prev, cur map[int]procTimes, use func(p procTimes, ticks, ioRead, ioWrite uint64)) {
	type counted struct{ ticks, r, w uint64 }
	already := map[int]counted{} // parent pid -> prev totals of its children gone since
	for pid, p := range prev {
		if c, ok := cur[pid]; !ok || c.start != p.start {
			a := already[p.ppid]
			a.ticks += p.self + p.children
			a.r += p.ioRead
			a.w += p.ioWrite
			already[p.ppid] = a
		}
	}
	for pid, c := range cur {
		p, ok := prev[pid]
		if !ok || p.start != c.start {
			use(c, c.self+c.children, c.ioRead, c.ioWrite)
			continue
		}
		a := already[pid]
		ticks := sub(c.self, p.self) + sub(sub(c.children, p.children), a.ticks)
		var r, w uint64
		if p.hasIO && c.hasIO {
			r, w = sub(sub(c.ioRead, p.ioRead), a.r), sub(sub(c.ioWrite, p.ioWrite), a.w)
		}
		use(c, ticks, r, w)
	}
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
