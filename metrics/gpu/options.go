package gpu

import (
	"context"
	"log/slog"
	"time"
)

// Name is the collector's name, the key of its entry in `bridge sample`.
const Name = "gpu"

// DefaultCallTimeout bounds one NVML call when Options.CallTimeout is zero.
// Healthy calls take microseconds to a few milliseconds; listing processes
// on a busy GPU can take tens of milliseconds.
const DefaultCallTimeout = 2 * time.Second

// Options configure a Collector.
type Options struct {
	// Lib is the NVML library; nil means the system's libnvidia-ml.so.1.
	// Tests pass go-nvml's mock. (Library is nvml.Interface in cgo builds.)
	Lib Library
	// Select restricts collection to these GPUs: UUIDs ("GPU-…", or "MIG-…"
	// for one slice) or NVML indexes ("0"). Empty means every GPU NVML sees.
	Select []string
	// MatchCUDAVisible restricts collection to the UUIDs listed in
	// CUDAVisibleDevices. Indexes there are CUDA's numbering, not NVML's,
	// and are not matched.
	MatchCUDAVisible bool
	// CUDAVisibleDevices is the child's CUDA_VISIBLE_DEVICES ("" = unset).
	CUDAVisibleDevices string
	// ProcessTree is the child's process tree (process.Tree, shared with
	// the process collector); nil: no process_gpu_* metrics (bridge
	// sample).
	ProcessTree ProcessTree
	// CallTimeout bounds each NVML call; 0 means DefaultCallTimeout.
	CallTimeout time.Duration
	// Log receives one info line when NVML is absent and notes about skipped
	// devices; nil discards them.
	Log *slog.Logger
}

// ProcessTree is the child's process tree as the GPU collector matches
// NVML's processes against it (process.Tree implements it).
type ProcessTree interface {
	// NSpids lists, for each process of the tree, every PID it is known
	// by: in the PID namespace of bridge's proc root first, then in those
	// nested in it (NSpid). None while there is no child. An error with a
	// list says which processes have their first PID only.
	NSpids(ctx context.Context) ([][]int, error)
	// NoteGPUHolders records which of the tree's processes (by their PID
	// in bridge's proc root) hold memory on the GPUs collector source
	// collects, as its last sample found them. Safe beside NSpids.
	NoteGPUHolders(source string, pids []int)
	// Close releases what the tree keeps open. It may run beside NSpids,
	// and more than once (the tree has other users).
	Close() error
}

func (o *Options) defaults() {
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// maxXidEvents caps the events kept for forensics; the per-GPU counters keep
// counting past it. A failing GPU can repeat an Xid thousands of times.
const maxXidEvents = 256
