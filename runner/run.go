// Package runner runs one job: bridge's one lifecycle for a command it
// starts as its child (`bridge -- CMD`, Command) and for a running process
// it samples beside (`bridge attach`, Attach). Run takes the job from
// bridge's configuration to its exit status: the trackers started before
// the target, a pipeline.Session sampling while it runs, the end recorded
// within --flush-timeout of its end, and the end-of-run table. A target
// supplies only what differs between the two.
//
// What Run keeps for every target: a terminating signal before the target
// starts ends the start at once, and a command never runs then; a second
// one during the end cuts the end short; the end of the run fits
// --flush-timeout from the target's end.
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
}

// Target is what a job samples beside: Command or Attach. Run calls its
// methods in the order they are listed, each at most once, from one
// goroutine; release always.
type Target interface {
	// prepare readies what the trackers are built from: the runs they
	// write to (j.ov), the multi-node job (j.multi), a spool opened before
	// them (j.sp) and the session's settings (j.set).
	prepare(j *job) error
	// claim runs once the trackers are built (j.sinks), before any starts.
	claim(j *job) error
	// describe adds the target's start tags to j.tags (the collectors'
	// are there) and returns the command line the trackers are told (nil:
	// none).
	describe(j *job) []string
	// cutShort ends a start that the terminating signal sig cut short, and
	// returns bridge's exit status.
	cutShort(j *job, sig syscall.Signal) int
	// start starts what is sampled, once the session is open.
	start(j *job) error
	// wait returns when the target has ended.
	wait(j *job) ending
	// end is what the end of the run records and says, once the session
	// has stopped.
	end(j *job) result
	// release lets go of what prepare, claim and start took.
	release(j *job)
}

// ending is how the end of the run goes once the target has ended: over
// by deadline, at once when abort closes; done ends what watched it.
type ending struct {
	deadline time.Time
	abort    <-chan struct{}
	done     func()
}

// result is what the end of the run records (end), the end-of-run table's
// title and rows after the measurements, and bridge's exit status.
type result struct {
	end   tracker.EndInfo
	title string
	rows  []summary.Row
	code  int
}

// job is one run of Run: what its steps hand on to the next.
type job struct {
	cfg     config.Config
	opt     Options
	log     *slog.Logger
	early   *supervisor.Early
	multi   *pipeline.Job // the multi-node job, nil for attach
	ov      pipeline.Overrides
	set     pipeline.Settings
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

// Run runs the job of target t and returns bridge's exit status. A
// non-nil error is the user's to fix (bridge's own flags, variables or
// file: exit 2), returned before anything was started; its message names
// the flag. ctx bounds the trackers' start: cancelled, their start ends at
// once (the job goes on without their runs); a terminating signal ends it
// the same way, and the job with it.
func Run(ctx context.Context, cfg config.Config, t Target, o Options) (int, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	j := &job{cfg: cfg, opt: o, log: o.Log, set: pipeline.SettingsFrom(cfg)}
	// From here on a signal is bridge's to handle: before the target
	// starts, a terminating one ends the start (an election, a slow
	// tracker) at once.
	startCtx, cancelStart := context.WithCancel(ctx)
	defer cancelStart()
	j.early = supervisor.WatchEarly(cancelStart)
	defer j.early.Stop()
	defer t.release(j)
	if err := j.prepare(t); err != nil {
		return exitOf(err)
	}
	if sig := j.startTrackers(startCtx, t.describe(j)); sig != 0 {
		return t.cutShort(j, sig), nil
	}
	j.sess = pipeline.Open(pipeline.Options{Settings: j.set, Log: j.log, Version: o.Version,
		Sources: j.src, Spool: j.sp, Started: j.started, Off: j.off, StartTags: j.tags})
	if err := t.start(j); err != nil {
		return exitOf(err)
	}
	j.sess.Run()
	e := t.wait(j)
	j.sess.EndBy(e.deadline)
	j.sess.Stop(e.abort)
	r := t.end(j)
	j.sess.Finish(r.end)
	e.done()
	j.sess.Report(o.Stderr, r.title, r.rows...)
	return r.code, nil
}

// exitOf is Run's answer to a step's error: an exit status, or a usage
// error.
func exitOf(err error) (int, error) {
	var e exit
	if errors.As(err, &e) {
		return int(e), nil
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
		info = pipeline.JobStartInfo(j.cfg, argv, os.Environ(), j.tags)
	}
	j.started = pipeline.StartSinksWith(ctx, j.sinks, info, pipeline.StartPolicy{Timeout: j.cfg.StartTimeout, Background: true}, j.log)
	if sig := j.early.Stop(); sig != 0 {
		return sig
	}
	j.started.SayLate(pipeline.Trackers(), j.multi, j.log)
	j.started.MarkCreated(j.tags) // for a restarted bridge: see previousAttempt
	return 0
}
