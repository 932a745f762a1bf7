package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrTimeout is returned for an NVML call that did not return in time.
var ErrTimeout = errors.New("NVML call did not return in time")

// ErrClosed is returned for a call after Close began, or after a failed Init:
// NVML may no longer (or never) be loaded, and calling it then kills the process.
var ErrClosed = errors.New("NVML is shut down")

// ErrStuck is returned, without calling NVML, while an earlier call that
// timed out has not returned yet.
var ErrStuck = errors.New("an earlier NVML call has not returned; GPU readings are paused")

// guard runs NVML calls one at a time, each under a timeout. A call that
// times out keeps its goroutine (a C call cannot be interrupted) and holds the
// only slot: until it returns, further calls fail at once with ErrStuck. So a
// hung driver costs one goroutine, never one per sample.
//
// Contract: safe for concurrent use (the sampler and the Xid watcher share it).
type guard struct {
	timeout time.Duration
	slot    chan struct{} // one token: the call in flight

	mu     sync.Mutex
	stuck  *flight // the call that timed out and is still running; nil if none
	closed bool    // no call may start any more
}

type flight struct {
	what  string
	since time.Time
	done  bool // set under guard.mu when the call returns
}

func newGuard(timeout time.Duration) *guard {
	return &guard{timeout: timeout, slot: make(chan struct{}, 1)}
}

// stuckOn names the call that has not returned, and since when.
func (g *guard) stuckOn() (what string, since time.Time, stuck bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stuck == nil {
		return "", time.Time{}, false
	}
	return g.stuck.what, g.stuck.since, true
}

func (g *guard) isStuck() bool {
	_, _, stuck := g.stuckOn()
	return stuck
}

func (g *guard) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// closeDown makes every later call fail with ErrClosed.
func (g *guard) closeDown() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// last closes g and then runs f (nvmlShutdown) as the final call, after the
// call in flight, if any, returns. It does not run f while a call is stuck.
func (g *guard) last(ctx context.Context, what string, f func() error) error {
	g.closeDown()
	_, err := do(ctx, g, what, func() (struct{}, error) { return struct{}{}, f() }, true)
	return err
}

type outcome[T any] struct {
	v   T
	err error
}

// call runs f under g. what names the NVML function, for errors.
func call[T any](ctx context.Context, g *guard, what string, f func() (T, error)) (T, error) {
	return do(ctx, g, what, f, false)
}

// refuse says why a call may not start now, or nil.
func (g *guard) refuse(what string, final bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stuck != nil {
		return fmt.Errorf("%s: %w (%s, called %s ago)", what, ErrStuck, g.stuck.what, time.Since(g.stuck.since).Round(time.Millisecond))
	}
	if g.closed && !final {
		return fmt.Errorf("%s: %w", what, ErrClosed)
	}
	return nil
}

func do[T any](ctx context.Context, g *guard, what string, f func() (T, error), final bool) (T, error) {
	var zero T
	if err := g.refuse(what, final); err != nil {
		return zero, err
	}
	timer := time.NewTimer(g.timeout)
	defer timer.Stop()
	select {
	case g.slot <- struct{}{}:
	case <-ctx.Done():
		return zero, fmt.Errorf("%s: %w", what, ctx.Err())
	case <-timer.C:
		return zero, fmt.Errorf("%s: waiting for another NVML call: %w", what, ErrTimeout)
	}
	// Checked again holding the slot: Close may have begun while we waited.
	if err := g.refuse(what, final); err != nil {
		<-g.slot
		return zero, err
	}
	fl := &flight{what: what, since: time.Now()}
	res := make(chan outcome[T], 1)
	go func() {
		var o outcome[T]
		defer func() {
			if p := recover(); p != nil {
				o = outcome[T]{err: fmt.Errorf("panicked: %v", p)}
			}
			g.mu.Lock()
			fl.done = true
			if g.stuck == fl {
				g.stuck = nil
			}
			g.mu.Unlock()
			<-g.slot
			res <- o
		}()
		v, err := f()
		o = outcome[T]{v: v, err: err}
	}()
	var why error
	select {
	case o := <-res:
		if o.err != nil {
			return o.v, fmt.Errorf("%s: %w", what, o.err)
		}
		return o.v, nil
	case <-timer.C:
		why = fmt.Errorf("%s: %w after %s", what, ErrTimeout, g.timeout)
	case <-ctx.Done():
		why = fmt.Errorf("%s: %w", what, ctx.Err())
	}
	g.mu.Lock()
	if !fl.done {
		g.stuck = fl
	}
	g.mu.Unlock()
	return zero, why
}
