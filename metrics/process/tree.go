package process

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"syscall"

	"github.com/prometheus/procfs"
)

// Tree returns root and all its descendants (by the parent pid field of
// /proc/<pid>/stat), root first, then breadth first in pid order. Processes
// that exit while the tree is read are skipped. A root that does not exist
// gives an empty list and no error.
//
// Pids are those of the pid namespace fs was mounted for. A process orphaned
// inside the tree is reparented to the nearest subreaper or init, outside the
// tree: pass that subreaper (bridge itself) as adopter, and its other
// children and their descendants count as part of the tree; 0 for none.
func Tree(pfs procfs.FS, root, adopter int) ([]int, error) {
	stats, err := treeStats(pfs, root, adopter)
	if err != nil {
		return nil, err
	}
	pids := make([]int, len(stats))
	for i, s := range stats {
		pids[i] = s.PID
	}
	return pids, nil
}

// treeStats reads every process's stat once and returns those of root's tree,
// in Tree's order.
func treeStats(pfs procfs.FS, root, adopter int) ([]procfs.ProcStat, error) {
	all, err := readAll(pfs)
	if err != nil {
		return nil, err
	}
	rs, ok := all[root]
	if !ok {
		return nil, nil
	}
	children := map[int][]int{}
	for pid, s := range all {
		if pid != root { // a pid namespace's init reports ppid 0, never itself, but be safe
			children[s.PPID] = append(children[s.PPID], pid)
		}
	}
	out := []procfs.ProcStat{rs}
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
	return out, nil
}

// readAll reads /proc/<pid>/stat of every process, skipping those that exit
// while being read.
func readAll(pfs procfs.FS) (map[int]procfs.ProcStat, error) {
	procs, err := pfs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	all := make(map[int]procfs.ProcStat, len(procs))
	for _, p := range procs {
		s, err := p.Stat()
		if err != nil {
			if vanished(pfs, p.PID, err) {
				continue
			}
			return nil, fmt.Errorf("reading the stat file of process %d: %w", p.PID, err)
		}
		all[p.PID] = s
	}
	return all, nil
}

// vanished reports whether a failed read of a process's stat means the
// process is gone: ENOENT or ESRCH, or a half-read file of a process whose
// directory no longer exists.
func vanished(pfs procfs.FS, pid int, err error) bool {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return true
	}
	_, serr := pfs.Proc(pid)
	return serr != nil
}
