// Package tracker defines the one interface every tracker sink implements
// (MLflow, W&B) and the errors they use to tell the forwarder what to do.
package tracker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/redact"
)

// StartInfo describes the job to a sink before the child starts.
type StartInfo struct {
	Command []string          // the child's argv
	RunName string            // from a flag, or derived from the command line
	NodeID  string            // empty for single-node jobs
	Tags    map[string]string // bridge.* tags recorded at start (version, cgroup, limits, node id)
	// Time is when the job started: a run created for it, later too (a
	// tracker down at the start, `bridge sync`), starts then. Zero: now.
	Time time.Time
	// Source is where the job's code comes from.
	Source Source
}

// Source is where a job's code comes from, as a tracker's own client
// records it when the script creates its run (MLflow's context
// providers: mlflow.user, mlflow.source.*). A field not known is "".
type Source struct {
	User string // the user running the job: LOGNAME, USER, LNAME, USERNAME, else the password database
	// Name is the job's script as the command line gives it (train.py of
	// python train.py: the script's sys.argv[0]); "" when the command
	// names no script.
	Name string
	// The git repository the script (else the working directory) is in:
	// the commit checked out, its branch ("" when detached) and the first
	// remote's URL without credentials. Commit "" (no repository, no
	// commit yet) says nothing of the repository is known.
	Commit, Branch, RepoURL string
}

// EndInfo describes how the child ended.
type EndInfo struct {
	ExitCode int               // the status bridge exits with (128+N for signal N)
	Signal   int               // the signal that killed the child, 0 if it exited
	Tags     map[string]string // bridge.* tags recorded at the end (exit code, forensics)
	Time     time.Time
	// Figures are the job's figures, one value each (its peaks, CPU
	// time, GPU-hours, energy: summary.FigurePoints), recorded as run
	// metrics beside the tags so that a runs table sorts by them: each
	// finite and within its Desc's range.
	Figures []metrics.Point
	// Status, when set, is the terminal status for a run the sink owns,
	// instead of one derived from ExitCode and Signal: `bridge sync` ends a
	// run left RUNNING with the status of the spool's end record, or
	// StatusKilled for an attempt that was lost.
	Status string
	// KeepStatus records the tags only and leaves the run's status as it
	// is: `bridge sync` could not deliver every sample, and a run shown
	// FINISHED would claim they are all there.
	KeepStatus bool
}

// Terminal run statuses for EndInfo.Status (MLflow's names; W&B's run
// state belongs to the child and is not set).
const (
	StatusFinished = "FINISHED"
	StatusFailed   = "FAILED"
	StatusKilled   = "KILLED"
	// StatusRunning is no end: a multi-node job's bridge's state line
	// while it runs (LineStatus).
	StatusRunning = "RUNNING"
)

// TerminalStatus is the status bridge gives a run it owns: end.Status when
// it is a terminal one, else KILLED when the child died of a signal,
// FAILED on a non-zero exit, FINISHED otherwise. Every sink records the
// same status for the same end.
func TerminalStatus(end EndInfo) string {
	switch {
	case end.Status == StatusFinished || end.Status == StatusFailed || end.Status == StatusKilled:
		return end.Status
	case end.Signal != 0:
		return StatusKilled
	case end.ExitCode != 0:
		return StatusFailed
	}
	return StatusFinished
}

// Severity orders run statuses, worst highest: a job's status only gets
// worse (a failed attempt stays failed when a restarted one ends cleanly).
// RUNNING, SCHEDULED and unknown ones are 0.
func Severity(status string) int {
	switch status {
	case StatusFinished:
		return 1
	case StatusKilled:
		return 2
	case StatusFailed:
		return 3
	}
	return 0
}

// Sink sends samples to one tracker.
//
// Contract: calls never overlap and come in the order Start, Run, Send...,
// Finish. Start and Run run on the caller's goroutine before any Send
// (pipeline.StartSinksWith); Send runs on the sink's forwarder goroutine
// (tracker.Forwarder); Finish runs on the caller's goroutine once that
// forwarder has returned (pipeline.Session.Finish), and is skipped after a
// permanent error. Send may be called again with the same samples after an
// error, so it must be safe to repeat (MLflow drops exact duplicate points;
// W&B offsets make a resend overwrite the same lines). Every call honours
// ctx and sends its requests through Request. Start and Send mark their
// context OneAttempt: their callers retry them (the retries, backoff and
// outage behaviour of a Send live in the forwarder, shared by every sink).
// Finish's requests are retried by the write policy (Writes) within ctx,
// so each must be safe to repeat. The samples passed in are read-only and
// owned by the caller. Tags go with Start (StartInfo.Tags) and Finish
// (EndInfo.Tags).
type Sink interface {
	// Name is a short lowercase name ("mlflow", "wandb") used in logs and in
	// the spool's acknowledgement records.
	Name() string

	// Start finds or creates the run and returns the environment the child
	// needs to attach to it (e.g. MLFLOW_RUN_ID=...). It is called before the
	// child starts and must not wait for the tracker longer than ctx allows: a
	// sink that cannot reach its tracker still returns the variables it can
	// (a generated run id) together with the error.
	Start(ctx context.Context, info StartInfo) (env []string, err error)

	// Send posts samples, in order. It returns how many of them, from the
	// first, the tracker acknowledged, and an error when that is fewer than
	// all. Errors wrap ErrPermanent when retrying cannot help.
	Send(ctx context.Context, samples []metrics.Sample) (acked int, err error)

	// Run is what the sink knows of its run: its id once Start has chosen
	// or created it (the spool records acknowledgements under it), and
	// what the spool and the session keep of it (RunInfo).
	Run() RunInfo

	// Finish records the end of the job (terminal status where the sink owns
	// it). It is called once, after the last Send. An error that a request's
	// outage outlasted ctx is (wraps) a *WriteError: how many tries, over how
	// long, and the last error.
	Finish(ctx context.Context, end EndInfo) error
}

