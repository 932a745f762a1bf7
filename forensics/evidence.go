// Package forensics says why the training process ended, from what bridge
// alone sees at the moment of its exit: the wait status, the signals bridge
// forwarded, the cgroup's OOM counters in the first sample and in the final
// one (taken right after the exit), the working set against the limit and the
// node's available memory in the last samples, pressure, throttling and GPU
// Xid events. It also reads the spool for an earlier attempt of the same run
// that stopped without a clean shutdown (bridge killed with the whole
// container), and lowers bridge's own OOM score where it may.
//
// Everything here is pure logic over values already measured, except
// SetOOMScoreAdj, which takes the /proc root as a
// parameter. docs/forensics.md explains how to read each reason.
package forensics

import (
	"syscall"
	"time"

	"github.com/bridge-dev/bridge/metrics"

	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/supervisor"
)

// Counter is a cumulative kernel counter (memory.events oom_kill, ...) in the
// first sample of the job and in the last one that had it.
type Counter struct {
	Known bool    // the metric was in at least one sample
	First float64 // value in the first sample that had it
	Last  float64 // value in the last sample that had it
	// AtExit is true when the last value comes from the final sample, taken
	// after the child was reaped. Without it a zero delta proves nothing: the
	// kill may have come after the last reading.
	AtExit bool
}

// Delta is how much the counter rose during the job (0 when unknown).
func (c Counter) Delta() float64 {
	if !c.Known {
		return 0
	}
	return c.Last - c.First
}

// Rose reports a known, positive delta.
func (c Counter) Rose() bool { return c.Known && c.Delta() > 0 }

// Steady reports a delta known to be zero up to the final sample.
func (c Counter) Steady() bool { return c.Known && c.AtExit && c.Delta() == 0 }

// Reading is one derived figure and whether it could be measured.
type Reading struct {
	Value float64
	Known bool
	// Expected: the job's collectors produce its series, so an unknown one
	// was not sampled (the job ended before a reading), rather than not
	// available here.
	Expected bool
}

// Memory is the container's memory near the end and over the job.
type Memory struct {
	Known   bool    // the working set was read at least once
	LimitMB float64 // tightest limit of the cgroup and its ancestors; 0: no limit
	// RecentWorkingSetMB and RecentSharePercent are the highest working set,
	// and its share of the limit, over the last samples (Accumulator.Recent).
	RecentWorkingSetMB float64
	RecentSharePercent float64 // 0 without a limit
	RecentAt           time.Time
	PeakWorkingSetMB   float64 // over the whole job
	PeakAt             time.Time
	// PeakUsage is the kernel's own high-water mark of usage (v1
	// memory.max_usage_in_bytes, v2 memory.peak), page cache included,
	// where it is the job's (summary.Accumulator.KernelPeak): never an
	// earlier job's mark in a cgroup jobs share.
	PeakUsageMB Reading

	// PeakWorkingSet and PeakUsage are the end-of-run table's figures,
	// with their sources (summary.Accumulator): set whenever the
	// container's memory is a series of the job, measured or not.
	PeakWorkingSet, PeakUsage summary.Figure
}

// Node is the node's memory in the last samples.
type Node struct {
	Known               bool // MemAvailable was read in the last samples
	TotalMB             float64
	MinAvailableMB      float64 // lowest MemAvailable over the last samples
	MinAvailableAt      time.Time
	MinAvailablePercent float64 // of TotalMB; 0 when the total is unknown
}

// Evidence is what bridge saw at the child's exit. It is plain data: tests
// build it directly, and FromRun fills it from a finished run.
type Evidence struct {
	ExitCode  int            // bridge's exit code: the child's status, or 128+signal
	Signal    syscall.Signal // the signal that killed the child, 0 if it exited
	ExitTime  time.Time
	Forwarded []supervisor.SignalRecord // signals bridge forwarded, in order
	// KilledAfter is --kill-after when bridge sent the SIGKILL that ended
	// the command, else 0.
	KilledAfter time.Duration

	CgroupVersion string // "v1", "v2", "hybrid"; "" when the cgroup was not read

	// Counters of bridge's cgroup (the child inherits it).
	OOMKill      Counter // v2 memory.events oom_kill, v1 memory.oom_control oom_kill
	OOM          Counter // v2 memory.events oom: this cgroup reached its own limit (none on v1)
	OOMGroupKill Counter // v2 memory.events oom_group_kill (memory.oom.group=1)

	Memory Memory
	Node   Node

	PeakMemoryPressureSome Reading // container memory PSI some avg10, %, peak (v2 only)
	PeakMemoryPressureFull Reading // container memory PSI full avg10, %, peak (v2 only)
	ThrottledShare         Reading // mean share of CFS periods throttled, %

	Xids []metrics.XidEvent // GPU Xid errors during the job

	// Killed are the job's processes the kernel's log names as OOM-killed
	// during the job; KilledWhy says why it names none ("" when it
	// does). Without them an OOM verdict names the largest of Processes,
	// the child's processes in the last sample that found them, as the
	// likely victim.
	Killed    []Victim
	KilledWhy string
	Processes metrics.ProcessList
	// PeakProcessRSS is the highest RSS of the child's process tree (the
	// sum over its processes) in the samples.
	PeakProcessRSS Reading

	Start      time.Time // when the command started; zero when not known
	Samples    int       // samples taken, the final one included
	LastSample time.Time // time of the last sample
}

// Duration is how long the command ran: from its start to its exit; 0
// when either is not known.
func (e Evidence) Duration() time.Duration {
	if e.Start.IsZero() || e.ExitTime.IsZero() || e.ExitTime.Before(e.Start) {
		return 0
	}
	return e.ExitTime.Sub(e.Start)
}

