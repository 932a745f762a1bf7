package process

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/cgroup"
)

// TreeOptions configure a Tree.
type TreeOptions struct {
	// Context bounds NewTree's check of ProcRoot (a Build's deadline);
	// nil: none but the bounded reader's own.
	Context context.Context
	// ProcRoot is where procfs is mounted; "" means /proc. Its pids must be
	// those of bridge's pid namespace.
	ProcRoot string
	// Cgroups is the cgroup layout (cgroup.FindLayout) in which, without
	// the children links of /proc, the tree is looked for among the
	// processes of the root's cgroup; nil: the links, else a scan.
	Cgroups *cgroup.Layout
	// RootPID returns the child's pid, 0 until it has started. Required.
	RootPID func() int
	// Adopter returns the child subreaper (bridge's own pid) whose other
	// children are orphans of the job and count as part of the tree; nil or
	// 0 for none (bridge attach, whose root is not its child).
	Adopter func() int
}

// Tree is the child's process tree: the root (RootPID) and all its
// descendants by the parent pid field of /proc/<pid>/stat, with the
// orphans the adopter took in. The process collector and the GPU
// collectors (NVIDIA, AMD) share one Tree, and it is walked once a sample:
// the first of them to ask in a sample (by metrics.SampleMark) walks it,
// the others get that walk. A call outside a Sampler's sample (a Detect)
// walks it afresh.
//
// Contract: safe for concurrent use. One walk runs at a time; a caller
// waiting for another's walk gives up when its ctx is done. Close may run
// beside a walk and never waits for it (see kfile.Reader.Close).
type Tree struct {
	procRoot string
	rootPID  func() int
	adopter  func() int
	now      func() time.Time

	// sem is held by the walk in progress, and guards what follows.
	sem   chan struct{}
	find  finder
	stats *statFiles
	ns    *nsFiles
	all   map[int]procStat // reused between walks
	last  *walk            // the last walk made for a sample
	walks int              // walks made (tests)

	// found is the last walk that found the tree (LastProcesses), read
	// beside the walks.
	found atomic.Pointer[walk]
	// holders are the processes of the tree that hold GPU memory, by the
	// GPU collector that found them (NoteGPUHolders); guarded by hmu,
	// never held across a read.
	hmu     sync.Mutex
	holders map[string][]int
}

// walk is one reading of the tree; read-only once made, but for nspids,
// which is filled under the Tree's sem.
type walk struct {
	mark          uint64    // the sample it was made for
	at            time.Time // when it was read
	root, adopter int
	procs         []procStat // root first, then breadth first in pid order
	err           error
	nspids        [][]int // per process of procs, NSpids; nil until asked
	nsErr         error
}

// NewTree returns the tree opts describe.
func NewTree(opts TreeOptions) (*Tree, error) {
	if opts.RootPID == nil {
		return nil, errors.New("process tree: TreeOptions.RootPID is required")
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = procfs.DefaultMountPoint
	}
	if _, err := kfile.Stat(opts.Context, opts.ProcRoot); err != nil {
		return nil, fmt.Errorf("process tree: opening proc filesystem at %s: %w", opts.ProcRoot, err)
	}
	adopter := opts.Adopter
	if adopter == nil {
		adopter = func() int { return 0 }
	}
	return &Tree{
		procRoot: opts.ProcRoot,
		rootPID:  opts.RootPID,
		adopter:  adopter,
		now:      time.Now,
		sem:      make(chan struct{}, 1),
		find:     newFinder(opts.ProcRoot, opts.Cgroups),
		stats:    newStatFiles(opts.ProcRoot),
		ns:       newNSFiles(opts.ProcRoot),
		all:      map[int]procStat{},
	}, nil
}

// PIDs lists the tree's processes, root first; none while there is no
// child, or once its tree is gone.
func (t *Tree) PIDs(ctx context.Context) ([]int, error) {
	w, err := t.get(ctx, false)
	if err != nil {
		return nil, err
	}
	pids := make([]int, len(w.procs))
	for i, s := range w.procs {
		pids[i] = s.PID
	}
	return pids, nil
}

// NSpids lists, for each of the tree's processes, every PID it is known by:
// its PID in ProcRoot's namespace first, then those in the PID namespaces
// nested in it (the NSpid line of /proc/<pid>/status; the first alone on a
// kernel before 4.1, or where its status could not be read, which the
// error then says). None while there is no child. A process's status is
// read once in its life: its PIDs never change.
func (t *Tree) NSpids(ctx context.Context) ([][]int, error) {
	w, err := t.get(ctx, true)
	if err != nil {
		return nil, err
	}
	return w.nspids, w.nsErr
}

// LastProcesses is the tree's processes in the last walk that found any
// holding memory (none before the child's first): the processes alive in
// the last sample before the tree's end, or before its processes were
// killed and left as zombies. It reads no file, and
// may be called from any goroutine, beside a walk, and after Close.
func (t *Tree) LastProcesses() metrics.ProcessList {
	w := t.found.Load()
	if w == nil {
		return metrics.ProcessList{}
	}
	l := metrics.ProcessList{At: w.at, Procs: make([]metrics.ProcessInfo, len(w.procs))}
	for i, s := range w.procs {
		l.Procs[i] = metrics.ProcessInfo{PID: s.PID, Name: s.Comm(), RSSBytes: uint64(max(s.RSSPages, 0)) * uint64(pageSize)}
	}
	return l
}

