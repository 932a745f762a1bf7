package tracker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// Queue is what a Forwarder reads from: the spool. Track of a sink's run
// replaces the sink's run-less tracking (run "", before a late Start);
// Untrack is for a sink that gave up.
type Queue interface {
	Pending(sink, run string, max int) []metrics.Sample
	Ack(sink, run string, seq int64) error
	Track(sink, run string) error
	Untrack(sink, run string)
}

// maxRetryAfter bounds how long a server's Retry-After can hold sending.
const maxRetryAfter = 10 * time.Minute

// DefaultGather is a job's Forwarder.Gather. MLflow's server spends about
// 11 ms of CPU on a log-batch request and 0.14 ms on each point in it
// (bench/logbatch_cost.sh): at a 1 s interval, three samples of 40 series a
// request cost it about 9 ms a sample instead of 17. It stays below
// uvicorn's 5 s keep-alive, so the connection is kept between requests.
const DefaultGather = 3 * time.Second

// Forwarder moves samples from the queue to one sink, in order, with retries:
// exponential backoff with full jitter (at least MinGap/2) on connection
// errors, 5xx and answers that are not the tracker's JSON; on 429/503 the
// longer of that backoff and the server's Retry-After (so Retry-After: 0
// cannot make it hammer the server); quiet waiting while the run is not
// ready (not counted as failures: it does not lengthen a later backoff);
// when the job ends (Finish) during a backoff, one try as soon as the
// server's Retry-After allows; and one clear report of a permanent error,
// after which it stops sending (the samples stay in the spool). An outage
// is logged once when it starts and once when it ends. Nothing it does
// blocks sampling.
//
// Sends are gathered: the next send starts Gather after the last one
// started at the earliest, so at sampling intervals shorter than Gather
// several samples go in one request (a tracker pays mostly per request), and
// at longer ones each sample goes as soon as it is written. A backlog (a
// full Batch sent) is not held back.
//
// A slow answer paces the next request: after a send (or a failed one) that
// took SlowAnswer or longer, the next waits as long again, so that a
// saturated server gets fewer, larger batches instead of a queue of small
// ones from every bridge (each client busy at most half the time). A Finish
// ends either wait at once; Drain never waits.
//
// With Start set, the sink's Start has not succeeded yet (the tracker was
// down when the job started): the forwarder calls it again, with the same
// backoff, until it succeeds, then tracks the new run in the queue (under
// Sink.Run().ID) and sends everything spooled since the start.
type Forwarder struct {
	Sink   Sink
	RunID  string // run id, for the spool's ack records ("" until a late Start)
	Queue  Queue
	Wake   <-chan struct{} // receives after each new sample
	Log    *slog.Logger
	Batch  int           // samples per Send; default 100
	MinGap time.Duration // first backoff; default 1s
	MaxGap time.Duration // longest backoff, and longest pace; default 60s
	// SlowAnswer: an attempt that took this long or longer delays the next
	// by as long (at most MaxGap); default 250ms.
	SlowAnswer time.Duration
	// Gather is the least time from the start of one send to the start of
	// the next (DefaultGather in a job); 0 sends each sample as soon as it is
	// written.
	Gather time.Duration
	Start  *StartInfo // non-nil: call Sink.Start first, until it succeeds
	// OnLateStart, if set, is called once a late Start has found the run,
	// before anything is sent or acknowledged for it: the caller records the
	// run (the spool) so that a restart or `bridge sync` finds it.
	OnLateStart func(run string)
	// OnRunEnded, if set, is called once when Send reports that the run
	// was ended by its owner (ErrRunEnded): `bridge attach` stops then.
	OnRunEnded func()

	failures  int       // consecutive failed sends, kept across Run and Drain
	notReady  bool      // the last failure was ErrNotReady (waiting, not an outage)
	downSince time.Time // start of the current outage, zero when none
	finalTry  bool      // a backoff was cut short by Finish (done once)
	paceTill  time.Time // no send before this (a slow answer's pace, Gather), unless finishing

	// now is the clock of every time the loop reads: time.Now, or a
	// test's on which a send takes long.
	now func() time.Time

	stopOnce sync.Once
	endOnce  sync.Once     // OnRunEnded
	initOnce sync.Once     // defaults
	quit     chan struct{} // closed by Finish: return once nothing is pending

	mu      sync.Mutex
	state   string
	lastErr error
	sent    int
	errs    int       // failed sends, for the metrics endpoint
	lastOK  time.Time // last acknowledged send
}

