package cgroup

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
)

// The kernel's memory high-water mark (memory.peak on v2,
// memory.max_usage_in_bytes on v1) counts from the cgroup's creation: in a
// cgroup that several jobs share (a notebook kernel's, a dev box's, a
// Slurm allocation's steps) it may be an earlier job's. StartPeak reads it
// before the job, so that the end of the run can tell (package summary;
// metrics.PeakKeeper).

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
// It implements metrics.PeakKeeper: call it once, before the job starts,
// within ctx; hand the result to UsePeak before sampling, or Discard it.
func (c *Collector) StartPeak(ctx context.Context) metrics.PeakStart {
	p, ok := c.lay.places[ctlMemory]
	if !ok || p.root {
		return metrics.PeakStart{Why: "no memory cgroup of a container"}
	}
	ps := metrics.PeakStart{File: c.PeakFile()}
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
	h, why := resetPeak(ctx, path)
	if h != nil {
		ps.Held = &resetFile{h}
	}
	ps.Reset, ps.Why = h != nil, why
	return ps
}

// resetPeak opens a v2 memory.peak for reading and writing and resets the
// mark for that open file (only a memory.peak on cgroup2 is ever written:
// a fixture tree's is a regular file); it returns the file, or why it
// cannot.
func resetPeak(ctx context.Context, path string) (*kfile.Handle, string) {
	h, err := kfile.OpenCgroup2(ctx, path)
	switch {
	case errors.Is(err, kfile.ErrNotCgroup2):
		return nil, path + " is not on a cgroup2 filesystem"
	case err != nil:
		return nil, "bridge may not open memory.peak for writing, which a reset needs: " + err.Error()
	}
	if err := h.Write(ctx, []byte("reset\n")); err != nil {
		h.Close()
		if errors.Is(err, syscall.EINVAL) {
			return nil, "the kernel cannot reset memory.peak for one reader (Linux before 6.12): " + err.Error()
		}
		return nil, "the kernel refused to reset memory.peak for one reader: " + err.Error()
	}
	return h, ""
}

// resetFile is memory.peak opened and reset for bridge (a *kfile.Handle),
// what a PeakStart holds.
type resetFile struct {
	r interface {
		Read(buf []byte) ([]byte, error)
		Close() error
	}
}

// Close implements io.Closer, for metrics.PeakStart.Discard.
func (f *resetFile) Close() error { return f.r.Close() }

// UsePeak makes the collector read memory.peak through ps's reset
// descriptor, if it holds one of this collector's: from then on the
// collector's mark is the job's. Call it before sampling starts; the
// collector closes the descriptor (Close). It implements
// metrics.PeakKeeper.
func (c *Collector) UsePeak(ps metrics.PeakStart) {
	f, ok := ps.Held.(*resetFile)
	if !ok {
		ps.Discard()
		return
	}
	if old := c.peak.Swap(f); old != nil {
		old.r.Close()
	}
}

// readPeak reads memory.peak through the reset descriptor; ok is false
// without one. Close may close it during the read: the read then fails.
func (c *Collector) readPeak() (s string, ok bool, err error) {
	h := c.peak.Load()
	if h == nil {
		return "", false, nil
	}
	var buf [32]byte // a decimal uint64 and a newline
	b, err := h.r.Read(buf[:0])
	if err != nil {
		return "", true, fmt.Errorf("bridge's reset descriptor: %w", err)
	}
	return string(b), true, nil
}
