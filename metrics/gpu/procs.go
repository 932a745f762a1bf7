package gpu

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"math"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/prometheus/procfs"
)

// NVML reports a process's PID either in the caller's PID namespace (newer
// drivers convert it) or as the driver saw it: the host's PID on older drivers,
// the innermost namespace's on some setups. bridge knows the child's tree in
// the namespace of its procfs; <procfs>/<pid>/status NSpid lists the same
// process's PID in that namespace and in every namespace nested in it. A GPU
// process matches the tree when its PID is any of those.

// pidSet maps every PID a tree process is known by to how it was matched.
type pidSet map[uint32]pidKind

type pidKind int

const (
	pidLocal  pidKind = iota + 1 // the PID as ProcessTree gave it
	pidNested                    // an inner-namespace PID from NSpid
)

// readNSpid reads the NSpid line of <procRoot>/<pid>/status (through
// procfs), outermost namespace first. A kernel older than 4.1 has no NSpid
// line: nil. A process that has exited has no status file (ENOENT, or ESRCH
// while it is being reaped): nil, not an error.
func readNSpid(fs procfs.FS, procRoot string, pid int) ([]uint32, error) {
	path := filepath.Join(procRoot, strconv.Itoa(pid), "status")
	var st procfs.ProcStatus
	p, err := fs.Proc(pid)
	if err == nil {
		st, err = p.NewStatus()
	}
	if errors.Is(err, iofs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	out := make([]uint32, 0, len(st.NSpids))
	for _, id := range st.NSpids {
		if id > math.MaxUint32 {
			return nil, fmt.Errorf("parsing %s: NSpid %d is out of range", path, id)
		}
		out = append(out, uint32(id))
	}
	return out, nil
}

// treePIDs builds the set of PIDs the tree's processes are known by.
func treePIDs(procRoot string, tree []int) (pidSet, error) {
	set := pidSet{}
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return set, fmt.Errorf("reading PID namespaces under %s: %w", procRoot, err)
	}
	var errs []error
	for _, pid := range tree {
		if pid <= 0 {
			continue
		}
		set[uint32(pid)] = pidLocal
		ids, err := readNSpid(fs, procRoot, pid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, id := range ids {
			if _, seen := set[id]; !seen {
				set[id] = pidNested
			}
		}
	}
	return set, errors.Join(errs...)
}

// gpuProc is one process NVML lists on a device or MIG slice.
type gpuProc struct {
	PID  uint32
	Used uint64 // bytes; noValue when NVML cannot say (MIG without permission, WDDM)
}

// noValue is NVML's VALUE_NOT_AVAILABLE for an unsigned long long.
const noValue = ^uint64(0)

// procMatch is the result of matching GPU processes against the tree.
type procMatch struct {
	Processes int    // GPU processes listed on the collected devices
	Matched   int    // of them, in the child's tree
	Nested    int    // of the matched, by an inner-namespace PID
	NoValue   int    // matched, but NVML has no memory figure for them
	UsedBytes uint64 // sum over matched processes with a figure
}

func matchProcs(set pidSet, procs []gpuProc) procMatch {
	var m procMatch
	for _, p := range procs {
		m.Processes++
		kind, ok := set[p.PID]
		if !ok {
			continue
		}
		m.Matched++
		if kind == pidNested {
			m.Nested++
		}
		if p.Used == noValue {
			m.NoValue++
			continue
		}
		m.UsedBytes += p.Used
	}
	return m
}

// note says in words how the match went, for Detect and the log.
func (m procMatch) note() string {
	switch {
	case m.Processes == 0:
		return "no GPU processes yet"
	case m.Matched == 0:
		return fmt.Sprintf("unmatched: NVML lists %d GPU processes, none with a PID of the child's tree "+
			"(an older driver reports host PIDs, which a container's /proc cannot map)", m.Processes)
	case m.Nested > 0:
		return fmt.Sprintf("matched %d of %d GPU processes (%d by an inner-namespace PID from NSpid)", m.Matched, m.Processes, m.Nested)
	default:
		return fmt.Sprintf("matched %d of %d GPU processes", m.Matched, m.Processes)
	}
}