// Counters reports the failed sends so far and the time of the last
// successful one (zero: none), for bridge's /metrics.
func (f *Forwarder) Counters() (errors int, lastSend time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.errs, f.lastOK
}

// Forwarder states, for the end-of-run summary.
const (
	StateOK       = "ok"
	StateStarting = "starting" // a late Start that has not finished (nor failed) yet
	StateRetrying = "retrying"
	StateWaiting  = "waiting for the run"
	StateStopped  = "stopped after a permanent error"
	StateRunEnded = "ended by its owner"
)

// CurrentRun is the run the forwarder sends to: RunID, or the run a late
// Start created ("" while it has not).
func (f *Forwarder) CurrentRun() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.RunID
}

// Status reports the state, how many samples were sent and the last error.
func (f *Forwarder) Status() (state string, sent int, lastErr error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == "" {
		// Nothing happened yet: "ok" only for a forwarder that has its run.
		if f.Start != nil {
			return StateStarting, f.sent, f.lastErr
		}
		return StateOK, f.sent, f.lastErr
	}
	return f.state, f.sent, f.lastErr
}

func (f *Forwarder) set(state string, err error) {
	f.mu.Lock()
	f.state, f.lastErr = state, err
	f.mu.Unlock()
}

// Run forwards until ctx is done. Call Drain afterwards to flush what is left.
func (f *Forwarder) Run(ctx context.Context) {
	f.defaults()
	f.loop(ctx, false)
}

// Drain sends what is pending until nothing is left or ctx is done; it
// reports whether everything was sent. It must not run beside Run.
func (f *Forwarder) Drain(ctx context.Context) bool {
	f.defaults()
	return f.loop(ctx, true)
}

// Finish asks a running Run to send what is pending and then return; ctx
// (given to Run) stays the hard deadline. Unlike cancelling ctx it never cuts
// a request in flight, which would make the tracker see it twice.
func (f *Forwarder) Finish() {
	f.defaults()
	f.stopOnce.Do(func() { close(f.quit) })
}

// defaults fills the unset options once: Run and Finish may call it at the
// same time (a session stopped right after it opened).
func (f *Forwarder) defaults() {
	f.initOnce.Do(func() {
		if f.Batch <= 0 {
			f.Batch = 100
		}
		if f.MinGap <= 0 {
			f.MinGap = time.Second
		}
		if f.MaxGap <= 0 {
			f.MaxGap = 60 * time.Second
		}
		if f.SlowAnswer <= 0 {
			f.SlowAnswer = 250 * time.Millisecond
		}
		if f.now == nil {
			f.now = time.Now
		}
		if f.Log == nil {
			f.Log = slog.Default()
		}
		f.quit = make(chan struct{})
	})
}

func (f *Forwarder) quitting() bool {
	select {
	case <-f.quit:
		return true
	default:
		return false
	}
}

