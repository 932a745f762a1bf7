package pipeline

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// MemoryProbe is the memory-only read the sampling loop takes between
// samples under a memory limit, to notice a climb toward the limit at once.
// The loop runs it on a goroutine of its own, one probe at a time, and does
// not wait for it to sample: a probe still in flight (or stuck in a read)
// runs beside the next sample's Collect, so MemoryPoints must be safe beside
// it and take no reading Collect's rates depend on (the cgroup collector's
// shares only its kept-file reader; TestMemoryProbeBesideCollect).
type MemoryProbe interface {
	MemoryPoints(ctx context.Context) ([]metrics.Point, error)
}

// loop samples at the interval (the fast one near the memory limit) until
// Stop, handing each sample to take.
func (s *Session) loop() {
	defer close(s.doneS)
	defer s.recoverGo("sampling loop")
	fast := s.set.FastInterval > 0 && s.set.FastInterval < s.set.Interval && s.memory != nil
	var p prober
	for first := true; ; first = false {
		if f := s.seqFloor.Load(); f > s.sampler.NextSeq() {
			s.log.Info("continuing this node's steps after the last the run holds", "first_step", f)
			s.sampler.SetNextSeq(f)
		}
		smp := s.sampler.Sample(context.Background())
		s.take(smp, false)
		next := smp.Time.Add(s.set.Interval)
		if first {
			// The first sample is taken at once; the rest keep a random
			// phase, so that the bridges of a job started together (one per
			// pod) do not all sample and post at the same instant.
			next = smp.Time.Add(min(max(s.phase(s.set.Interval), 0), s.set.Interval))
		}
		if fast && s.nearLimit(smp.Points) {
			next = smp.Time.Add(s.set.FastInterval)
		}
		// Without a limit there is nothing to near: no probing.
		_, limited := smp.Value(metrics.ContainerMemoryWorkingSetPercent.Name)
		if !s.waitNext(&p, smp.Time, next, fast && limited) {
			return
		}
	}
}

// take hands a sample to its consumers: the spool (the one buffer, which
// never waits for the disk), /metrics, after the spool has it, and the
// end-of-run table. First the bottleneck verdict takes it: a sample that
// closes a verdict's window (last: the job's last sample) carries each
// cause's share so far. The sample also carries the job's energy per step
// the run's tick last read (tick.go).
func (s *Session) take(smp metrics.Sample, last bool) {
	s.accMu.Lock() // the run's tick reads the verdict beside the loop
	smp = s.analyse(smp, last)
	s.accMu.Unlock()
	if v := s.perStep.Load(); v != 0 {
		smp.Points = append(smp.Points, metrics.At(JobEnergyPerStep, math.Float64frombits(v)))
	}
	if err := s.spool.Append(smp); err != nil && !s.lostSample {
		s.lostSample = true // a closed spool: every later sample the same
		s.log.Error("cannot spool the sample; the trackers do not get it", "seq", smp.Seq, "err", err)
	}
	if s.prom != nil {
		s.prom.Observe(smp)
	}
	s.accMu.Lock()
	s.acc.Add(smp)
	s.accMu.Unlock()
}

// prober is the memory probe in flight between samples, if any.
type prober struct {
	near  chan bool // nil: none in flight
	since time.Time // when it started
}

// waitNext waits until next, or until a memory probe finds the working set
// near the limit, and reports whether to sample then (false: Stop). With
// probe, a memory-only look every FastInterval between samples (about
// 0.5 ms, BenchmarkMemoryProbe): a working set that climbs toward the limit
// gets the fast interval at once, not at the next regular sample. The probe
// runs on a goroutine of its own, one at a time: a read of it that hangs in
// the kernel (memory.stat stalled in a flush) must not stall sampling, nor
// Stop, which waits for this loop.
func (s *Session) waitNext(p *prober, taken, next time.Time, probe bool) bool {
	for {
		wait := time.Until(next)
		if probe {
			wait = min(wait, s.set.FastInterval)
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case <-s.stopS:
			t.Stop()
			return false
		case near := <-p.near:
			t.Stop()
			p.near = nil
			if near && p.since.After(taken) { // not one started before this sample
				return true
			}
			continue
		case <-t.C:
		}
		if !time.Now().Before(next) {
			return true
		}
		if p.near == nil {
			p.near, p.since = make(chan bool, 1), time.Now()
			go s.probeMemory(p.near)
		}
	}
}

// probeMemory sends on near whether the working set is near the limit.
func (s *Session) probeMemory(near chan<- bool) {
	v := false
	defer func() { near <- v }()
	defer s.recoverGo("memory probe")
	pts, err := s.memory.MemoryPoints(context.Background())
	v = err == nil && s.nearLimit(pts)
}

// RandomPhase draws the wait before the second sample uniformly in
// [0, interval).
func RandomPhase(interval time.Duration) time.Duration {
	if interval <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(interval)))
}

// nearLimit reports whether the working set is above the fast-sampling
// threshold of the limit: near an OOM kill, samples are taken (and, through
// the spool's notification, sent) every FastInterval.
func (s *Session) nearLimit(pts []metrics.Point) bool {
	for _, p := range pts {
		if p.Desc == metrics.ContainerMemoryWorkingSetPercent {
			return p.Value >= s.set.FastThreshold
		}
	}
	return false
}

// analyse gives smp to the bottleneck verdict, and returns it with the
// verdict's points when it closed a window, in name order as the Sampler
// sorts a sample's points. A panic there loses the verdict's points of this
// sample, never the sample.
func (s *Session) analyse(smp metrics.Sample, last bool) (out metrics.Sample) {
	out = smp
	defer s.recoverGo("bottleneck verdict")
	var b metrics.Batch
	s.analysis.Add(smp, &b, last)
	if len(b.Points) == 0 {
		return out
	}
	pts := append(slices.Clip(smp.Points), b.Points...)
	slices.SortStableFunc(pts, func(a, b metrics.Point) int { return strings.Compare(a.Name(), b.Name()) })
	smp.Points = pts
	return smp
}
