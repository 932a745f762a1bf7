// Package runner runs one job: bridge's one lifecycle for a command it
// starts as its child (`bridge -- CMD`, Command) and for a running process
// it samples beside (`bridge attach`, Attach). Run takes the job from
// bridge's configuration to its exit status: the trackers started before
// the target, a pipeline.Session sampling while it runs, the end recorded
// within --flush-timeout of its end, and the end-of-run table. A target
// supplies only what differs between the two.
//
// What Run keeps for every target: a terminating signal before the target
// starts (watched from before the settings are read: Watch) ends the start
// at once, and a command never runs then; a second one during the end cuts
// the end short; the end of the run fits --flush-timeout from the
// target's end; once the target has ended, its exit status is bridge's
// whatever the end does (a panic in one step of it is logged, and the next
// step runs).
package runner

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/supervisor"
	"github.com/bridge-dev/bridge/tracker"
)

// Options are what Run needs besides the configuration and the target.
type Options struct {
	Version string       // bridge's version, for the start tags and the spool
	Stderr  io.Writer    // bridge's own lines and the end-of-run table
	Log     *slog.Logger // nil: slog.Default()
	// Signals is the watch begun before the settings were read (Watch);
	// Run takes it over. nil: Run begins one.
	Signals *Signals
}

// Signals is bridge's own handling of the terminating signals before the
// target starts: one that arrives ends the start at once (a --proc-root
// or a spool on a disk that does not answer, an election, a slow
// tracker). A command begins it before it reads its settings, and hands
// it to Run; Stop ends it.
type Signals struct {
	ctx    context.Context // cancelled by a terminating signal
	cancel context.CancelFunc
	early  *supervisor.Early
}

// Watch begins bridge's handling of the terminating signals (Signals).
func Watch() *Signals {
	ctx, cancel := context.WithCancel(context.Background())
	return &Signals{ctx: ctx, cancel: cancel, early: supervisor.WatchEarly(cancel)}
}

// Stop ends the watch and the subscription to the signals; it is safe to
// call more than once, and after Run.
func (s *Signals) Stop() {
	s.early.Stop()
	s.early.Release()
	s.cancel()
}

// Target is what a job samples beside: Command or Attach. Run calls its
// methods in the order they are listed, each at most once, from one
// goroutine; release always.
type Target interface {
	// prepare readies what the trackers are built from: the runs they
	// write to (j.ov), the multi-node job (j.multi, whose Apply may change
	// j.cfg) and a spool opened before them (j.sp), within j.start; a
	// signal that ends it is a cut error.
	prepare(j *job) error
	// claim runs once the trackers are built (j.sinks), before any starts.
	claim(j *job) error
	// describe adds the target's start tags to j.tags (the collectors'
	// are there) and returns the command line the trackers are told (nil:
	// none).
	describe(j *job) []string
	// cutShort ends a start that the terminating signal sig cut short
	// while bridge was doing what doing says, and returns bridge's exit
	// status.
	cutShort(j *job, sig syscall.Signal, doing string) int
	// start starts what is sampled, once the session is open.
	start(j *job) error
	// wait returns when the target has ended, with bridge's exit status
	// from then on.
	wait(j *job) ending
	// end is what the end of the run records and says, once the session
	// has stopped.
	end(j *job) result
	// release lets go of what prepare, claim and start took.
	release(j *job)
}

// ending is how the end of the run goes once the target has ended: over
// by deadline, at once when abort closes; done (safe more than once) ends
// what watched it. code is bridge's exit status whatever the end does.
type ending struct {
	deadline time.Time
	abort    <-chan struct{}
	done     func()
	code     int
}

// result is what the end of the run records (end), what the end-of-run
// table is told (the job's span: start to end.Time; the rows that say how
// it ended), and bridge's exit status.
type result struct {
	end   tracker.EndInfo
	title string
	start time.Time
	head  []summary.Row
	code  int
}

// job is one run of Run: what its steps hand on to the next.
type job struct {
	cfg     config.Config
	opt     Options
	log     *slog.Logger
	start   context.Context // until the target starts: a terminating signal cancels it
	early   *supervisor.Early
	multi   *pipeline.Job // the multi-node job, nil for attach
	ov      pipeline.Overrides
	sp      *spool.Spool // nil: the session opens the default one
	sinks   []tracker.Sink
	off     []pipeline.TrackerOff
	src     *pipeline.Sources
	tags    map[string]string
	started pipeline.Started
	sess    *pipeline.Session
}

// exit is an error that ends the job before it runs with bridge's exit
// status; what happened was said already.
type exit int

func (e exit) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// cut is an error that ends the job before it runs: a terminating signal
// arrived while bridge was doing what it says.
type cut string