// resident reports whether any of procs holds memory: a tree whose
// processes are all zombies (killed, not yet reaped: RSS 0) has lost what
// LastProcesses says.
func resident(procs []procStat) bool {
	for _, p := range procs {
		if p.RSSPages > 0 {
			return true
		}
	}
	return false
}

// NoteGPUHolders records that pids (in ProcRoot's namespace) are the
// processes of the tree that hold memory on the GPUs source collects, as
// it found them in its last sample (none: an empty list). The process
// collector takes them as the job's trainers (metrics.RoleTrainer), from
// the latest note of each source: this sample's or the one before.
func (t *Tree) NoteGPUHolders(source string, pids []int) {
	t.hmu.Lock()
	defer t.hmu.Unlock()
	if t.holders == nil {
		t.holders = map[string][]int{}
	}
	t.holders[source] = append(t.holders[source][:0], pids...)
}

// gpuHolders reports whether a pid holds GPU memory, by every source's
// latest note; nil when none holds any.
func (t *Tree) gpuHolders() func(pid int) bool {
	t.hmu.Lock()
	defer t.hmu.Unlock()
	var set map[int]bool
	for _, pids := range t.holders {
		for _, pid := range pids {
			if set == nil {
				set = map[int]bool{}
			}
			set[pid] = true
		}
	}
	if set == nil {
		return nil
	}
	return func(pid int) bool { return set[pid] }
}

// Close releases the files kept open, without waiting for a walk in
// flight; a walk after it keeps nothing open. A second Close does nothing.
func (t *Tree) Close() error {
	t.stats.close()
	t.find.close()
	return nil
}

// get returns the walk of this sample, walking the tree if no one has yet
// (and reading the NSpids of its processes when nspids asks for them). A
// walk that failed is an error.
func (t *Tree) get(ctx context.Context, nspids bool) (*walk, error) {
	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for another collector's walk of the process tree: %w", ctx.Err())
	}
	defer func() { <-t.sem }()
	mark, marked := metrics.SampleMark(ctx)
	root, adopter := t.rootPID(), t.adopter()
	w := t.last
	if !marked || w == nil || w.mark != mark || w.root != root || w.adopter != adopter {
		w = &walk{mark: mark, at: t.now(), root: root, adopter: adopter}
		if root > 0 {
			t.walks++
			w.procs, w.err = t.read(ctx, root, adopter)
		}
		if marked {
			t.last = w
		}
		if w.err == nil && resident(w.procs) {
			t.found.Store(w)
		}
	}
	if w.err != nil {
		return nil, fmt.Errorf("reading the process tree of pid %d under %s: %w", w.root, t.procRoot, w.err)
	}
	if nspids && w.nspids == nil && len(w.procs) > 0 {
		w.nspids, w.nsErr = t.ns.read(ctx, w.procs)
	}
	return w, nil
}

// read reads the stat of each candidate the finder gives and returns those
// of root's tree. The caller holds sem.
func (t *Tree) read(ctx context.Context, root, adopter int) ([]procStat, error) {
	pids, err := t.find.candidates(ctx, root, adopter)
	if err != nil {
		return nil, err
	}
	clear(t.all)
	for _, pid := range pids {
		if _, dup := t.all[pid]; dup {
			continue
		}
		s, gone, err := t.stats.read(ctx, pid)
		if err != nil {
			return nil, err
		}
		if !gone {
			t.all[pid] = s
		}
	}
	t.stats.sweep()
	return buildTree(t.all, root, adopter), nil
}

// buildTree returns the stats of root's tree out of all: root first, then
// breadth first in pid order; nil when root is not in all. A process
// orphaned inside the tree is reparented to the nearest subreaper or init,
// outside the tree: the adopter's other children and their descendants
// count as part of it (adopter 0: none).
func buildTree(all map[int]procStat, root, adopter int) []procStat {
	rs, ok := all[root]
	if !ok {
		return nil
	}
	children := make(map[int][]int, len(all))
	for pid, s := range all {
		if pid != root { // a pid namespace's init reports ppid 0, never itself, but be safe
			children[s.PPID] = append(children[s.PPID], pid)
		}
	}
	out := []procStat{rs}
	if adopter > 0 && adopter != root {
		// Orphans the subreaper adopted: everything else it parents.
		kids := children[adopter]
		slices.Sort(kids)
		for _, k := range kids {
			if k != root {
				out = append(out, all[k])
			}
		}
	}
	for i := 0; i < len(out); i++ {
		kids := children[out[i].PID]
		slices.Sort(kids)
		for _, k := range kids {
			out = append(out, all[k])
		}
	}
	return out
}

// src names the files a walk reads, for `bridge sample`.
func (t *Tree) src() string { return filepath.Join(t.procRoot, "*", "stat") }
