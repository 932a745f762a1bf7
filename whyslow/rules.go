// Package bottleneck says what held a job back on a node over a window of
// its samples (a minute): one cause, and the evidence for it in words a
// user acts on. The rules are pure functions of a Window, the figures the
// rules read, made from a stats.Set of the window's samples (WindowOf);
// Analysis follows a job window by window and gives each cause's share of
// its time. The rules and their thresholds, with where each comes from, are
// docs/metrics.md's ("The bottleneck"): a first answer from outside the
// job, not a profile.
package whyslow

import (
	"fmt"
	"strings"
)

// Cause is what held the job back: the first word of the verdict.
type Cause string

// The causes, in the order their series are listed.
const (
	// GPUCompute: the GPUs are busy.
	GPUCompute Cause = "gpu_compute"
	// CPUCompute: a job without a GPU keeps its trainers busy on the CPU:
	// gpu_compute's counterpart.
	CPUCompute Cause = "cpu_compute"
	// Input: the GPUs (or a CPU job's trainers) wait while the
	// data-loading workers use the CPU they are allowed, or, with GPUs,
	// while I/O pressure is high or the trainers feed themselves.
	Input Cause = "input"
	// Communication: the GPUs wait while a network link is near its rate.
	Communication Cause = "communication"
	// CPUThrottled: the container's CPU quota throttles the trainers
	// themselves.
	CPUThrottled Cause = "cpu_throttled"
	// MemoryPressure: the job's tasks stall on memory (PSI), or it
	// reclaims at its limit.
	MemoryPressure Cause = "memory_pressure"
	// GPUThrottled: thermal or hardware slowdown clock events.
	GPUThrottled Cause = "gpu_throttled"
	// IO: the job's processes wait on storage.
	IO Cause = "io"
	// Idle: nothing on this node is busy: it waits on something outside.
	Idle Cause = "idle"
)

// Causes lists every cause, in the order of their series.
var Causes = []Cause{GPUCompute, CPUCompute, Input, Communication, CPUThrottled, MemoryPressure, GPUThrottled, IO, Idle}

// The thresholds, each stated once; docs/metrics.md gives their sources.
const (
	// BusyGPU: SM activity at or above it is a busy GPU (DCGM: 0.8 is
	// "necessary, but not sufficient" for effective use).
	BusyGPU = 0.8
	// WaitingGPU: below it the GPU waits (DCGM: under 0.5 "likely
	// indicates ineffective GPU usage"); between the two a GPU with
	// nothing else to blame is busy.
	WaitingGPU = 0.5
	// Quarter is the share of a window a stall must take to be the
	// cause: kubernetes-mixin's CPUThrottlingHigh fires at 25% of CFS
	// periods throttled, and the same share of time is used for the PSI
	// stalls and for GPU slowdown events.
	Quarter = 0.25
	// AtLimit: a job using this share of the CPU it may use is at its
	// limit (a quota throttles before the usage reaches it).
	AtLimit = 0.8
	// NearMemoryLimit: a working set at this share of the limit is near
	// it (bridge's --fast-threshold default, where it samples faster).
	NearMemoryLimit = 0.9
	// BlockedAverage: this many of the job's processes in uninterruptible sleep
	// on average (state D) is a job waiting on storage: one process half
	// of the time.
	BlockedAverage = 0.5
	// BusyTrainer: a trainer using this much of a core is busy (a Python
	// trainer's main loop runs on one thread).
	BusyTrainer = 0.5
	// LinkNear: a link carrying this share of its rate is near it.
	LinkNear = 0.7
)

// Decide is the window's verdict; ok is false when the window has too
// little to say anything (no CPU and no GPU reading). The first rule that
// holds names the cause, so that the verdict names the cause, not every
// symptom: a GPU slowed down or busy is the GPU, whatever the host does;
// the data-loading workers holding the CPU at a throttling quota are
// input, with the throttling as evidence; cpu_throttled is for trainers
// throttled themselves.
func Decide(w Window) (c Cause, ok bool) {
	if !w.Has(CPUUsed) && w.Val(GPUs) == 0 {
		return "", false
	}
	gpu := w.Val(GPUs) > 0
	switch {
	case gpu && w.Val(GPUSlowdown) >= Quarter:
		return GPUThrottled, true
	case gpu && w.Val(GPUBusy) >= BusyGPU:
		return GPUCompute, true
	case w.memoryPressure():
		return MemoryPressure, true
	case w.loadersAtLimit():
		return Input, true
	case w.throttled():
		return CPUThrottled, true
	case w.Val(BlockedProcesses) >= BlockedAverage:
		return IO, true
	case w.Val(IOSome) >= Quarter && gpu:
		return Input, true
	case w.Val(IOSome) >= Quarter:
		return IO, true
	case w.Val(LinkShare) >= LinkNear:
		return Communication, true
	case gpu && w.trainersFeedThemselves():
		return Input, true
	case gpu && w.Val(GPUBusy) >= WaitingGPU:
		return GPUCompute, true
	case !gpu && w.trainersBusy():
		return CPUCompute, true
	}
	return Idle, true
}

