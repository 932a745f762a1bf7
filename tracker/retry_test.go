package tracker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fast is the write policy with short waits, so that the tests make many
// tries in little time.
var fast = WritePolicy{Initial: time.Millisecond, Max: 5 * time.Millisecond, Multiplier: 2, Jitter: 0.5, MaxElapsed: 2 * time.Second}

var errOutage = errors.New("HTTP status 503")

// An outage is tried again until the request goes through; a permanent
// error is returned at once, as it is.
func TestWritePolicyRetriesOutagesOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tries := 0
	err := fast.Do(ctx, func(context.Context) error {
		if tries++; tries < 4 {
			return errOutage
		}
		return nil
	})
	if err != nil || tries != 4 {
		t.Errorf("outage three times: err %v after %d tries, want nil after 4", err, tries)
	}

	tries = 0
	perm := Permanent(errors.New("HTTP status 400"))
	err = fast.Do(ctx, func(context.Context) error { tries++; return perm })
	if !errors.Is(err, ErrPermanent) || tries != 1 {
		t.Errorf("permanent: err %v after %d tries, want it after 1", err, tries)
	}
	var we *WriteError
	if errors.As(err, &we) {
		t.Errorf("a permanent error is not the policy giving up: %v", err)
	}
}

// An outage that outlasts the budget: the error says how many tries, over
// how long, and unwraps to the last attempt's error.
func TestWritePolicyGivesUpWithinTheBudget(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 600*time.Millisecond)
		}},
		// No deadline: MaxElapsed is the budget.
		{"no deadline", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			p := fast
			p.MaxElapsed = 600 * time.Millisecond
			tries := 0
			err := p.Do(ctx, func(context.Context) error {
				tries++
				return fmt.Errorf("try %d: %w", tries, errOutage)
			})
			var we *WriteError
			if !errors.As(err, &we) || !errors.Is(err, errOutage) {
				t.Fatalf("err %v, want a *WriteError wrapping the outage", err)
			}
			if we.Tries != tries || tries < 2 {
				t.Errorf("WriteError.Tries %d, attempts made %d: want them equal and more than one", we.Tries, tries)
			}
			if want := fmt.Sprintf("after %d tries over ", tries); !strings.HasPrefix(err.Error(), want) ||
				!strings.HasSuffix(err.Error(), fmt.Sprintf("try %d: HTTP status 503", tries)) {
				t.Errorf("message %q, want %q..., ending in the last error", err, want)
			}
		})
	}
}

// A Retry-After that reaches past the budget leaves no try: the policy
// gives up at once instead of waiting for nothing.
func TestWritePolicyRetryAfterPastBudget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tries := 0
	err := fast.Do(ctx, func(context.Context) error {
		tries++
		return &RetryAfterError{After: 2 * time.Minute, Err: errOutage}
	})
	var we *WriteError
	if !errors.As(err, &we) || tries != 1 {
		t.Errorf("err %v after %d tries, want a WriteError after 1", err, tries)
	}
}

// A hung attempt gets half of what is left, so that another try fits.
func TestWritePolicyHungAttemptLeavesATry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	outer, _ := ctx.Deadline()
	var first time.Time
	tries := 0
	err := fast.Do(ctx, func(actx context.Context) error {
		if tries++; tries == 1 {
			first, _ = actx.Deadline()
			<-actx.Done() // a request that never answers
			return fmt.Errorf("timed out: %w", actx.Err())
		}
		return nil
	})
	if err != nil || tries != 2 {
		t.Errorf("err %v after %d tries, want the second try to go through", err, tries)
	}
	if !first.Before(outer) {
		t.Errorf("the first attempt's deadline %s is not before the budget's %s", first, outer)
	}
}

// Under OneAttempt (a Send, a Start: their callers retry) a request is
// tried once and its error returned as it is.
func TestOneAttempt(t *testing.T) {
	tries := 0
	err := Request(OneAttempt(context.Background()), func(context.Context) error { tries++; return errOutage })
	var we *WriteError
	if err != errOutage || errors.As(err, &we) || tries != 1 {
		t.Errorf("err %v after %d tries, want the outage itself after 1", err, tries)
	}
}

// The waits stay within the jitter of their value.
func TestWritePolicyJitter(t *testing.T) {
	for range 1000 {
		d := Writes.jittered(time.Second)
		if d < 500*time.Millisecond || d > 1500*time.Millisecond {
			t.Fatalf("wait %s for 1s with jitter 0.5", d)
		}
	}
}
