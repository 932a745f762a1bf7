// Package process measures the child's whole process tree (the training
// command and everything it started: DataLoader workers, compilers, shells)
// from /proc/<pid>/stat. The Tree, walked once a sample, is shared with the
// GPU collectors, which match their processes against it.
package process

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

// Collector sums the child's process tree (a Tree it may share with the
// GPU collectors).
//
// Contract: as metrics.Collector. It keeps the previous reading to compute
// process_cpu_usage_cores; a change of root pid starts over.
type Collector struct {
	tree *Tree
	src  string
	log  *slog.Logger

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

// New returns a Collector of tree; log (nil: discarded) receives debug
// notes.
func New(tree *Tree, log *slog.Logger) *Collector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Collector{tree: tree, src: tree.src(), log: log.With("source", "process")}
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
		c.prev = nil
		return nil
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
		b.Add(metrics.ProcessMemoryRSS, metrics.MB(rss), c.src)
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

// LastProcesses implements metrics.ProcessLister: the processes of the
// tree's last walk that found it (Tree.LastProcesses).
func (c *Collector) LastProcesses() metrics.ProcessList { return c.tree.LastProcesses() }

// Close releases the tree's files kept open, without waiting for a
// Collect in flight (see Tree.Close).
func (c *Collector) Close() error { return c.tree.Close() }

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