// RunInfo is what a sink knows of the run it writes to, as Sink.Run
// returns it: a copy the caller owns.
type RunInfo struct {
	ID string // "" until Start has found or created the run
	// Created says that bridge created the run (it then sets the run's
	// terminal status): a restarted attempt may resume only such a run.
	Created bool
	// NextStep is the step after the last one this node's series hold on
	// a run Start joined (a run given to bridge, a multi-node job's run),
	// 0 when none: the session numbers its samples from it, so that a
	// restarted attempt continues the node's steps instead of starting
	// again at 0, as MLflow's own monitor does when it resumes a run.
	NextStep int64
	// Place is where the run is, or is to be created, as tags named after
	// the tracker (MLflow's experiment): what the sink resolved once its
	// tracker answered, else what its variables name; nil for a tracker
	// whose variables alone find the run. The spool records it, so that
	// `bridge sync` finds the job's run, or creates a missing one, in the
	// same place whatever its own environment says.
	Place map[string]string
	// Dropped is how many points the sink left out so far because its
	// tracker would refuse them (MLflow: a bad key, a time before 1970)
	// instead of failing the request that carries them.
	Dropped int
	// Job is the job's run where this bridge is one of a multi-node job's
	// and writes to a run of its own (ID, MLflow's node run): the job's
	// end is decided on Job (package jobrun). "" where the run is the
	// job's own (a single-node job, W&B's shared run).
	Job string
}

// Reacher is implemented by sinks that know whether their tracker ever
// answered since the sink was built. The end of a job whose tracker was
// never reached does not wait the flush timeout for it (its samples are in
// the spool), and the end-of-run table says what happened.
type Reacher interface {
	// Reached reports whether any request got an answer from the server
	// (any HTTP status, an error included), as opposed to a connection that
	// failed (refused, reset, timed out). Safe to call beside the sink's
	// other methods.
	Reached() bool
}

// Reach is a sink's record of whether its tracker ever answered; a sink
// embeds it, calls Answered for every HTTP answer, and so implements
// Reacher. The zero value has seen no answer.
type Reach struct{ answered atomic.Bool }

// Answered records that the server answered a request.
func (r *Reach) Answered() { r.answered.Store(true) }

// Reached implements Reacher.
func (r *Reach) Reached() bool { return r.answered.Load() }

// ErrRunEnded is returned (wrapped) by Send when the run was ended by its
// owner (mlflow.end_run() in the notebook beside `bridge attach`): the
// samples taken up to the run's end were sent, those taken after it were
// left out, and acked covers them all. The forwarder reports it once
// (Forwarder.OnRunEnded) and sends nothing more into the run.
var ErrRunEnded = errors.New("the run has ended")

// RunEnded is Send's error once the run's owner ended it: it wraps
// ErrRunEnded and says how many samples bridge left out (acknowledged
// without sending), so that what was sent is told apart from them.
type RunEnded struct {
	LeftOut int
	Msg     string // what its owner did, and when
}

func (e *RunEnded) Error() string { return e.Msg }
func (e *RunEnded) Unwrap() error { return ErrRunEnded }

// ErrPermanent marks an error that retrying cannot fix (401, 403, a deleted
// run). The forwarder reports it once and stops sending to that sink; the
// samples stay in the spool for `bridge sync`.
var ErrPermanent = errors.New("permanent tracker error")

// ErrNotReady marks a run that does not exist yet (W&B: the child has not
// called wandb.init). The forwarder waits and tries again, quietly.
var ErrNotReady = errors.New("run not ready")

// RetryAfterError carries a server's Retry-After hint (HTTP 429/503).
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (server asked to retry after %s)", e.Err, e.After)
}

func (e *RetryAfterError) Unwrap() error { return e.Err }

// Permanent wraps err so that errors.Is(err, ErrPermanent) holds.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}

// ParseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date
// (RFC 9110 10.2.3); a date in the past means now.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// DebugLogger sends an HTTP client library's own messages (resty's) to slog
// at debug level: bridge reports request failures itself, once, through the
// forwarder. The messages may hold request URLs: redacted.
type DebugLogger struct{ Log *slog.Logger }

func (l DebugLogger) Errorf(format string, v ...any) {
	l.Log.Debug(redact.Text(fmt.Sprintf(format, v...)))
}
func (l DebugLogger) Warnf(format string, v ...any) {
	l.Log.Debug(redact.Text(fmt.Sprintf(format, v...)))
}
func (l DebugLogger) Debugf(format string, v ...any) {
	l.Log.Debug(redact.Text(fmt.Sprintf(format, v...)))
}