// memoryPressure: the job's tasks stalled on memory a quarter of the time
// (the cgroup's PSI, v2); without PSI (cgroup v1), the usage reached the
// limit in the window (reclaim ran) with the working set near it.
func (w Window) memoryPressure() bool {
	if w.Has(MemorySome) {
		return w.Val(MemorySome) >= Quarter
	}
	return w.Val(MemoryLimitHits) > 0 && w.Val(WorkingSetShare) >= NearMemoryLimit
}

// throttled: the quota throttled a quarter of the CFS periods.
func (w Window) throttled() bool { return w.Val(Throttled) >= Quarter }

// atLimit: the job used the CPU it may use (its limit, else the node's
// CPUs), or the quota throttled it.
func (w Window) atLimit() bool {
	lim := w.Val(CPULimit)
	return w.throttled() || (lim > 0 && w.Val(CPUUsed) >= AtLimit*lim)
}

// loadersAtLimit: the data-loading workers hold at least as much CPU as
// the trainers, and the job is at its limit.
func (w Window) loadersAtLimit() bool {
	return w.Val(Loaders) > 0 && w.Val(LoaderCores) > 0 && w.Val(LoaderCores) >= w.Val(TrainerCores) && w.atLimit()
}

// trainersFeedThemselves: no data-loading workers, and the trainers busy
// on the CPU while the GPU waits (a DataLoader without workers, or a host
// that cannot launch kernels faster).
func (w Window) trainersFeedThemselves() bool {
	n := w.Val(Trainers)
	return w.Has(Trainers) && w.Val(Loaders) == 0 && n > 0 && w.Val(TrainerCores) >= AtLimit*n
}

// trainersBusy: a CPU job's trainers (or, without the roles, the job)
// used BusyTrainer of a core each, or the job used the CPU it may use.
func (w Window) trainersBusy() bool {
	if w.atLimit() {
		return true
	}
	if n := w.Val(Trainers); w.Has(Trainers) && n > 0 {
		return w.Val(TrainerCores) >= BusyTrainer*n
	}
	return w.Val(CPUUsed) >= BusyTrainer
}

