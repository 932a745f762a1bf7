package pipeline

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/cgroup"
	"github.com/bridge-dev/bridge/promexport"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
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

// Options are what Open needs.
type Options struct {
	Settings   config.Config // bridge's settings: the intervals, the spool's, /metrics'
	Task       string        // this bridge's task among its job's bridges on the node (Job.SpoolTask), "" if alone
	Log        *slog.Logger
	Version    string              // bridge's version, for the spool's start record
	Sources    *Sources            // when set, Collectors and Memory come from it
	Collectors []metrics.Collector // what the sampler runs
	Memory     MemoryProbe         // nil: no probing between samples
	Spool      *spool.Spool        // an already open spool; nil opens Settings.Spool or the default
	Started    Started             // from StartSinksWith
	Off        []TrackerOff        // from BuildSinks: trackers off for the job, for the table
	StartTags  map[string]string   // recorded in the spool's start record
	// Phase gives the wait between the first sample and the second, from
	// the interval; nil draws it at random in [0, interval) (see loop).
	Phase func(interval time.Duration) time.Duration
}

// Session is one job's sampling: collectors -> bounded queue -> spool ->
// forwarders -> sinks. Sampling never waits on the network: the only thing
// between a sample and the disk is a bounded channel.
//
// Contract: Open, Run, Stop, Finish and Report are called in that order
// from one goroutine (Run may be skipped: Stop then takes no sample; Stop
// may be left to Finish). Sinks' Finish runs on that goroutine once their
// forwarders have returned; Send only on the forwarders (see tracker.Sink).
type Session struct {
	set     config.Config
	log     *slog.Logger
	memory  MemoryProbe
	sampler *metrics.Sampler
	spool   *spool.Spool
	sinks   []SinkRun
	acc     *summary.Accumulator

	queue   chan metrics.Sample
	queued  atomic.Int64  // what the samples in queue hold (Sample.MemBytes)
	stopS   chan struct{} // closes the sampling loop
	doneS   chan struct{} // the sampling loop has returned
	doneW   chan struct{} // the spool writer has returned
	dropped atomic.Int64  // written by the sampling loop, read by /metrics
	running bool          // Run was called
	stopped bool          // Stop was called

	spoolRemoved bool // closeSpool removed the delivered file

	// ends says, per sink, what became of the end of the job on its
	// tracker, for the table: "recorded", or why not and what records it
	// ("" when there is no run to record it on, or Finish did not run).
	ends []string

	// seqFloor, when above the sampler's next seq, is where the sampling
	// loop moves it: the step after this node's last on a run a late start
	// joined (tracker.RunInfo.NextStep).
	seqFloor  atomic.Int64
	ended     chan struct{} // closed when a sink's run was ended by its owner
	endedOnce sync.Once

	// The end of the run (Stop and Finish together) is over by deadline, or
	// at once when abort is closed: aborted is cancelled then, and every
	// context of the end derives from it (both set by Stop; Finish ends
	// the watch with unwatchAbort).
	deadline     time.Time
	aborted      context.Context
	unwatchAbort context.CancelFunc

	failedStarts []summary.Row // sinks that could not start, for the table
	off          []TrackerOff  // trackers off for the job, for the table

	fwdCancel context.CancelFunc

	prom    *promexport.Exporter // nil unless MetricsAddr is set
	sources *Sources             // nil when the driver gave bare collectors
	phase   func(time.Duration) time.Duration
}

