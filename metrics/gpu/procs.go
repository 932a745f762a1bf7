package gpu

import (
	"fmt"
)

// NVML reports a process's PID either in the caller's PID namespace (newer
// drivers convert it) or as the driver saw it: the host's PID on older
// drivers, the innermost namespace's on some setups. A GPU process matches
// the tree when its PID is any of those a tree process is known by
// (ProcessTree.NSpids).

// pidSet maps every PID a tree process is known by to how it was matched.
type pidSet map[uint32]pidKind

type pidKind int

const (
	pidLocal  pidKind = iota + 1 // the PID in bridge's proc root
	pidNested                    // an inner-namespace PID from NSpid
)

// treePIDs builds the set of PIDs the tree's processes are known by, from
// each one's NSpids (local PID first).
func treePIDs(tree [][]int) pidSet {
	set := pidSet{}
	for _, ids := range tree {
		if len(ids) == 0 || ids[0] <= 0 {
			continue
		}
		set[uint32(ids[0])] = pidLocal
	}
	for _, ids := range tree {
		for _, id := range ids[min(1, len(ids)):] {
			if _, seen := set[uint32(id)]; !seen && id > 0 {
				set[uint32(id)] = pidNested
			}
		}
	}
	return set
}

// holders are the processes of the tree among procs, each by its PID in
// bridge's proc root (tree: NSpids, local PID first): those holding GPU
// memory, for process.Tree.NoteGPUHolders. A local PID matches before
// an inner-namespace one, as in treePIDs.
func holders(tree [][]int, procs []gpuProc) []int {
	local := map[uint32]int{}
	for _, ids := range tree {
		if len(ids) > 0 && ids[0] > 0 {
			local[uint32(ids[0])] = ids[0]
		}
	}
	for _, ids := range tree {
		for _, id := range ids[min(1, len(ids)):] {
			if _, seen := local[uint32(id)]; !seen && id > 0 && len(ids) > 0 && ids[0] > 0 {
				local[uint32(id)] = ids[0]
			}
		}
	}
	out := []int{}
	for _, p := range procs {
		if pid, ok := local[p.PID]; ok {
			out = append(out, pid)
		}
	}
	return out
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