// Why says, for the window, why cause held the job back: its evidence, in
// words, without the cause word.
func Why(c Cause, w Window) string {
	var b strings.Builder
	gpu := w.Val(GPUs) > 0
	switch c {
	case GPUCompute:
		fmt.Fprintf(&b, "%s busy %s of the time (%s)", w.gpuWere(), pct(w.Val(GPUBusy)), w.GPUBusyFrom)
	case CPUCompute:
		fmt.Fprintf(&b, "%s %s", w.whoUsed(), w.ofAllowed(w.trainerOrJobCores()))
	case Input:
		switch {
		case w.loadersAtLimit():
			fmt.Fprintf(&b, "the %s %s used %s", count(w.Val(Loaders)), plural(w.Val(Loaders), "data-loading worker", "data-loading workers"),
				w.ofAllowed(w.Val(LoaderCores)))
			if !gpu && w.Has(TrainerCores) {
				fmt.Fprintf(&b, " while %s used %s", w.trainersWord(), cores(w.Val(TrainerCores)))
			}
		case w.Val(IOSome) >= Quarter:
			fmt.Fprintf(&b, "tasks stalled on I/O %s of the time (%s PSI io some)", pct(w.Val(IOSome)), w.IOFrom)
		default:
			fmt.Fprintf(&b, "%s used %s with no data-loading workers", w.trainersWord(), cores(w.Val(TrainerCores)))
		}
		w.gpuIdle(&b)
		if w.throttled() {
			fmt.Fprintf(&b, "; the CPU quota throttled %s of periods", pct(w.Val(Throttled)))
		}
	case CPUThrottled:
		fmt.Fprintf(&b, "the CPU quota throttled %s of periods: %s %s", pct(w.Val(Throttled)), w.whoUsed(), w.ofAllowed(w.trainerOrJobCores()))
		w.gpuIdle(&b)
	case MemoryPressure:
		if w.Has(MemorySome) {
			fmt.Fprintf(&b, "tasks stalled on memory %s of the time (the container's PSI memory some)", pct(w.Val(MemorySome)))
		} else {
			fmt.Fprintf(&b, "the usage reached the memory limit %s times a second (memory.failcnt: the kernel reclaimed to stay under it)", rate(w.Val(MemoryLimitHits)))
		}
		if w.Has(WorkingSetShare) {
			fmt.Fprintf(&b, " with the working set at %s of the %s limit", pct(w.Val(WorkingSetShare)), megabytes(w.Val(MemoryLimit)))
		}
	case GPUThrottled:
		fmt.Fprintf(&b, "GPU %.0f had %s clock events in %s of the samples", w.Val(SlowdownGPU), w.SlowdownReason, pct(w.Val(GPUSlowdown)))
		fmt.Fprintf(&b, ", %s busy %s of the time", w.gpuWere(), pct(w.Val(GPUBusy)))
	case IO:
		if w.Val(BlockedProcesses) >= BlockedAverage {
			fmt.Fprintf(&b, "%.1f of the job's processes were blocked in the kernel (state D: storage, a network file system) on average", w.Val(BlockedProcesses))
		} else {
			fmt.Fprintf(&b, "tasks stalled on I/O %s of the time (%s PSI io some)", pct(w.Val(IOSome)), w.IOFrom)
		}
		w.gpuIdle(&b)
	case Communication:
		fmt.Fprintf(&b, "%s carried %s of its link's rate", w.Link, pct(w.Val(LinkShare)))
		w.gpuIdle(&b)
	case Idle:
		if gpu {
			fmt.Fprintf(&b, "%s idle %s of the time and ", w.gpuWere(), pct(1-w.Val(GPUBusy)))
		}
		fmt.Fprintf(&b, "the job used %s", w.ofAllowed(w.Val(CPUUsed)))
		b.WriteString(": it waits on something outside this node")
	}
	return b.String()
}

// gpuIdle adds, where the node has GPUs, how long they waited.
func (w Window) gpuIdle(b *strings.Builder) {
	if w.Val(GPUs) > 0 {
		fmt.Fprintf(b, " while %s idle %s of the time", w.gpuWere(), pct(1-w.Val(GPUBusy)))
	}
}

// gpuWere is "the GPU was" or "the N GPUs were".
func (w Window) gpuWere() string {
	if n := w.Val(GPUs); n > 1 {
		return fmt.Sprintf("the %s GPUs were", count(n))
	}
	return "the GPU was"
}

// trainersWord is "the trainer" or "the N trainers".
func (w Window) trainersWord() string {
	if n := w.Val(Trainers); n > 1 {
		return "the " + count(n) + " trainers"
	}
	return "the trainer"
}

// whoUsed is the trainers, where the roles are known, else the job.
func (w Window) whoUsed() string {
	if w.Has(TrainerCores) {
		return w.trainersWord() + " used"
	}
	return "the job used"
}

// trainerOrJobCores is the trainers' cores where the roles are known,
// else the job's.
func (w Window) trainerOrJobCores() float64 {
	if w.Has(TrainerCores) {
		return w.Val(TrainerCores)
	}
	return w.Val(CPUUsed)
}

// ofAllowed is "3.9 of the 4.0 cores allowed" (the node's CPUs: "of the
// node's 8"), or "3.9 cores" without a limit.
func (w Window) ofAllowed(v float64) string {
	lim := w.Val(CPULimit)
	switch {
	case lim <= 0:
		return cores(v)
	case w.CPULimitFrom == LimitNode:
		return fmt.Sprintf("%s of the node's %s", number(v), cores(lim))
	}
	return fmt.Sprintf("%s of the %s allowed", number(v), cores(lim))
}

func pct(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) }

// number is a count of cores: two decimals below 1 (a quota of 0.10), one
// above.
func number(v float64) string {
	if v < 1 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func cores(v float64) string {
	if v == 1 {
		return "1.0 core"
	}
	return number(v) + " cores"
}

func count(v float64) string { return fmt.Sprintf("%.0f", v) }

func plural(n float64, one, many string) string {
	if count(n) == "1" {
		return one
	}
	return many
}

// rate is a count a second: whole from 10 up, else to a tenth.
func rate(v float64) string {
	if v >= 10 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func megabytes(v float64) string { return fmt.Sprintf("%.0f MB", v) }