// Open records the attempt in the spool and starts forwarding to the
// started sinks. Sampling starts with Run. It cannot fail: a spool that
// cannot be opened leaves the samples in memory for the trackers
// (OpenSpool).
func Open(o Options) *Session {
	now := time.Now()
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Sources != nil {
		o.Collectors, o.Memory = o.Sources.Collectors, o.Sources.Memory()
	}
	sp := o.Spool
	if sp == nil {
		sp, _ = OpenSpool(context.Background(), SpoolPath(o.Settings.Spool, o.Settings.NodeID, o.Task, o.Started.Runs, now), ForJob, o.Settings, o.Log)
	}
	acc := summary.New()
	if o.Sources != nil {
		acc = summary.NewWith(o.Sources.Summary())
	}
	s := &Session{
		set: o.Settings, log: o.Log, memory: o.Memory, spool: sp, acc: acc,
		sinks:        append([]SinkRun(nil), o.Started.Runs...),
		failedStarts: o.Started.Failed,
		off:          o.Off,
		sampler:      metrics.NewSampler(o.Collectors, o.Settings.CollectTimeout, o.Log),
		queue:        make(chan metrics.Sample, max(o.Settings.QueueSize, 1)),
		stopS:        make(chan struct{}),
		doneS:        make(chan struct{}),
		doneW:        make(chan struct{}),
		ended:        make(chan struct{}),
	}
	s.sources = o.Sources
	s.phase = o.Phase
	if s.phase == nil {
		s.phase = RandomPhase
	}
	s.sampler.SetNextSeq(s.firstSeq(sp.NextSeq()))
	// Where each run is (or is to be created) goes with it, for `bridge sync`.
	info := maps.Clone(o.StartTags)
	for _, r := range s.sinks {
		info = withPlace(info, r.Sink)
	}
	if err := sp.WriteStart(spool.Record{Time: now.UnixMilli(), PID: os.Getpid(), Version: o.Version, Runs: o.Started.RunIDs(), Info: info}); err != nil {
		s.log.Error("cannot record the start in the spool", "err", err) // a closed spool: a caller's bug
	}
	if !sp.InMemory() {
		abs, _ := filepath.Abs(sp.Path())
		s.log.Info("spooling samples", "path", abs)
	}

	fctx, cancel := context.WithCancel(context.Background())
	s.fwdCancel = cancel
	for i := range s.sinks {
		r := &s.sinks[i]
		if err := sp.Track(r.Sink.Name(), r.RunID); err != nil {
			s.log.Warn("cannot re-read the spool; earlier unsent samples will not be resent", "err", err)
		}
		r.fwd = &tracker.Forwarder{Sink: r.Sink, RunID: r.RunID, Start: r.Late, Queue: sp, Wake: sp.Notify(), Log: s.log,
			OnRunEnded: s.runEnded, Gather: tracker.DefaultGather}
		if r.Late != nil {
			r.fwd.OnLateStart = s.recordLateRun(r.Sink)
		}
		r.done = make(chan struct{})
		rctx, rcancel := context.WithCancel(fctx)
		r.cancel = rcancel
		go func() {
			defer close(r.done)
			defer s.recoverGo("forwarder " + r.Sink.Name())
			r.fwd.Run(rctx)
		}()
	}
	// After the forwarders exist: /metrics reads their counters.
	s.serveMetrics()
	return s
}

// firstSeq is the first sample's seq: after the spool's last, and after
// the last step of this node's series on a run a tracker joined
// (tracker.RunInfo.NextStep: a restarted attempt whose spool is gone, a
// run given to bridge), so that the node's steps never start again at 0
// under the same keys.
func (s *Session) firstSeq(spooled int64) int64 {
	next := spooled
	for _, r := range s.sinks {
		if step := r.Sink.Run().NextStep; r.RunID != "" && step > next {
			next = step
			s.log.Info("continuing this node's steps after the last the run holds", "tracker", r.Sink.Name(), "run", r.RunID, "first_step", next)
		}
	}
	return next
}

// runEnded is the forwarders' OnRunEnded.
func (s *Session) runEnded() { s.endedOnce.Do(func() { close(s.ended) }) }

// RunEnded is closed once a tracker reports that its run was ended by its
// owner (tracker.ErrRunEnded): `bridge attach` stops then.
func (s *Session) RunEnded() <-chan struct{} { return s.ended }

// recordLateRun returns what records in the spool the run a late start of
// sink created, so that a restarted bridge or `bridge sync` finds it. A
// run it joined that holds this node's series raises the next sample's
// seq after them (the samples taken before it was found keep theirs).
func (s *Session) recordLateRun(sink tracker.Sink) func(run string) {
	return func(run string) {
		ri := sink.Run()
		for ri.NextStep > 0 {
			cur := s.seqFloor.Load()
			if ri.NextStep <= cur || s.seqFloor.CompareAndSwap(cur, ri.NextStep) {
				break
			}
		}
		rec := spool.Record{Time: time.Now().UnixMilli(), Sink: sink.Name(), Run: run, Info: RunRecordInfo(sink, ri.Created)}
		if err := s.spool.WriteRun(rec); err != nil {
			s.log.Error("cannot record the tracker's run in the spool; a restart or `bridge sync` would not find it", "tracker", sink.Name(), "run", run, "err", err)
		}
	}
}

// RunRecordInfo is the info of a spool run record for sink's run: where
// the run is (tracker.RunInfo.Place) and whether bridge created it (so that a
// restart or `bridge sync` may end it).
func RunRecordInfo(sink tracker.Sink, created bool) map[string]string {
	var info map[string]string
	if created {
		info = map[string]string{CreatedTag(sink.Name()): "true"}
	}
	return withPlace(info, sink)
}