// Run is what FromRun needs at the end of a supervised run.
type Run struct {
	Exit supervisor.Exit
	// Acc is the session's accumulator after the final sample (the one taken
	// right after the child's exit) was added. Nil means nothing was measured.
	Acc *summary.Accumulator
	// Xids are the GPU collector's XidEvents(); nil without a GPU collector.
	Xids []metrics.XidEvent
	// CgroupVersion is the cgroup collector's Info().Version; "" without one.
	CgroupVersion string
	// Start is when the command started.
	Start time.Time
	// Kills are the OOM kills the kernel's log named during the job
	// (KernelLog.Kills), KillsWhy why it could not be read ("" when it
	// was). Processes are the child's processes in the last sample that
	// found them (pipeline.Sources.Processes), and Cgroup bridge's memory
	// cgroup as the kernel names it (OwnCgroup): what tells the job's
	// kills from others'.
	Kills     []OOMKill
	KillsWhy  string
	Processes metrics.ProcessList
	Cgroup    string
}

// FromRun gathers the evidence of a finished run.
func FromRun(r Run) Evidence {
	e := Evidence{
		ExitCode:      r.Exit.Code,
		Signal:        r.Exit.Signal,
		ExitTime:      r.Exit.Time,
		Forwarded:     append([]supervisor.SignalRecord(nil), r.Exit.Forwarded...),
		KilledAfter:   r.Exit.KilledAfter,
		CgroupVersion: r.CgroupVersion,
		Xids:          append([]metrics.XidEvent(nil), r.Xids...),
		Start:         r.Start,
	}
	e.Killed, e.KilledWhy = logged(r)
	e.Processes = r.Processes
	acc := r.Acc
	if acc == nil {
		return e
	}
	e.Memory.PeakWorkingSet, e.Memory.PeakUsage = acc.PeakWorkingSet(), acc.PeakUsage()
	e.PeakMemoryPressureSome.Expected = acc.Expects(metrics.ContainerPressureMemorySome)
	e.PeakMemoryPressureFull.Expected = acc.Expects(metrics.ContainerPressureMemoryFull)
	e.ThrottledShare.Expected = acc.ThrottleExpected()
	e.PeakProcessRSS.Expected = acc.Expects(metrics.ProcessMemoryRSS)
	if rss, ok := acc.Get(metrics.ProcessMemoryRSS); ok {
		e.PeakProcessRSS = Reading{Value: rss.Peak, Known: true, Expected: true}
	}
	if acc.Samples() == 0 {
		return e
	}
	e.Samples = acc.Samples()
	final := acc.Last()
	e.LastSample = final.Time

	counter := func(d *metrics.Desc) Counter {
		st, ok := acc.Get(d)
		if !ok {
			return Counter{}
		}
		_, atExit := final.Value(d.Name)
		return Counter{Known: true, First: st.First, Last: st.Last, AtExit: atExit}
	}
	e.OOMKill = counter(metrics.ContainerOOMKills)
	e.OOM = counter(metrics.ContainerOOMEvents)
	e.OOMGroupKill = counter(metrics.ContainerOOMGroupKills)

	recent := acc.Recent()
	if ws, ok := acc.Get(metrics.ContainerMemoryWorkingSet); ok {
		m := Memory{Known: true, PeakWorkingSetMB: ws.Peak, PeakAt: ws.PeakAt,
			PeakWorkingSet: e.Memory.PeakWorkingSet, PeakUsage: e.Memory.PeakUsage}
		if lim, ok := acc.Get(metrics.ContainerMemoryLimit); ok && lim.Last > 0 {
			m.LimitMB = lim.Last
		}
		for _, s := range recent {
			v, ok := s.Value(metrics.ContainerMemoryWorkingSet.Name)
			if !ok || v < m.RecentWorkingSetMB {
				continue
			}
			m.RecentWorkingSetMB, m.RecentAt = v, s.Time
			if pct, ok := s.Value(metrics.ContainerMemoryWorkingSetPercent.Name); ok {
				m.RecentSharePercent = pct
			} else if m.LimitMB > 0 {
				m.RecentSharePercent = 100 * v / m.LimitMB
			}
		}
		if pk, ok, _ := acc.KernelPeak(); ok {
			m.PeakUsageMB = Reading{Value: pk.Peak, Known: true, Expected: true}
		}
		e.Memory = m
	}

	for _, s := range recent {
		avail, ok := s.Value(metrics.NodeMemoryAvailable.Name)
		if !ok {
			continue
		}
		if !e.Node.Known || avail < e.Node.MinAvailableMB {
			e.Node.Known, e.Node.MinAvailableMB, e.Node.MinAvailableAt = true, avail, s.Time
			if total, ok := s.Value(metrics.NodeMemoryTotal.Name); ok && total > 0 {
				e.Node.TotalMB = total
				e.Node.MinAvailablePercent = 100 * avail / total
			}
		}
	}

	if st, ok := acc.Get(metrics.ContainerPressureMemorySome); ok {
		e.PeakMemoryPressureSome = Reading{Value: st.Peak, Known: true, Expected: true}
	}
	if st, ok := acc.Get(metrics.ContainerPressureMemoryFull); ok {
		e.PeakMemoryPressureFull = Reading{Value: st.Peak, Known: true, Expected: true}
	}
	// The mean of per-interval shares, as the end-of-run table shows it.
	if st, ok := acc.Get(metrics.ContainerCPUThrottledPeriods); ok {
		e.ThrottledShare = Reading{Value: st.Mean(), Known: true, Expected: true}
	}
	return e
}
