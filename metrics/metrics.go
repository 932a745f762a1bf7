// Package metrics holds the sample model shared by every collector and sink,
// and the Sampler that runs the collectors.
//
// A metric's name states its scope (container_, node_, rootfs_, netns_, gpu_N_,
// process_) and its unit, as MLflow's own system metrics do (_megabytes means
// 10^6 bytes). Names are sent to MLflow as "system/<name>" and to W&B as
// "system.<name>".
package metrics

import (
	"context"
	"time"
)

// Scope says what a value was measured against.
type Scope string

// Scopes used in metric names.
const (
	ScopeContainer Scope = "container" // the cgroup bridge and its child run in
	ScopeNode      Scope = "node"      // host-wide /proc files
	ScopeRootfs    Scope = "rootfs"    // statfs("/"), an overlay shows the node's disk
	ScopeNetns     Scope = "netns"     // /proc/net/dev: the network namespace (the pod in Kubernetes)
	ScopeProcess   Scope = "process"   // the child's process tree
	ScopeGPU       Scope = "gpu"       // one GPU or MIG slice, through NVML
	ScopeProm      Scope = "prom"      // a series read from a --scrape endpoint, passed through
)

// Units, as they appear at the end of metric names.
const (
	UnitMegabytes          = "megabytes" // 10^6 bytes, as MLflow
	UnitMegabytesPerSecond = "megabytes_per_second"
	UnitPercentage         = "percentage"
	UnitCores              = "cores"
	UnitSeconds            = "seconds"
	UnitCount              = "count"
	UnitRatio              = "ratio"
	UnitWatts              = "watts"
	UnitCelsius            = "celsius"
	UnitMHz                = "mhz"
	UnitLoad               = "load"
)

// Megabyte is the unit of every _megabytes metric (decimal, as MLflow).
const Megabyte = 1e6

// Point is one value of one metric in one sample.
type Point struct {
	Name   string  `json:"name"`   // e.g. container_memory_working_set_megabytes, without "system/"
	Value  float64 `json:"value"`  // in Unit
	Unit   string  `json:"unit"`   // one of the Unit constants
	Scope  Scope   `json:"scope"`  // what it was measured against
	Source string  `json:"source"` // the file or call it came from
}

// Sample is the set of points taken at one instant. Seq numbers samples from 0
// in the order they were taken; sinks send it as the MLflow step.
type Sample struct {
	Seq    int64     `json:"seq"`
	Time   time.Time `json:"time"`
	Points []Point   `json:"points"`
}

// Value returns the value of the named point and whether it is present.
func (s Sample) Value(name string) (float64, bool) {
	for _, p := range s.Points {
		if p.Name == name {
			return p.Value, true
		}
	}
	return 0, false
}

// Collector reads one source.
//
// Contract: Collect is called from one goroutine at a time (the Sampler's);
// it should return promptly when ctx is done (one that cannot, stuck in a
// system call, is skipped by the Sampler until it returns). Detect and
// Close may run beside it (see Detector, Closer). Values that need two readings (CPU
// usage) are computed from the previous call's reading: the first call returns
// none of them, never a value averaged since boot. A source that is absent on
// this machine returns no points and a nil error; an error means the source
// exists and could not be read. The returned slice belongs to the caller.
type Collector interface {
	Name() string
	Collect(ctx context.Context) ([]Point, error)
}

// Detector is implemented by collectors that can say what they found (cgroup
// version and paths, limits and where they were set, GPUs); values must
// marshal to JSON. Detect may run on another goroutine than Collect, and
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

// Point helper: mb converts bytes to the _megabytes unit.
func MB(bytes float64) float64 { return bytes / Megabyte }
