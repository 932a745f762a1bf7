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

// Queue is what a Forwarder reads from: the spool.
type Queue interface {
	Pending(sink, run string, max int) []metrics.Sample
	Ack(sink, run string, seq int64) error
	Untrack(sink, run string)
}

// Forwarder moves samples from the queue to one sink, in order, with retries:
// exponential backoff with full jitter on connection errors and 5xx, the
// server's Retry-After on 429/503, quiet waiting while the run is not ready,
// and one clear report of a permanent error, after which it stops sending
// (the samples stay in the spool). Nothing it does blocks sampling.
type Forwarder struct {
	Sink   Sink
	RunID  string // run id, for the spool's ack records
	Queue  Queue
	Wake   <-chan struct{} // receives after each new sample
	Log    *slog.Logger
	Batch  int           // samples per Send; default 100
	MinGap time.Duration // first backoff; default 1s
	MaxGap time.Duration // longest backoff; default 60s

	failures int  // consecutive failed sends, kept across Run and Drain
	notReady bool // the last failure was ErrNotReady (waiting, not an outage)

	stopOnce sync.Once
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
	StateRetrying = "retrying"
	StateWaiting  = "waiting for the run"
	StateStopped  = "stopped after a permanent error"
)

// Status reports the state, the last error and how many samples were sent.
func (f *Forwarder) Status() (state string, lastErr error, sent int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == "" {
		return StateOK, f.lastErr, f.sent
	}
	return f.state, f.lastErr, f.sent
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

func (f *Forwarder) defaults() {
	if f.Batch <= 0 {
		f.Batch = 100
	}
	if f.MinGap <= 0 {
		f.MinGap = time.Second
	}
	if f.MaxGap <= 0 {
		f.MaxGap = 60 * time.Second
	}
	if f.Log == nil {
		f.Log = slog.Default()
	}
	f.mu.Lock()
	if f.quit == nil {
		f.quit = make(chan struct{})
	}
	f.mu.Unlock()
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
		batch := f.Queue.Pending(f.Sink.Name(), f.RunID, f.Batch)
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
		acked, err := f.send(ctx, batch)
		if acked > 0 {
			if aerr := f.Queue.Ack(f.Sink.Name(), f.RunID, batch[acked-1].Seq); aerr != nil {
				log.Error("cannot record acknowledgement in the spool; samples may be sent twice after a restart", "err", aerr)
			}
			f.mu.Lock()
			f.sent += acked
			f.lastOK = time.Now()
			f.mu.Unlock()
		}
		if err == nil {
			if f.failures > 0 && !f.notReady {
				log.Info("tracker reachable again; sending the samples held in the spool")
			}
			f.failures, f.notReady = 0, false
			f.set(StateOK, nil)
			continue
		}
		if ctx.Err() != nil {
			return false
		}
		f.mu.Lock()
		f.errs++
		f.mu.Unlock()
		var wait time.Duration
		var ra *RetryAfterError
		switch {
		case errors.Is(err, ErrPermanent):
			log.Error("tracker rejected bridge's requests; no more samples will be sent to it (they stay in the spool for `bridge sync`)", "err", err)
			f.set(StateStopped, err)
			f.Queue.Untrack(f.Sink.Name(), f.RunID)
			return false
		case errors.Is(err, ErrNotReady):
			f.notReady = true
			if f.failures == 0 {
				log.Info("waiting for the run to exist before sending", "err", err)
			}
			f.set(StateWaiting, err)
			wait = f.MinGap * 2
		case errors.As(err, &ra):
			f.set(StateRetrying, err)
			wait = ra.After
			log.Warn("tracker asked bridge to slow down", "retry_after", ra.After)
		default:
			f.notReady = false
			if f.failures == 0 {
				log.Warn("cannot send to the tracker; samples are kept in the spool and retried with backoff", "err", err)
			} else {
				log.Debug("send failed again", "err", err, "failures", f.failures+1)
			}
			f.set(StateRetrying, err)
			wait = f.backoff(f.failures)
		}
		f.failures++
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
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
