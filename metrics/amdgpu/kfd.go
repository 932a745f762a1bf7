package amdgpu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
)

// KFD lists each process that holds /dev/kfd as <sys>/class/kfd/kfd/proc/
// <pid>, named by its PID in the host's PID namespace, with vram_<gpu_id>
// (bytes of VRAM it allocated through KFD) for each GPU it uses. Those of
// the child's tree count; they are matched by PID, so only where bridge's
// proc root shows host PIDs (bridge not in a PID namespace of its own).

// kfdMatch is how the KFD processes matched the child's tree, counted per
// process and job GPU (as NVIDIA's per process and device).
type kfdMatch struct {
	listed    bool   // the process list was read
	holders   []int  // the tree's processes with VRAM on a job GPU
	Processes int    // (process, job GPU) pairs with a vram file
	Matched   int    // of them, the tree's
	UsedBytes uint64 // the tree's VRAM on the job's GPUs
}

// collectProcesses adds the process_gpu_ series of the child's tree.
func (c *Collector) collectProcesses(ctx context.Context, b *metrics.Batch) error {
	tree, err := c.tree.PIDs(ctx)
	if err != nil {
		return fmt.Errorf("listing the child's processes: %w", err)
	}
	if len(tree) == 0 {
		c.tree.NoteGPUHolders(Name, nil)
		return nil // no child yet, or it has exited
	}
	dir := filepath.Join(c.sysRoot, "class/kfd/kfd/proc")
	m, err := c.matchKFD(ctx, dir, tree)
	if m.listed {
		c.noteMatch(m)
		c.tree.NoteGPUHolders(Name, m.holders)
		b.Add(metrics.ProcessGPUProcesses, float64(m.Matched), dir)
		b.Add(metrics.ProcessGPUUnmatchedProcesses, float64(m.Processes-m.Matched), dir)
	}
	// No figure when KFD processes exist but none is the tree's (their PIDs
	// may be host PIDs bridge cannot map, and 0 would be a guess), nor when
	// one of the tree's could not be read (it would be short).
	if !m.listed || err != nil || (m.Processes > 0 && m.Matched == 0) {
		return err
	}
	b.Add(metrics.ProcessGPUMemory, metrics.MB(float64(m.UsedBytes)), dir)
	return nil
}

// matchKFD reads the KFD process list under dir against tree.
func (c *Collector) matchKFD(ctx context.Context, dir string, tree []int) (kfdMatch, error) {
	var m kfdMatch
	ents, err := kfile.ReadDirNames(ctx, dir, kfile.Entries)
	if errors.Is(err, fs.ErrNotExist) {
		return kfdMatch{listed: true}, nil // no process has opened /dev/kfd since the driver loaded
	}
	if err != nil {
		return m, fmt.Errorf("listing KFD processes in %s: %w", dir, err)
	}
	m.listed = true
	in := make(map[string]bool, len(tree))
	for _, pid := range tree {
		in[strconv.Itoa(pid)] = true
	}
	var errs []error
	for _, pid := range ents {
		files, err := kfile.ReadDirNames(ctx, filepath.Join(dir, pid), kfile.Entries)
		if errors.Is(err, kfile.ErrNoAnswer) {
			return m, err
		}
		if err != nil {
			continue // the process released /dev/kfd meanwhile
		}
		names := make(map[string]bool, len(files))
		for _, f := range files {
			names[f] = true
		}
		for _, g := range c.gpus {
			file := "vram_" + g.gpuID
			if g.gpuID == "" || !names[file] {
				continue
			}
			m.Processes++
			if !in[pid] {
				continue
			}
			m.Matched++
			if n, err := strconv.Atoi(pid); err == nil && !slices.Contains(m.holders, n) {
				m.holders = append(m.holders, n)
			}
			path := filepath.Join(dir, pid, file)
			v, err := c.readBytes(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			m.UsedBytes += v
		}
	}
	return m, errors.Join(errs...)
}

// readBytes reads the count of bytes in a KFD vram_<gpu_id> file.
func (c *Collector) readBytes(path string) (uint64, error) {
	var err error
	c.buf, err = c.vram.Read(path, c.buf)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	v, ok := kfile.Uint(c.buf)
	if !ok {
		return 0, fmt.Errorf("parsing %s: want a count of bytes, got %q", path, strings.TrimSpace(string(c.buf)))
	}
	return v, nil
}

// noteMatch keeps how the match went for Detect, and logs once when KFD
// processes exist but none is the tree's.
func (c *Collector) noteMatch(m kfdMatch) {
	var note string
	switch {
	case m.Processes == 0:
		note = "no KFD processes on the job's GPUs yet"
	case m.Matched == 0:
		note = fmt.Sprintf("unmatched: KFD lists %d processes on the job's GPUs, none with a PID of the child's tree "+
			"(KFD names processes by host PID, which a container's /proc cannot map)", m.Processes)
	default:
		note = fmt.Sprintf("matched %d of %d KFD processes on the job's GPUs", m.Matched, m.Processes)
	}
	c.mu.Lock()
	c.procNote = note
	first := m.Processes > 0 && m.Matched == 0 && !c.unmatchedLogged
	if first {
		c.unmatchedLogged = true
	}
	c.mu.Unlock()
	if first {
		c.log.Info("AMD GPU processes not matched to the child's tree; process_gpu_memory_megabytes omitted while so", "note", note)
	}
}
