package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// The kernel's memory high-water mark (memory.peak on v2,
// memory.max_usage_in_bytes on v1) counts from the cgroup's creation: in a
// cgroup that several jobs share (a notebook kernel's, a dev box's, a
// Slurm allocation's steps) it may be an earlier job's. StartPeak reads it
// before the job, so that the end of the run can tell (package summary).

// PeakStart is the memory high-water mark before the job started
// (StartPeak).
type PeakStart struct {
	File  string // PeakFile
	Bytes uint64 // the mark before the job (with Reset, before the reset)
	Known bool   // it was read
	// Reset: cgroup v2, and the kernel resets memory.peak for one open
	// file (Linux 6.12 and later): it was reset for the descriptor the
	// collector reads it through from then on (UsePeak), so the
	// collector's mark counts from the job's start.
	Reset bool
	// Why says why it was not reset; "" when it was.
	Why string

	f *os.File // the reset descriptor; nil without a reset
}

// cgroup2Magic is CGROUP2_SUPER_MAGIC: only a memory.peak on cgroup2 is
// ever written (a fixture tree's is a regular file).
const cgroup2Magic = 0x63677270

// StartPeak reads the memory high-water mark before the job starts and,
// on cgroup v2, resets it for a descriptor of bridge's own where the
// kernel can: a write to an open memory.peak resets the mark that this
// open file reads, and no other reader's (kubelet, cAdvisor, a notebook's
// own monitor keep the mark since the cgroup's creation). Whether the
// kernel can is probed, not assumed by version: before Linux 6.12
// memory.peak has no write handler, and the write fails (EINVAL, measured
// on Debian 12's 6.1 in e2e/cgroupv2). v1 is never reset: a write to
// memory.max_usage_in_bytes resets it for every reader.
//
// Call it once, before the job starts; hand the result to UsePeak before
// sampling, or Discard it.
func (c *Collector) StartPeak() PeakStart {
	p, ok := c.lay.places[ctlMemory]
	if !ok || p.root {
		return PeakStart{Why: "no memory cgroup of a container"}
	}
	ps := PeakStart{File: c.PeakFile()}
	path := filepath.Join(p.dir, ps.File)
	s, found, err := c.files.read(path)
	switch {
	case err != nil:
		ps.Why = err.Error()
		return ps
	case !found:
		ps.Why = path + " is absent"
		return ps
	}
	if p.v1 {
		ps.Bytes, err = parseV1Uint(s)
	} else {
		ps.Bytes, err = parseV2Uint(s)
	}
	if err != nil {
		ps.Why = fmt.Sprintf("%s: %v", path, err)
		return ps
	}
	ps.Known = true
	if p.v1 {
		ps.Why = "cgroup v1: a reset of " + v1PeakFile + " would reset it for every reader"
		return ps
	}
	ps.f, ps.Why = resetPeak(path)
	ps.Reset = ps.f != nil
	return ps
}

// resetPeak opens a v2 memory.peak for reading and writing and resets the
// mark for that open file; it returns the file, or why it cannot.
func resetPeak(path string) (*os.File, string) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, "bridge may not open memory.peak for writing, which a reset needs: " + err.Error()
	}
	var st syscall.Statfs_t
	if err := syscall.Fstatfs(int(f.Fd()), &st); err != nil || st.Type != cgroup2Magic {
		f.Close()
		return nil, path + " is not on a cgroup2 filesystem"
	}
	if _, err := f.Write([]byte("reset\n")); err != nil {
		f.Close()
		if errors.Is(err, syscall.EINVAL) {
			return nil, "the kernel cannot reset memory.peak for one reader (Linux before 6.12): " + err.Error()
		}
		return nil, "the kernel refused to reset memory.peak for one reader: " + err.Error()
	}
	return f, ""
}

// UsePeak makes the collector read memory.peak through ps's reset
// descriptor, if it has one: from then on the collector's mark is the
// job's. Call it before sampling starts; the collector closes the
// descriptor (Close).
func (c *Collector) UsePeak(ps PeakStart) {
	if ps.f == nil {
		return
	}
	if old := c.peak.Swap(ps.f); old != nil {
		old.Close()
	}
}

// Discard closes ps's reset descriptor, for a caller that does not hand it
// to UsePeak.
func (ps PeakStart) Discard() {
	if ps.f != nil {
		ps.f.Close()
	}
}

// readPeak reads memory.peak through the reset descriptor; ok is false
// without one. Close may close it during the read: an *os.File closes its
// descriptor once the read is over, and the read then fails.
func (c *Collector) readPeak() (s string, ok bool, err error) {
	f := c.peak.Load()
	if f == nil {
		return "", false, nil
	}
	var buf [32]byte // a decimal uint64 and a newline
	n, err := f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", true, fmt.Errorf("reading %s (bridge's reset descriptor): %w", f.Name(), err)
	}
	return string(buf[:n]), true, nil
}