// withPlace adds where sink's run is (tracker.RunInfo.Place) to info,
// which it returns (a new map when info is nil and there is something to
// add).
func withPlace(info map[string]string, sink tracker.Sink) map[string]string {
	for k, v := range sink.Run().Place {
		if info == nil {
			info = map[string]string{}
		}
		info[k] = v
	}
	return info
}

func (s *Session) recoverGo(what string) {
	if p := recover(); p != nil {
		s.log.Error("internal error; the job goes on", "in", what, "panic", p, "stack", string(debug.Stack()))
	}
}

// Run starts the sampling loop and the spool writer.
func (s *Session) Run() {
	s.running = true
	go s.writer()
	go s.loop()
}

func (s *Session) loop() {
	defer close(s.doneS)
	defer s.recoverGo("sampling loop")
	fast := s.set.FastInterval > 0 && s.set.FastInterval < s.set.Interval && s.memory != nil
	var probing chan bool // the memory probe in flight, if any; nil: none
	var probed time.Time  // when it started
	for first := true; ; first = false {
		if f := s.seqFloor.Load(); f > s.sampler.NextSeq() {
			s.log.Info("continuing this node's steps after the last the run holds", "first_step", f)
			s.sampler.SetNextSeq(f)
		}
		smp := s.sampler.Sample(context.Background())
		s.enqueue(smp)
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
		// Between samples, a memory-only look every FastInterval (about
		// 0.5 ms, BenchmarkMemoryProbe): a working set that climbs toward the
		// limit gets the fast interval at once, not at the next regular
		// sample. Without a limit there is nothing to near. The probe runs
		// on a goroutine of its own, one at a time: a read of it that hangs
		// in the kernel (memory.stat stalled in a flush) must not stall
		// sampling, nor Stop, which waits for this loop.
		_, limited := smp.Value(cgroup.MemoryWorkingSetPercent.Name)
		probe := fast && limited
	wait:
		for {
			wait := time.Until(next)
			if probe {
				wait = min(wait, s.set.FastInterval)
			}
			t := time.NewTimer(max(wait, 0))
			select {
			case <-s.stopS:
				t.Stop()
				return
			case near := <-probing:
				t.Stop()
				probing = nil
				if near && probed.After(smp.Time) { // not one started before this sample
					break wait
				}
				continue
			case <-t.C:
			}
			if !time.Now().Before(next) {
				break
			}
			if probing == nil {
				probing, probed = make(chan bool, 1), time.Now()
				go s.probeMemory(probing)
			}
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
		if p.Desc == cgroup.MemoryWorkingSetPercent {
			return p.Value >= s.set.FastThreshold
		}
	}
	return false
}

// maxQueueBytes bounds what the samples waiting for the spool writer hold,
// besides their count (--queue-size): a stalled disk must not let large
// samples (an exporter at the scrape's bounds) take --queue-size times
// their size. Ordinary samples (60 series, 7 KB) meet the default count
// first, and those of a node with eight GPUs (300 series) about with it.
const maxQueueBytes = 32 << 20

func (s *Session) enqueue(smp metrics.Sample) {
	// Only a stalled disk fills this queue; sampling must not block on it.
	// One sample always fits.
	size := smp.MemBytes()
	if s.queued.Add(size) <= maxQueueBytes || len(s.queue) == 0 {
		select {
		case s.queue <- smp:
			return
		default:
		}
	}
	s.queued.Add(-size)
	// Once at warn: a stalled disk would otherwise log every sample.
	lvl := slog.LevelDebug
	if n := s.dropped.Add(1); n == 1 {
		lvl = slog.LevelWarn
	}
	s.log.Log(context.Background(), lvl, "spool writer is behind; sample dropped (the end-of-run table counts every drop)", "seq", smp.Seq, "dropped", s.dropped.Load())
}

// writer owns acc until it returns (doneW); readers wait for that.
func (s *Session) writer() {
	defer close(s.doneW)
	defer s.recoverGo("spool writer")
	failed := false
	for smp := range s.queue {
		s.queued.Add(-smp.MemBytes())
		if err := s.spool.Append(smp); err != nil && !failed {
			failed = true
			s.log.Error("cannot write the spool; samples are sent without durability", "err", err)
		}
		// The second consumer: /metrics shows the sample the trackers get.
		if s.prom != nil {
			s.prom.Observe(smp)
		}
		s.acc.Add(smp)
	}
}

// EndBy sets when Stop and Finish must be over together: the child's exit
// plus the flush timeout, so that the whole wait after the child exits is at
// most the flush timeout. Without it, Stop counts FlushTimeout from its call.
func (s *Session) EndBy(deadline time.Time) { s.deadline = deadline }

// unreachedGrace is all the end of the run waits for a tracker that never
// answered during the job (connection refused, a wrong address): one more
// try, then its samples stay in the spool for `bridge sync`. A tracker that
// answered and then went away gets the whole flush timeout.
const unreachedGrace = 2 * time.Second

// finishReserve is the part of the end-of-run time kept for recording the
// end on the trackers, so that a slow drain cannot leave a run RUNNING.
func finishReserve(left time.Duration) time.Duration { return min(left/5, 5*time.Second) }

// Stop ends sampling with one final sample (taken right after the child's
// exit, so OOM counters and the last working set are current), waits for the
// spool writer, then gives the forwarders until the deadline (see EndBy)
// less a reserve for Finish, or until abort is closed, to send what is left.
func (s *Session) Stop(abort <-chan struct{}) {
	if s.stopped {
		return
	}
	s.stopped = true
	if s.deadline.IsZero() {
		s.deadline = time.Now().Add(s.set.FlushTimeout)
	}
	s.aborted, s.unwatchAbort = abortContext(abort)
	if s.running {
		close(s.stopS)
		<-s.doneS
		ctx, cancel := context.WithDeadline(context.Background(), s.deadline)
		s.enqueue(s.sampler.Sample(ctx))
		cancel()
		close(s.queue)
		<-s.doneW
	}
	// Forwarders send what is left, then return; the deadline (or a second
	// signal) is the hard stop.
	drainUntil := s.deadline.Add(-finishReserve(time.Until(s.deadline)))
	// They take the last samples once the file has them (a tracker is not
	// offered a sample before), or from memory if the disk stalls.
	wctx, wcancel := context.WithDeadline(s.aborted, drainUntil)
	if err := s.spool.Written(wctx); err != nil {
		s.log.Warn("the spool's disk does not answer; the trackers get the last samples from memory", "err", err)
	}
	wcancel()
	timer := time.AfterFunc(time.Until(drainUntil), s.fwdCancel)
	defer timer.Stop()
	unwatch := context.AfterFunc(s.aborted, s.fwdCancel)
	for _, r := range s.sinks {
		r.fwd.Finish()
		// Looked at when the grace is over: a tracker that answers during
		// it keeps its flush.
		t := time.AfterFunc(unreachedGrace, func() {
			if !r.reached() {
				r.cancel()
			}
		})
		defer t.Stop()
	}
	s.waitForwarders(s.aborted.Done())
	unwatch()
	s.fwdCancel()
	for _, r := range s.sinks {
		if n := s.spool.PendingCount(r.Sink.Name(), r.run()); n > 0 {
			s.log.Warn("tracker did not take every sample before bridge exits; "+s.Unsent(),
				"tracker", r.Sink.Name(), "unsent", n)
		}
	}
	s.sampler.Close()
}

// waitForwarders waits for the forwarders to return, until the deadline or
// abort: cancelled, they return at once unless one is stuck reading the
// spool from a disk that stalled. Such a one is left behind (its sink is
// not finished: that would run beside its Send).
func (s *Session) waitForwarders(abort <-chan struct{}) {
	t := time.NewTimer(time.Until(s.deadline))
	defer t.Stop()
	for _, r := range s.sinks {
		select {
		case <-r.done:
			continue
		case <-t.C:
		case <-abort:
		}
		s.log.Warn("a tracker's forwarder is stuck reading the spool (a stalled disk); bridge does not wait for it",
			"tracker", r.Sink.Name(), "spool", s.spool.Path())
		return
	}
}

// forwarded reports whether r's forwarder has returned.
func forwarded(r SinkRun) bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// SpoolFile is the path of the session's spool; "" when it has none (its
// samples went to the trackers from memory).
func (s *Session) SpoolFile() string { return s.spool.Path() }

// Unsent says what becomes of samples a tracker has not taken when bridge
// exits: the command that uploads them later, or that they are lost when
// there is no spool file.
func (s *Session) Unsent() string {
	if s.spool.InMemory() {
		return "there is no spool file: the samples no tracker took are lost"
	}
	return "the samples no tracker took stay in the spool; upload them later with: " + SyncCommand(s.spool.Path())
}

// Acc is what was measured; read it only after Stop.
func (s *Session) Acc() *summary.Accumulator { return s.acc }

// Dropped is how many samples the queue dropped; read it only after Stop.
func (s *Session) Dropped() int { return int(s.dropped.Load()) }

// Finish records the end on every sink (by the deadline of EndBy or Stop, or
// until Stop's abort is closed) and in the spool, and closes the spool. The
// job's energy tags and figures (summary.FigurePoints) come from what was
// measured, unless end has them. It stops the session first if Stop was not called: a sink's Finish
// never runs beside its Send.
func (s *Session) Finish(end tracker.EndInfo) {
	s.Stop(nil)
	defer s.unwatchAbort()
	// Within the same deadline as Stop, and cut short by the same abort.
	ctx, cancel := context.WithDeadline(s.aborted, s.deadline)
	defer cancel()
	// The job's energy, from every sample taken (Stop took the last one).
	end.Tags = maps.Clone(end.Tags)
	if end.Tags == nil {
		end.Tags = map[string]string{}
	}
	for k, v := range s.acc.EnergyTags() {
		if _, set := end.Tags[k]; !set {
			end.Tags[k] = v
		}
	}
	if end.Figures == nil {
		end.Figures = s.acc.FigurePoints()
	}
	info := maps.Clone(end.Tags)
	s.ends = make([]string, len(s.sinks))
	for i, r := range s.sinks {
		func() {
			s.ends[i] = "not recorded: bridge failed while recording it; " + s.endLeft()
			defer s.recoverGo("finish " + r.Sink.Name())
			switch st, _, _ := r.fwd.Status(); {
			case r.run() == "":
				s.ends[i] = "" // no run to record it on
				return
			case st == tracker.StateStopped:
				s.ends[i] = "not recorded: the tracker refused bridge's requests (above); " + s.endLeft()
				return
			case !forwarded(r):
				s.ends[i] = "not recorded: its forwarder was stuck reading the spool (a stalled disk); " + s.endLeft()
				return
			}
			if !r.reached() {
				s.ends[i] = "not recorded: the tracker was never reached; " + s.endLeft()
				s.log.Warn("the tracker was never reached during the job; the end of the job is left for `bridge sync`: "+SyncCommand(s.spool.Path()),
					"tracker", r.Sink.Name(), "run", r.run())
				return
			}
			if ctx.Err() != nil {
				s.ends[i] = "not recorded: no time was left of --flush-timeout; " + s.endLeft()
				s.log.Warn("no time left of --flush-timeout to record the end of the job on the tracker; it is left for `bridge sync`",
					"tracker", r.Sink.Name(), "spool", s.spool.Path())
				return
			}
			if err := r.Sink.Finish(ctx, end); err != nil {
				// The sink retried each request within the deadline
				// (tracker.Writes): err says how often, for how long, and
				// the last answer.
				// One line in the table: a sink may join several errors.
				s.ends[i] = "not recorded (" + strings.ReplaceAll(err.Error(), "\n", "; ") + "); " + s.endLeft()
				s.log.Warn("cannot record the end of the job on the tracker; it is left for `bridge sync`", "tracker", r.Sink.Name(), "err", err)
				return
			}
			s.ends[i] = "recorded"
			// So that `bridge sync` leaves a delivered run it ended alone.
			info[EndRecordedTag(r.Sink.Name())] = r.run()
		}()
	}
	if err := s.spool.WriteEnd(EndRecord(end, info)); err != nil {
		s.log.Warn("cannot write the end record to the spool", "err", err)
	}
	sctx, scancel := s.spoolContext()
	defer scancel()
	s.closeSpool(sctx)
	if s.prom != nil {
		if err := s.prom.Close(); err != nil {
			s.log.Warn("cannot stop the metrics endpoint cleanly", "err", err)
		}
	}
}

// Time the spool's last write and fsync get at the end of the run, at
// least, when the trackers used up the deadline; and after a second signal
// (enough for a disk that answers, not for one that stalled).
const (
	spoolCloseMin   = time.Second
	spoolCloseAbort = 100 * time.Millisecond
)

// spoolContext bounds closing the spool: the deadline (at least
// spoolCloseMin from now), or spoolCloseAbort after abort.
func (s *Session) spoolContext() (context.Context, context.CancelFunc) {
	// Not derived from aborted: an abort leaves the spool its short while.
	ctx, cancel := context.WithDeadline(context.Background(), later(s.deadline, time.Now().Add(spoolCloseMin)))
	unwatch := context.AfterFunc(s.aborted, func() {
		t := time.AfterFunc(spoolCloseAbort, cancel)
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	return ctx, func() { unwatch(); cancel() }
}

// abortContext is cancelled when abort closes (a nil abort: never), or by
// its cancel, which also ends the watch.
func abortContext(abort <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	if abort != nil {
		go func() {
			select {
			case <-abort:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Report writes the end-of-run table: what was measured, the collectors
// that failed (if any), the caller's rows (exit status, forensics), then
// where the samples went.
func (s *Session) Report(w io.Writer, title string, extra ...summary.Row) {
	rows := append(append(s.acc.Rows(), s.collectorRows()...), extra...)
	summary.Write(w, title, append(rows, s.trackerRows()...))
}

// collectorRows say, per collector that failed during the job, how often
// and its last error, and per collector whose values were left out (out of
// their series' range), how many and the last; none when every run
// succeeded with every value in range.
func (s *Session) collectorRows() []summary.Row {
	var rows []summary.Row
	for _, h := range s.sampler.Health() {
		var parts []string
		if h.Failures > 0 {
			v := fmt.Sprintf("failed %d of %d runs", h.Failures, h.Runs)
			if h.OK {
				v += " (the last one succeeded)"
			}
			parts = append(parts, v+"; last error: "+h.LastError)
		}
		if h.Refused > 0 {
			parts = append(parts, fmt.Sprintf("%d values out of range left out; the last: %s", h.Refused, h.LastRefused))
		}
		if len(parts) > 0 {
			rows = append(rows, summary.Row{What: "collector " + h.Collector, Value: strings.Join(parts, "; ")})
		}
	}
	return rows
}

// trackerRows says, per tracker, where the samples went.
func (s *Session) trackerRows() []summary.Row {
	var rows []summary.Row
	if n := s.dropped.Load(); n > 0 {
		rows = append(rows, summary.Row{What: "samples dropped", Value: fmt.Sprintf("%d (the spool writer was behind: a stalled disk)", n)})
	}
	rows = append(rows, s.failedStarts...)
	rows = append(rows, s.spoolRows()...)
	for _, o := range s.off {
		rows = append(rows, o.row(s.spool))
	}
	if len(s.sinks) == 0 && len(s.failedStarts) == 0 && len(s.off) == 0 {
		where := "samples are in " + s.spool.Path() + "; upload them with: " + SyncCommand(s.spool.Path())
		if s.spool.InMemory() {
			where = "and no spool file: samples are only in this table"
		}
		rows = append(rows, summary.Row{What: "tracker", Value: "none configured: " + where})
	}
	for i, r := range s.sinks {
		rows = append(rows, summary.Row{What: r.Sink.Name(), Value: s.trackerRow(r)})
		if i < len(s.ends) && s.ends[i] != "" {
			rows = append(rows, summary.Row{What: r.Sink.Name() + " end", Value: s.ends[i]})
		}
	}
	return rows
}

// endLeft says what records an end of the job that a tracker did not
// take: `bridge sync` of the spool, which has it.
func (s *Session) endLeft() string {
	if s.spool.InMemory() {
		return "there is no spool file for `bridge sync` to record it from"
	}
	return "left for " + SyncCommand(s.spool.Path())
}

// trackerRow says what happened with one tracker, from what happened: its
// run, whether it ever answered, what it was sent and what it was not.
func (s *Session) trackerRow(r SinkRun) string {
	st, err, sent := r.fwd.Status()
	run := r.run()
	var v string
	switch reached := r.reached(); {
	case run == "" && !reached:
		v = "never reached: no run"
	case run == "":
		v = "reached, but no run was found or created before bridge exited"
	case !reached:
		v = fmt.Sprintf("run %s: never reached, %d samples sent", run, sent)
	default:
		v = fmt.Sprintf("%s run %s: %d samples sent", st, run, sent)
		if r.Late != nil {
			v += " (run created after the job started)"
		}
	}
	if n := s.spool.PendingCount(r.Sink.Name(), run); n > 0 {
		where := "in the spool; " + SyncCommand(s.spool.Path()) + " uploads them"
		if s.spool.InMemory() {
			where = "lost: no spool file"
		}
		v += fmt.Sprintf(", %d unsent (%s)", n, where)
	}
	if err != nil && st != tracker.StateOK {
		v += ": " + err.Error()
	}
	return v
}