func (f *Forwarder) loop(ctx context.Context, drain bool) bool {
	log := f.Log.With("tracker", f.Sink.Name())
	for {
		if st, _, _ := f.Status(); st == StateStopped {
			return false
		}
		var err error
		var took time.Duration
		var gatherTill time.Time // no send before this: samples gather for the next
		short := false           // a Send acknowledged less than its batch
		if f.Start != nil {
			// Also while finishing: ctx (the flush timeout) bounds it.
			began := f.now()
			err = f.lateStart(ctx, log)
			took = f.now().Sub(began)
		} else {
			// A slow answer's pace comes before the batch is read, so what
			// arrives during it goes in the same request.
			if !drain && !f.pace(ctx) {
				return false
			}
			batch := f.Queue.Pending(f.Sink.Name(), f.CurrentRun(), f.Batch)
			if len(batch) == 0 {
				if drain || f.quitting() {
					return true
				}
				select {
				case <-ctx.Done():
					return true
				case <-f.Wake:
				case <-f.quit:
				}
				continue
			}
			var acked int
			began := f.now()
			acked, err = f.send(ctx, batch)
			took = f.now().Sub(began)
			short = acked < len(batch)
			if len(batch) < f.Batch {
				// A full batch leaves more waiting (an outage's backlog):
				// that goes at once.
				gatherTill = began.Add(f.Gather)
			}
			if acked > 0 {
				if aerr := f.Queue.Ack(f.Sink.Name(), f.CurrentRun(), batch[acked-1].Seq); aerr != nil {
					log.Error("cannot record acknowledgement in the spool; samples may be sent twice after a restart", "err", aerr)
				}
				f.mu.Lock()
				f.sent += acked
				f.lastOK = f.now()
				f.mu.Unlock()
			}
		}
		if errors.Is(err, ErrRunEnded) && !short {
			// Not a failure: what was taken after the end is acknowledged
			// and left out, now and for every later sample.
			f.endOnce.Do(func() {
				log.Info("the run was ended by its owner; bridge sends nothing more into it", "run", f.CurrentRun(), "detail", err)
				if f.OnRunEnded != nil {
					f.OnRunEnded()
				}
			})
			f.set(StateRunEnded, err)
			continue
		}
		var pace time.Duration // a slow answer's: the next attempt waits as long
		if took >= f.SlowAnswer {
			pace = min(took, f.MaxGap)
		}
		if err == nil {
			f.paceTill = f.now().Add(pace)
			if gatherTill.After(f.paceTill) {
				f.paceTill = gatherTill
			}
			if !f.downSince.IsZero() {
				log.Info("tracker reachable again; sending the samples held in the spool",
					"down_for", f.now().Sub(f.downSince).Round(time.Second), "failed_attempts", f.failures)
			}
			f.failures, f.notReady, f.downSince = 0, false, time.Time{}
			f.set(StateOK, nil)
			continue
		}
		if ctx.Err() != nil {
			return false
		}
		f.mu.Lock()
		f.errs++
		f.mu.Unlock()
		wait, hint, stop := f.failed(err, log)
		if stop {
			return false
		}
		allowed := f.now().Add(hint)
		// A failure that took long (a pool timeout) says the server is
		// saturated: wait at least as long as it took.
		wait = max(wait, pace)
		// When the job ends (Finish) during a long backoff, one try is made
		// as soon as the server allows (its Retry-After, else at once)
		// instead of after the backoff, which could outlast the flush
		// timeout.
		var cut <-chan struct{}
		if !f.finalTry {
			cut = f.quit
		}
		cutShort, ok := waitFor(ctx, wait, cut)
		if cutShort {
			f.finalTry = true
			_, ok = waitFor(ctx, allowed.Sub(f.now()), nil)
		}
		if !ok {
			return false
		}
	}
}

// waitFor waits d, or until cut closes (cutShort), or until ctx ends (ok is
// false). A nil cut never closes.
func waitFor(ctx context.Context, d time.Duration, cut <-chan struct{}) (cutShort, ok bool) {
	if d <= 0 {
		return false, ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-t.C:
		return false, true
	case <-cut:
		return true, true
	}
}

// pace waits out a slow answer's pace and Gather; Finish ends it at once
// (the job's end never waits for one). It is false when ctx ended first.
func (f *Forwarder) pace(ctx context.Context) bool {
	_, ok := waitFor(ctx, f.paceTill.Sub(f.now()), f.quit)
	return ok
}

