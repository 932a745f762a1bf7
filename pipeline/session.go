package pipeline

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bridge-dev/bridge/advice"
	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/promexport"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/whyslow"
)

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

// Session is one job's sampling: collectors -> spool -> forwarders ->
// sinks, the spool being the one buffer. Each sample goes from the
// sampling loop to the spool, /metrics and the end-of-run table at once;
// the spool never waits for the disk (spool.Append), so sampling never
// waits on the disk or the network.
//
// Its parts: the sampling loop (loop.go), the forwarders (forward.go), the
// end of the run within its deadline (end.go), /metrics (prom.go), the spool
// file (spoolfile.go) and the end-of-run table (table.go).
//
// Contract: Open, Run, EndBy, Stop, Finish and Report are called in that
// order from one goroutine (Run may be skipped: Stop then takes no sample;
// EndBy may be skipped: the end then counts --flush-timeout from Stop; Stop
// may be left to Finish). Sinks' Finish runs on that goroutine once their
// forwarders have returned; Send only on the forwarders (see tracker.Sink).
type Session struct {
	set     config.Config
	log     *slog.Logger
	memory  MemoryProbe
	sampler *metrics.Sampler
	spool   *spool.Spool
	sinks   []SinkRun
	// acc is the sampling loop's until it returns (doneS), then Stop's
	// and its readers'.
	acc *summary.Accumulator
	// analysis is the bottleneck verdict, the sampling loop's as acc is.
	analysis *whyslow.Analysis
	prom     *promexport.Exporter // nil unless MetricsAddr is set
	sources  *Sources             // nil when the driver gave bare collectors
	phase    func(time.Duration) time.Duration

	stopS      chan struct{} // closes the sampling loop
	doneS      chan struct{} // the sampling loop has returned
	running    bool          // Run was called
	stopped    bool          // Stop was called
	lostSample bool          // a sample could not be spooled (said once)

	spoolRemoved bool // closeSpool removed the delivered file

	// ends says, per sink, what became of the end of the job on its
	// tracker, for the table: endRecorded, or why not and what records it
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

	// The run's tick (tick.go): it reads acc under accMu, which take holds
	// while it adds a sample; perStep is the job's energy per step it last
	// read (float64 bits, 0: none), which each sample then carries.
	accMu      sync.Mutex
	perStep    atomic.Uint64
	tickers    []*tickSink
	tickCtx    context.Context
	tickCancel context.CancelFunc
	tickDone   chan struct{}
	opened     time.Time // for the cost, from here to the end

	// What Finish found for the table: the advice, the energy per step,
	// the cost (nil without a price).
	endAdvice  advice.Advice
	endPerStep jobrun.Progress
	endCost    *advice.Cost
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
		analysis:     whyslow.New(cmp.Or(o.Settings.AnalysisWindow, time.Minute)),
		sinks:        append([]SinkRun(nil), o.Started.Runs...),
		failedStarts: o.Started.Failed,
		off:          o.Off,
		sampler:      metrics.NewSampler(o.Collectors, o.Settings.CollectTimeout, o.Log),
		sources:      o.Sources,
		phase:        o.Phase,
		opened:       now,
		stopS:        make(chan struct{}),
		doneS:        make(chan struct{}),
		ended:        make(chan struct{}),
	}
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
	s.startForwarders()
	s.startTick()
	// After the forwarders exist: /metrics reads their counters.
	s.serveMetrics()
	return s
}

func (s *Session) recoverGo(what string) {
	if p := recover(); p != nil {
		s.log.Error("internal error; the job goes on", "in", what, "panic", p, "stack", string(debug.Stack()))
	}
}

// Run starts the sampling loop.
func (s *Session) Run() {
	s.running = true
	go s.loop()
}

// SpoolFile is the path of the session's spool; "" when it has none (its
// samples went to the trackers from memory).
func (s *Session) SpoolFile() string { return s.spool.Path() }

// Acc is what was measured; read it only after Stop.
func (s *Session) Acc() *summary.Accumulator { return s.acc }

// Bottleneck is the node's bottleneck verdict over the job (package
// bottleneck): the cause of the most of its time, why, and every cause's
// share; ok is false before a verdict's window closed. Read it only after
// Stop, as Acc.
func (s *Session) Bottleneck() (whyslow.Result, bool) { return s.analysis.Result() }
