package tracker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// WritePolicy says how a request to a tracker is retried when no caller
// retries it: the writes at the end of a run (MLflow's runs/update, its
// tags, the job's status and report; W&B's verdict and summary) and the
// reads they depend on. Its model is the OpenTelemetry collector's
// exporterhelper retry_on_failure: waits from Initial, times Multiplier
// after each failure, at most Max, each drawn within Jitter of its value;
// the budget is the caller's deadline (the end's: --flush-timeout), or
// MaxElapsed when it has none. What is retried is what Classify calls an
// outage (5xx, 408, 429, resets, timeouts, a 2xx that is not the tracker's
// JSON); a Permanent error is returned at once.
type WritePolicy struct {
	Initial    time.Duration // the first wait
	Max        time.Duration // the longest wait
	Multiplier float64       // each wait is the last one times this
	Jitter     float64       // each wait is drawn in [w·(1−Jitter), w·(1+Jitter)]
	MaxElapsed time.Duration // the budget when the context has no deadline
}

// Writes is the one write policy (docs/reliability.md, "The end,
// retried"): over the 25 s or so that the end of a run keeps of the default
// --flush-timeout, about ten tries.
var Writes = WritePolicy{
	Initial:    250 * time.Millisecond,
	Max:        4 * time.Second,
	Multiplier: 2,
	Jitter:     0.5,
	MaxElapsed: 30 * time.Second,
}

// Below these, a try is not worth starting: a wait that would leave less
// than minTry of the budget gives up instead; an attempt gets all of what
// is left once that is under 2·minShare, else at least minShare of it.
const (
	minTry   = 250 * time.Millisecond
	minShare = time.Second
)

type oneAttemptKey struct{}

// OneAttempt marks ctx for a caller that retries the whole call itself:
// every request made under it is tried once. The Forwarder retries a
// Send (with its backoff, its pace and its outage reports), and the start
// (pipeline.StartSinksWith, a late start) a Start: a sink's Send and Start
// mark their context with it, and nothing else does (the writes CI rule,
// harness/boundcheck).
func OneAttempt(ctx context.Context) context.Context {
	return context.WithValue(ctx, oneAttemptKey{}, true)
}

// Request is the one call path of every request bridge makes to a
// tracker: attempt makes one exchange within the context it is given and
// returns nil, or the error the sink classified (Classify). Under
// OneAttempt it is called once and its error returned as it is. Otherwise
// Writes retries it: an outage again after a wait, until it succeeds, the
// error is Permanent, or the budget leaves no time for another try; then
// the error is a *WriteError that says how many tries over how long.
//
// What attempt sends must be safe to repeat: an answer lost after the
// server applied the request (a reset, a timeout) is sent again.
func Request(ctx context.Context, attempt func(context.Context) error) error {
	if ctx.Value(oneAttemptKey{}) != nil {
		return attempt(ctx)
	}
	return Writes.Do(ctx, attempt)
}

// WriteError is a request the write policy gave up on: the outage outlasted
// the budget (or the context ended). It unwraps to the last attempt's error.
type WriteError struct {
	Tries int
	Took  time.Duration
	Err   error // the last attempt's
}

func (e *WriteError) Error() string {
	tries := "1 try"
	if e.Tries != 1 {
		tries = fmt.Sprintf("%d tries", e.Tries)
	}
	return fmt.Sprintf("after %s over %s: %v", tries, e.Took.Round(10*time.Millisecond), e.Err)
}

func (e *WriteError) Unwrap() error { return e.Err }

// Do runs attempt under the policy (see Request). With a deadline, one
// attempt gets at most half of what is left of it (all of it once that is
// short), so that a request that hangs leaves time for another.
func (p WritePolicy) Do(ctx context.Context, attempt func(context.Context) error) error {
	began := time.Now()
	deadline, bounded := ctx.Deadline()
	if !bounded {
		deadline = began.Add(p.MaxElapsed)
	}
	wait := p.Initial
	for tries := 1; ; tries++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if bounded {
			if left := time.Until(deadline); left > 2*minShare {
				actx, cancel = context.WithTimeout(ctx, max(left/2, minShare))
			}
		}
		err := attempt(actx)
		cancel()
		if err == nil || errors.Is(err, ErrPermanent) {
			return err
		}
		giveUp := func() error { return &WriteError{Tries: tries, Took: time.Since(began), Err: err} }
		if ctx.Err() != nil {
			return giveUp()
		}
		d := p.jittered(wait)
		wait = min(time.Duration(float64(wait)*p.Multiplier), p.Max)
		left := time.Until(deadline)
		var ra *RetryAfterError
		if errors.As(err, &ra) {
			// The server's hint lengthens the wait, never shortens it;
			// past the budget there is no try left.
			hint := min(ra.After, maxRetryAfter)
			if hint+minTry > left {
				return giveUp()
			}
			d = max(d, hint)
		}
		// The last wait is cut short so that the budget's end still
		// holds a try, not idle time.
		d = min(d, left-minTry)
		if d < 0 {
			return giveUp()
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return giveUp()
		case <-t.C:
		}
	}
}

// jittered draws a wait within p.Jitter of d.
func (p WritePolicy) jittered(d time.Duration) time.Duration {
	if p.Jitter <= 0 || d <= 0 {
		return d
	}
	lo := float64(d) * (1 - p.Jitter)
	return time.Duration(lo + rand.Float64()*2*p.Jitter*float64(d))
}