func (c cut) Error() string { return "a signal arrived while bridge was " + string(c) }

// Run runs the job of target t and returns bridge's exit status. A
// non-nil error is the user's to fix (bridge's own flags, variables or
// file: exit 2), returned before anything was started; its message names
// the flag. ctx bounds the trackers' start: cancelled, their start ends at
// once (the job goes on without their runs); a terminating signal
// (o.Signals) ends it the same way, and the job with it.
func Run(ctx context.Context, cfg config.Config, t Target, o Options) (code int, err error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	sig := o.Signals
	if sig == nil {
		sig = Watch()
	}
	defer sig.Stop()
	startCtx, cancelStart := context.WithCancel(ctx)
	defer cancelStart()
	defer context.AfterFunc(sig.ctx, cancelStart)()
	j := &job{cfg: cfg, opt: o, log: o.Log, start: startCtx, early: sig.early}
	defer t.release(j)
	if sig.ctx.Err() != nil {
		return j.stopped(t, cut("reading its settings"))
	}
	if err := j.prepare(t); err != nil {
		return j.stopped(t, err)
	}
	if s := j.startTrackers(startCtx, t.describe(j)); s != 0 {
		return t.cutShort(j, s, "starting its trackers"), nil
	}
	// The job's other bridges on this node have spools of their own (Task).
	j.sess = pipeline.Open(pipeline.Options{Settings: j.cfg, Task: j.multi.SpoolTask(), Log: j.log, Version: o.Version,
		Sources: j.src, Spool: j.sp, Started: j.started, Off: j.off, StartTags: j.tags})
	if err := t.start(j); err != nil {
		return j.stopped(t, err)
	}
	j.sess.Run()
	e := t.wait(j)
	// From here the target's exit status is bridge's whatever the end
	// does: a panic in one step of the end is logged and the next step
	// runs, and one anywhere else on this goroutine still returns the
	// status (unrecovered, Go's runtime would exit 2).
	defer keepStatus(&code, e.code, j.log)
	defer e.done()
	j.sess.EndBy(e.deadline)
	endStep(j.log, "stopping the sampling", func() { j.sess.Stop(e.abort) })
	r := t.end(j)
	endStep(j.log, "recording the end", func() { j.sess.Finish(r.end) })
	e.done()
	endStep(j.log, "the end-of-run table", func() {
		j.sess.Report(o.Stderr, pipeline.Ending{Title: r.title, Start: r.start, End: r.end.Time, Head: r.head})
	})
	return r.code, nil
}

// stopped is Run's answer to a step's error before the target runs: an
// exit status, the end of a start a signal cut short, or a usage error.
func (j *job) stopped(t Target, err error) (int, error) {
	var e exit
	var c cut
	switch {
	case errors.As(err, &e):
		return int(e), nil
	case errors.As(err, &c):
		return t.cutShort(j, j.early.Stop(), string(c)), nil
	}
	return 0, err
}

// prepare readies the job up to its trackers' start: the target's runs,
// the trackers, the collectors and their start tags.
func (j *job) prepare(t Target) error {
	if err := t.prepare(j); err != nil {
		return err
	}
	j.sinks, j.off = pipeline.Trackers().BuildSinks(j.cfg, j.ov, j.multi, j.log)
	if err := t.claim(j); err != nil {
		return err
	}
	src, err := pipeline.BuildSources(j.cfg, j.log)
	if err != nil {
		return err
	}
	j.src, j.tags = src, src.StartTags(j.cfg, j.opt.Version)
	return nil
}

// startTrackers starts the trackers' runs, told argv (none: the run is
// its owner's, attach's), and returns the terminating signal that cut the
// start short, 0 if none.
func (j *job) startTrackers(ctx context.Context, argv []string) syscall.Signal {
	info := tracker.StartInfo{NodeID: j.cfg.NodeID, Tags: j.tags}
	if len(argv) > 0 {
		// Provenance (the git repository's files) within the collect
		// timeout.
		provCtx, cancel := context.WithTimeout(ctx, j.cfg.CollectTimeout)
		info = pipeline.JobStartInfo(provCtx, j.cfg, argv, os.Environ(), j.tags, j.log)
		cancel()
	}
	j.started = pipeline.StartSinksWith(ctx, j.sinks, info, pipeline.StartPolicy{Timeout: j.cfg.StartTimeout, Background: true}, j.log).WithOff(j.off)
	if sig := j.early.Stop(); sig != 0 {
		return sig
	}
	j.started.SayLate(pipeline.Trackers(), j.multi, j.log)
	j.started.MarkCreated(j.tags) // for a restarted bridge: see previousAttempt
	return 0
}