// failed records a failed attempt and says how long to wait, or to stop;
// hint is the server's Retry-After (0 without one), which no retry may
// come before.
func (f *Forwarder) failed(err error, log *slog.Logger) (wait, hint time.Duration, stop bool) {
	if errors.Is(err, ErrPermanent) {
		log.Error("tracker rejected bridge's requests; no more samples will be sent to it (they wait in the spool, within --spool-max-size, for `bridge sync`)", "err", err)
		f.set(StateStopped, err)
		f.Queue.Untrack(f.Sink.Name(), f.CurrentRun())
		return 0, 0, true
	}
	if errors.Is(err, ErrNotReady) {
		if !f.notReady {
			log.Info("waiting for the run to exist before sending", "err", err)
		}
		// Waiting for the run is not an outage: it must not lengthen the
		// backoff of one that follows (a job's first seconds could
		// otherwise push a retry past the flush timeout).
		f.notReady, f.failures = true, 0
		f.set(StateWaiting, err)
		return f.MinGap * 2, 0, false
	}
	f.notReady = false
	wait = f.backoff(f.failures)
	f.failures++
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		// The server's hint lengthens the backoff, never shortens it.
		hint = min(ra.After, maxRetryAfter)
		wait = max(wait, hint)
	}
	if f.downSince.IsZero() {
		f.downSince = f.now()
		log.Warn("cannot send to the tracker; samples wait in the spool (within --spool-max-size, the oldest go first) and are retried with backoff until it answers (reported again when it does)", "err", err)
	} else {
		log.Debug("tracker still failing", "err", err, "failures", f.failures, "next_try_in", wait)
	}
	f.set(StateRetrying, err)
	return wait, hint, false
}

// lateStart calls the sink's Start once; on success the samples spooled
// since the job started become pending for the new run.
func (f *Forwarder) lateStart(ctx context.Context, log *slog.Logger) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = Permanent(errors.New("sink panicked: " + slog.AnyValue(p).String()))
		}
	}()
	env, err := f.Sink.Start(ctx, *f.Start)
	if err == nil {
		err = ValidEnv(env)
	}
	run := f.Sink.Run().ID
	if err == nil && run == "" {
		err = Permanent(errors.New("tracker started without a run id"))
	}
	if err != nil {
		return err
	}
	if f.OnLateStart != nil {
		f.OnLateStart(run)
	}
	// It replaces the run-less tracking: not an Untrack, which is giving up.
	if terr := f.Queue.Track(f.Sink.Name(), run); terr != nil {
		log.Warn("cannot re-read the spool; samples taken before the run existed may not be sent", "err", terr)
	}
	f.mu.Lock()
	f.RunID, f.Start = run, nil
	f.mu.Unlock()
	log.Warn("tracker answered after the job started: bridge's samples go to a run created now; the child did not get its id, so a run the child creates itself is a separate one",
		"run", run)
	return nil
}

// send calls Sink.Send with a recover, so a sink bug cannot take bridge down.
func (f *Forwarder) send(ctx context.Context, batch []metrics.Sample) (acked int, err error) {
	defer func() {
		if p := recover(); p != nil {
			acked, err = 0, Permanent(errors.New("sink panicked: "+slog.AnyValue(p).String()))
		}
	}()
	acked, err = f.Sink.Send(ctx, batch)
	if acked < 0 {
		acked = 0
	}
	if acked > len(batch) {
		acked = len(batch)
	}
	return acked, err
}

// backoff is exponential with full jitter (AWS's "full jitter"), capped.
func (f *Forwarder) backoff(failures int) time.Duration {
	d := f.MinGap << min(failures, 16)
	if d <= 0 || d > f.MaxGap {
		d = f.MaxGap
	}
	return f.MinGap/2 + time.Duration(rand.Int64N(int64(d)))
}
