package process

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics/cgroup"
)

// How the Collector finds the candidates for the tree. Where both the
// children links and a cgroup of its own are there, the cheaper wins, looked
// at again every reconsiderEvery samples: the links cost a read per thread
// (a PyTorch process has dozens), the cgroup a stat read per process in it.
const (
	viaChildren = "children" // /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN)
	viaCgroup   = "cgroup"   // cgroup.procs of the root's (and the adopter's) cgroup and below
	viaScan     = "scan"     // every /proc/<pid>
)

// finder lists the pids that may belong to root's tree, so that only their
// stat files are read. Its method is chosen once per root.
type finder struct {
	procRoot string
	cgroups  *cgroup.Layout // nil: no cgroup to look in

	root, adopter int
	method        string
	both          bool // children links and a cgroup: choose by cost
	calls         int
	linkReads     int                   // children files the last walk read
	cgroupDirs    []string              // viaCgroup: the cgroup directories walked
	children      *kfile.Reader[[2]int] // viaChildren: {pid, tid} -> its children file
	buf           []byte
}

func newFinder(procRoot string, cgroups *cgroup.Layout) finder {
	f := finder{procRoot: procRoot, cgroups: cgroups}
	f.children = kfile.NewReader(func(k [2]int) string {
		return filepath.Join(procRoot, strconv.Itoa(k[0]), "task", strconv.Itoa(k[1]), "children")
	}, kfile.Options{Size: 1024, Max: kfile.Table, MaxKept: maxOpenStats})
	return f
}

// close releases the files kept open; safe beside a walk in flight.
func (f *finder) close() { f.children.Close() }

// candidates returns a superset of the tree of root (plus the adopter's
// other children), never the whole machine unless nothing better exists.
func (f *finder) candidates(ctx context.Context, root, adopter int) ([]int, error) {
	if root != f.root || adopter != f.adopter || f.method == "" {
		f.choose(ctx, root, adopter)
	}
	if f.both && f.calls%reconsiderEvery == 0 {
		f.calls++
		return f.cheaper(ctx, root, adopter)
	}
	f.calls++
	switch f.method {
	case viaChildren:
		return f.byChildren(ctx, root, adopter), nil
	case viaCgroup:
		return f.byCgroup(ctx)
	}
	return f.byScan(ctx)
}

// reconsiderEvery is how often, in samples, the cheaper of the children
// links and the cgroup is chosen again (the tree grows: DataLoader workers).
const reconsiderEvery = 64

// cheaper lists the candidates both ways and keeps the cheaper way.
func (f *finder) cheaper(ctx context.Context, root, adopter int) ([]int, error) {
	kids := f.byChildren(ctx, root, adopter)
	cg, err := f.byCgroup(ctx)
	if err != nil || len(cg) >= len(kids)+f.linkReads {
		f.method = viaChildren
		return kids, nil
	}
	f.method = viaCgroup
	return cg, nil
}

func (f *finder) choose(ctx context.Context, root, adopter int) {
	f.root, f.adopter, f.cgroupDirs, f.both, f.calls = root, adopter, nil, false, 0
	links := kfile.Exists(ctx, filepath.Join(f.procRoot, strconv.Itoa(root), "task", strconv.Itoa(root), "children"))
	defer func() {
		if links {
			f.both = f.method == viaCgroup
			f.method = viaChildren
		}
	}()
	f.method = viaScan
	rootDir := f.cgroupDir(ctx, root)
	if rootDir == "" {
		return // the root cgroup holds every process: a scan costs no more
	}
	f.cgroupDirs = []string{rootDir}
	if adopter > 0 && adopter != root {
		d := f.cgroupDir(ctx, adopter)
		if d == "" {
			return // orphans may sit anywhere
		}
		if !slices.Contains(f.cgroupDirs, d) {
			f.cgroupDirs = append(f.cgroupDirs, d)
		}
	}
	f.method = viaCgroup
}

// byChildren walks the children links from root (and the adopter) down.
// Each thread lists the children it forked, so every task is read.
func (f *finder) byChildren(ctx context.Context, root, adopter int) []int {
	out := []int{root}
	if adopter > 0 && adopter != root {
		out = append(out, adopter) // its children are the adopted orphans; buildTree drops it
	}
	seen := map[int]bool{root: true, adopter: true}
	f.linkReads = 0
	for i := 0; i < len(out); i++ {
		pid := out[i]
		taskDir := filepath.Join(f.procRoot, strconv.Itoa(pid), "task")
		tids, err := kfile.ReadDirNames(ctx, taskDir, maxEntries)
		if err != nil {
			continue // gone
		}
		for _, name := range tids {
			tid, err := strconv.Atoi(name)
			if err != nil {
				continue
			}
			f.linkReads++
			f.buf, err = f.children.Read([2]int{pid, tid}, f.buf)
			if err != nil {
				continue // the thread exited
			}
			for _, w := range bytes.Fields(f.buf) {
				if c, ok := atoi(w); ok && !seen[int(c)] {
					seen[int(c)] = true
					out = append(out, int(c))
				}
			}
		}
	}
	f.children.Sweep()
	return out
}

// byCgroup lists the processes of the chosen cgroups and their descendants.
// A descendant of the tree that was moved to an unrelated cgroup is missed:
// the price of not scanning the machine.
func (f *finder) byCgroup(ctx context.Context) ([]int, error) {
	out := []int{f.root} // even if it left its cgroup since
	for _, top := range f.cgroupDirs {
		var err error
		if out, err = f.cgroupProcs(ctx, top, out, true); err != nil {
			return nil, fmt.Errorf("listing the processes of cgroup %s: %w", top, err)
		}
	}
	return out, nil
}

// cgroupProcs appends the pids of cgroup dir and of its sub-cgroups. A
// sub-cgroup removed while it is read is skipped; the top one is an error.
func (f *finder) cgroupProcs(ctx context.Context, dir string, out []int, top bool) ([]int, error) {
	var err error
	f.buf, err = kfile.ReadInto(ctx, f.buf, dir+"/cgroup.procs", kfile.Table)
	if err != nil {
		if !top && isGone(err) {
			return out, nil
		}
		return out, err
	}
	for _, w := range bytes.Fields(f.buf) {
		if pid, ok := atoi(w); ok {
			out = append(out, int(pid))
		}
	}
	subs, err := kfile.Subdirs(ctx, dir, kfile.Entries)
	if err != nil {
		if !top && isGone(err) {
			return out, nil
		}
		return out, err
	}
	for _, sub := range subs {
		if out, err = f.cgroupProcs(ctx, dir+"/"+sub, out, false); err != nil {
			return out, err
		}
	}
	return out, nil
}

// byScan lists every process.
func (f *finder) byScan(ctx context.Context) ([]int, error) {
	names, err := kfile.ReadDirNames(ctx, f.procRoot, maxEntries)
	if err != nil {
		return nil, fmt.Errorf("listing processes in %s: %w", f.procRoot, err)
	}
	out := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// cgroupDir is the directory of pid's cgroup that narrows the search
// most (cgroup.Layout.ProcsDir); "" without a layout.
func (f *finder) cgroupDir(ctx context.Context, pid int) string {
	if f.cgroups == nil {
		return ""
	}
	return f.cgroups.ProcsDir(ctx, pid)
}

// maxEntries bounds a listing of processes or threads: the kernel's most
// pids (PID_MAX_LIMIT).
const maxEntries = 1 << 22
