package metrics

import (
	"context"
	"fmt"
	"io"
	"time"
)

// What a collector may offer besides its points, each an optional
// interface: pipeline asks the collectors it built for them (As), so that
// it, and what it feeds (the end-of-run table, forensics, /metrics, the
// run's tags), knows no collector type. Detector and Closer (metrics.go)
// are two more, the Sampler's; pipeline.MemoryProbe is the sampling loop's.
// A collector offers one by having its methods: nothing registers it.

// As finds T on c, or on what c wraps, as errors.As finds an error: a
// wrapper (pipeline's scope filter) has an Unwrap method that returns the
// Collector it wraps, and offers what that offers. ok is false when
// neither offers T.
func As[T any](c Collector) (t T, ok bool) {
	for c != nil {
		if t, ok = c.(T); ok {
			return t, true
		}
		w, isWrapper := c.(interface{ Unwrap() Collector })
		if !isWrapper {
			break
		}
		c = w.Unwrap()
	}
	return t, false
}

// Tagger is a collector that describes what it found when it was built as
// run tags (the cgroup's version, the GPUs, the InfiniBand ports' state and
// rate). Tags reads no file; it is called once a job, before the child
// starts, and may run beside Collect.
type Tagger interface {
	Tags() map[string]string
}

// TagCgroupVersion is the cgroup layout's mode ("v1", "v2", "hybrid"), a
// tag of the cgroup collector's (Tagger) that forensics reads.
const TagCgroupVersion = "bridge.cgroup.version"

// StartTagger is a collector that reads, at the job's start, run tags of
// values that can change while the job runs (the cgroup's limits, and the
// file that sets each).
//
// Contract: StartTags is called once a job, before the child starts, on a
// goroutine of its own that the caller stops waiting for when ctx ends (a
// read that hangs in the kernel must not hold up the child's start): it
// reads under ctx (internal/kfile), its later reads fail at once, and the
// tags of a call that did not answer in time are left out. It may run
// beside Collect and Detect, as Detect does.
type StartTagger interface {
	StartTags(ctx context.Context) map[string]string
}

// PeakKeeper is a collector that adds the kernel's memory high-water mark
// (ContainerMemoryPeak). The mark counts from the cgroup's creation: in a
// cgroup that several jobs share it may be an earlier job's, so the
// collector reads it before the job, and the end of the run tells whether
// the mark is the job's (package summary).
//
// Contract: PeakFile reads no file. StartPeak is called once a job, before
// the child starts and with StartTags, under StartTags' contract. The
// caller then hands the result to UsePeak before sampling starts when
// StartPeak answered in time, or Discards it: a mark reset once the child
// runs would count from then.
type PeakKeeper interface {
	// PeakFile names the kernel file the mark is read from
	// (memory.peak, memory.max_usage_in_bytes).
	PeakFile() string
	StartPeak(ctx context.Context) PeakStart
	UsePeak(PeakStart)
}

// PeakStart is the memory high-water mark before the job started
// (PeakKeeper.StartPeak).
type PeakStart struct {
	File  string // the PeakFile
	Bytes uint64 // the mark before the job (with Reset, before the reset)
	Known bool   // it was read
	// Reset: the kernel reset the mark for a descriptor of bridge's own
	// (cgroup v2, Linux 6.12 and later), which Held keeps open: once the
	// collector reads the mark through it (UsePeak), its mark counts from
	// the job's start.
	Reset bool
	// Why says why it was not read, or not reset; "" when it was.
	Why string
	// Held is what the read keeps open for the collector; nil: nothing.
	// UsePeak takes it over; Discard closes it.
	Held io.Closer
}

// Discard closes what p holds, for a caller that does not hand it to
// UsePeak.
func (p PeakStart) Discard() {
	if p.Held != nil {
		p.Held.Close()
	}
}

// XidReporter is a collector that hears GPU Xid errors between samples
// (NVML's events), for forensics, which names them in the verdict of a
// job that died of one. XidEvents may be called from any goroutine, beside
// Collect, and after Close.
type XidReporter interface {
	XidEvents() []XidEvent
}

// XidEvent is one Xid critical error reported by the driver (Xid 79: the GPU
// fell off the bus, 48: double-bit ECC error, 999: unknown; see NVIDIA's Xid
// catalog). Exit forensics read them to classify a death as a GPU error.
type XidEvent struct {
	Time  time.Time `json:"time"` // when bridge received it
	GPU   int       `json:"gpu"`  // NVML index of the (parent) device
	UUID  string    `json:"uuid"`
	Xid   uint64    `json:"xid"`
	Slice *MIGSlice `json:"mig,omitempty"` // set when the driver names a MIG slice
}

// MIGSlice names a MIG slice by its GPU and compute instance IDs.
type MIGSlice struct {
	GPUInstance     uint32 `json:"gpu_instance"`
	ComputeInstance uint32 `json:"compute_instance"`
}

func (e XidEvent) String() string {
	s := fmt.Sprintf("Xid %d on GPU %d (%s)", e.Xid, e.GPU, e.UUID)
	if e.Slice != nil {
		s += fmt.Sprintf(" MIG GI %d CI %d", e.Slice.GPUInstance, e.Slice.ComputeInstance)
	}
	return s
}

// ProcessLister is a collector that walks the job's process tree every
// sample (the process collector), for forensics, which names the process
// an OOM kill most likely took where the kernel's log cannot say (the OOM
// killer takes the largest): the processes of its last walk that found
// the tree. LastProcesses reads no file, and may be called from any
// goroutine, beside Collect, and after Close.
type ProcessLister interface {
	LastProcesses() ProcessList
}

// ProcessList is the job's processes in one walk of its tree; empty
// before the first walk that found it.
type ProcessList struct {
	At    time.Time // when the walk was made
	Procs []ProcessInfo
}

// ProcessInfo is one process of a ProcessList.
type ProcessInfo struct {
	PID      int    // in --proc-root's pid namespace
	Name     string // its comm
	RSSBytes uint64
}

// FailureCounter is a collector that counts its failed reads per source
// (a --scrape endpoint's URL, as bridge shows it), for /metrics' health
// (bridge_scrape_failures_total). Failures returns a copy, and may be
// called from any goroutine, beside Collect.
type FailureCounter interface {
	Failures() map[string]int
}

// Partial is a collector that, once built, knows series of its
// registration it never adds on this machine (a root cgroup's, the
// container's PSI where the kernel keeps none per cgroup): the end-of-run
// table leaves them out rather than call them not sampled. Unproduced says
// which, and why in one sentence for the table ("" when it goes without
// saying); it reads no file.
type Partial interface {
	Unproduced() (series []*Desc, why string)
}

// GPUNumbering is a collector that numbers the node's GPUs (NVML's): a GPU
// collector built after it numbers its own from Count on, one gpu_N
// sequence for the node, and --scrape maps dcgm-exporter's GPUs onto
// Indexes (by UUID). Env.Built holds it when it was built.
type GPUNumbering interface {
	Count() int
	Indexes() map[string]int
}
