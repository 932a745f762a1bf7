package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/bridge-dev/bridge/internal/kfile"
)

// NVML reports a process's PID either in the caller's PID namespace (newer
// drivers convert it) or as the driver saw it: the host's PID on older
// drivers, the innermost namespace's on some setups. <proc>/<pid>/status
// NSpid lists the same process's PID in the namespace of that procfs and
// in every namespace nested in it, which is how the GPU collector matches
// them.

// nsFiles reads the NSpid lines of the tree's processes, each once in its
// life (a process never changes PID namespaces): a status file is opened,
// read and closed, as it is not read again.
type nsFiles struct {
	procRoot string
	buf      []byte
	known    map[int]nsEntry // by pid, of the last walk's processes
}

// nsEntry is what one process's status said.
type nsEntry struct {
	start uint64 // its start time: a reused pid is another process
	pids  []int
}

func newNSFiles(procRoot string) *nsFiles {
	return &nsFiles{procRoot: procRoot, known: map[int]nsEntry{}}
}

func (f *nsFiles) path(pid int) string { return f.procRoot + "/" + strconv.Itoa(pid) + "/status" }

// read returns the NSpids of procs, in their order, reading the status
// only of processes not seen before. The error joins the status files
// that could not be parsed; their processes have their first PID only.
func (f *nsFiles) read(ctx context.Context, procs []procStat) ([][]int, error) {
	out := make([][]int, len(procs))
	known := make(map[int]nsEntry, len(procs))
	var errs []error
	for i, s := range procs {
		e, ok := f.known[s.PID]
		if !ok || e.start != s.Starttime {
			var err error
			e = nsEntry{start: s.Starttime}
			if e.pids, err = f.readOne(ctx, s.PID); err != nil {
				errs = append(errs, err)
				e.pids = []int{s.PID}
			}
		}
		known[s.PID] = e
		out[i] = e.pids
	}
	f.known = known
	return out, errors.Join(errs...)
}

// readOne reads pid's NSpid. A process that has exited has no status file
// (ENOENT, or ESRCH while it is being reaped): its PID alone, no error.
func (f *nsFiles) readOne(ctx context.Context, pid int) ([]int, error) {
	var err error
	f.buf, err = kfile.ReadInto(ctx, f.buf, f.path(pid), kfile.Table)
	if isGone(err) {
		return []int{pid}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.path(pid), err)
	}
	ids, err := parseNSpid(f.buf, pid)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", f.path(pid), err)
	}
	return ids, nil
}

// parseNSpid returns the PIDs of the NSpid line of a status file,
// outermost namespace first; [pid] where the kernel (before 4.1) writes no
// such line.
func parseNSpid(status []byte, pid int) ([]int, error) {
	for line := range bytes.Lines(status) {
		rest, ok := bytes.CutPrefix(line, []byte("NSpid:"))
		if !ok {
			continue
		}
		fields := bytes.Fields(rest)
		if len(fields) == 0 {
			return nil, errors.New("empty NSpid line")
		}
		ids := make([]int, len(fields))
		for i, w := range fields {
			v, ok := atou(w)
			if !ok || v == 0 || v > 1<<22 {
				return nil, fmt.Errorf("NSpid %q is not a PID", w)
			}
			ids[i] = int(v)
		}
		return ids, nil
	}
	return []int{pid}, nil
}
