// Package metrics holds the sample model shared by every collector and sink,
// the Registration each collector's package declares (registration.go: all
// bridge must know of a collector before it runs), and the Sampler that
// runs the collectors.
//
// Every series is described once, by a Desc (desc.go), in the package of
// the collector that makes it (series.go holds those several share): its
// name, unit, scope, and what /metrics needs. A name states the scope
// (container_, node_, rootfs_, netns_, gpu_N_, process_) and ends with the
// unit, as MLflow's own system metrics do (_megabytes means 10^6
// bytes). Names are sent to MLflow as "system/<name>" and to W&B as
// "system.<name>".
package metrics

import (
	"context"
	"time"
)

// Scope says what a value was measured against.
type Scope string

// The scopes several collectors serve, or of series read outside their
// collector (series.go); a collector declares a scope that is its own
// alone in its package (node.ScopeRootfs).
const (
	ScopeContainer Scope = "container" // the cgroup bridge and its child run in, what kubelet and cAdvisor see
	ScopeNode      Scope = "node"      // the whole host: /proc files, RAPL, InfiniBand ports
	ScopeProcess   Scope = "process"   // the child's process tree
	ScopeGPU       Scope = "gpu"       // one GPU or MIG slice: NVML, amdgpu's sysfs, dcgm-exporter
	ScopeProm      Scope = "prom"      // a series read from a --scrape endpoint, passed through
	ScopeNetns     Scope = "netns"     // /proc/net/dev: the network namespace (the pod in Kubernetes)
)

// Point is one value of one series in one sample: two words and a name
// header. Collectors add points against a descriptor (Batch.Add); a point
// read back from a spool keeps only the name it was sent under (Named).
type Point struct {
	Desc  *Desc   // what the value is; nil when only the name is known (Named)
	Value float64 // in Desc.Unit
	name  string  // the name, when Desc is nil
}

// At is the point of value v of the series d.
func At(d *Desc, v float64) Point { return Point{Desc: d, Value: v} }

// Named is a point known by its name only: a sample read back from a
// spool, which keeps names and values.
func Named(name string, v float64) Point { return Point{Value: v, name: name} }

// Name is the point's series key: Desc.Name, or the name it was read under.
func (p Point) Name() string {
	if p.Desc != nil {
		return p.Desc.Name
	}
	return p.name
}

// Sample is the set of points taken at one instant. Seq numbers samples from 0
// in the order they were taken; sinks send it as the MLflow step.
type Sample struct {
	Seq    int64
	Time   time.Time
	Points []Point
}

// Value returns the value of the named series and whether it is present.
// By name, so that it reads samples read back from a spool as well.
func (s Sample) Value(name string) (float64, bool) {
	for _, p := range s.Points {
		if p.Name() == name {
			return p.Value, true
		}
	}
	return 0, false
}

// Batch is what one Collect adds its points to, and, when the caller asks
// (`bridge sample`), where each came from. The Sampler gives each collector
// a Batch of its own and reuses it from sample to sample.
type Batch struct {
	Points []Point
	// Sources name the file, call or URL each point came from, index for
	// index with Points; filled only while Explain is set.
	Sources []string
	// Explain asks for Sources. Without it a collector need not build a
	// source string at all: the sampling loop never asks.
	Explain bool
}

// Add adds the value v of series d, read from source (ignored unless
// b.Explain).
func (b *Batch) Add(d *Desc, v float64, source string) {
	b.Points = append(b.Points, Point{Desc: d, Value: v})
	if b.Explain {
		b.Sources = append(b.Sources, source)
	}
}

// Keep drops the points from index from on whose series keep refuses,
// with their sources.
func (b *Batch) Keep(from int, keep func(*Desc) bool) {
	n := from
	for i := from; i < len(b.Points); i++ {
		if !keep(b.Points[i].Desc) {
			continue
		}
		b.Points[n] = b.Points[i]
		if b.Explain && i < len(b.Sources) {
			b.Sources[n] = b.Sources[i]
		}
		n++
	}
	b.Points = b.Points[:n]
	if b.Explain && n < len(b.Sources) {
		b.Sources = b.Sources[:n]
	}
}

// Reset empties b for another Collect, keeping its memory.
func (b *Batch) Reset() {
	b.Points, b.Sources = b.Points[:0], b.Sources[:0]
}

// Collector reads one source.
//
// Contract: Collect is called from one goroutine at a time (the Sampler's);
// it should return promptly when ctx is done (one that cannot, stuck in a
// system call, is skipped by the Sampler until it returns). Detect and
// Close may run beside it (see Detector, Closer). Values that need two readings (CPU
// usage) are computed from the previous call's reading: the first call returns
// none of them, never a value averaged since boot. A source that is absent on
// this machine adds no points and returns a nil error; an error means the
// source exists and could not be read (the points it could read still
// count). Collect adds its points to b and keeps no reference to b. A
// Sampler's ctx carries the sample's mark (SampleMark), by which
// collectors share one reading a sample.
type Collector interface {
	Name() string
	Collect(ctx context.Context, b *Batch) error
}

// Detector is implemented by collectors that can say what they found (cgroup
// version and paths, limits and where they were set, GPUs), for `bridge
// sample`; values must marshal to JSON, and nil says nothing. Detect may run on another goroutine than Collect, and
// beside a Collect still in flight (one the Sampler gave up on), so the two
// must share no unguarded state.
type Detector interface {
	Detect(ctx context.Context) map[string]any
}

// Closer is implemented by collectors that hold resources (NVML, kept
// descriptors).
//
// Contract: Close may run while a Collect or a Detect is still in flight on
// another goroutine: the Sampler closes its collectors at shutdown even when
// a worker is stuck in a call it gave up on (a hung NVML call, a kernel read
// that never returns). So Close
//   - never waits for such a call: it takes no lock that a call holds
//     across a blocking system call or cgo call, and returns promptly;
//   - shares no unguarded state with it (the race detector sees none: a
//     concurrent map read and write is a fatal error, and would end bridge,
//     and the job's exit status with it);
//   - never releases a resource under a call that still uses it: a
//     descriptor closed under an in-flight read frees its number for the
//     next file opened, and the read then reads that file. Such a resource
//     is released by the call, when it is done with it.
//
// A Collect that runs after Close returns (its points or an error) and
// leaves nothing open. A second Close does nothing harmful.
type Closer interface {
	Close() error
}
