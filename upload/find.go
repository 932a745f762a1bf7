package upload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"time"

	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/tracker"
)

// ProgressEvery is how often bridge sync says what it is waiting for while
// a tracker finds (or elects) the run to upload to.
const ProgressEvery = 5 * time.Second

// finder finds the run one tracker's samples go to.
// There is no child to keep waiting: it is patient, within the sync's own
// deadline (--timeout), not --start-timeout, says every ProgressEvery what
// it waits for, and when it gives up says what really happened: the server
// never answered, or it answered and no run was found or elected yet.
type finder struct {
	sink  tracker.Sink
	info  tracker.StartInfo
	job   *pipeline.Job // a multi-node job's run is elected by its key; nil otherwise
	spool string        // the file, for the messages
	out   io.Writer     // progress and the final error
}

// find starts the sink until it has a run, gives up for good (a permanent
// error), or ctx ends; its error is worded for the user.
func (f finder) find(ctx context.Context) error {
	began := time.Now()
	tick := time.NewTicker(ProgressEvery)
	defer tick.Stop()
	var last error
	for gap := 250 * time.Millisecond; ; gap = min(2*gap, 5*time.Second) {
		done := make(chan error, 1)
		go func() { done <- f.start(ctx) }()
		for waiting := true; waiting; {
			select {
			case last = <-done:
				waiting = false
			case <-tick.C:
				f.progress(began, last)
			case <-ctx.Done():
				// Start honours ctx (tracker.Sink); one that does not is
				// left behind.
				select {
				case last = <-done:
				case <-time.After(time.Second):
					return f.gaveUp(time.Since(began), ctx.Err())
				}
				waiting = false
			}
		}
		switch {
		case last == nil:
			return nil
		case errors.Is(last, tracker.ErrPermanent):
			return fmt.Errorf("%s refused: %w", f.sink.Name(), last)
		case ctx.Err() != nil:
			return f.gaveUp(time.Since(began), last)
		}
		retry := time.NewTimer(gap)
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				retry.Stop()
				return f.gaveUp(time.Since(began), last)
			case <-retry.C:
				waiting = false
			case <-tick.C:
				f.progress(began, last)
			}
		}
	}
}

// start is one Start of the sink; a panic in it is an error.
func (f finder) start(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = tracker.Permanent(fmt.Errorf("internal error starting the tracker: %v\n%s", p, debug.Stack()))
		}
	}()
	if _, err = f.sink.Start(ctx, f.info); err == nil && f.sink.Run().ID == "" {
		err = errors.New("the tracker gave no run id")
	}
	return err
}

func (f finder) reached() bool {
	r, ok := f.sink.(tracker.Reacher)
	return !ok || r.Reached()
}

// what is the run sync looks for, in words.
func (f finder) what() string {
	if f.job != nil {
		return fmt.Sprintf("the job's run (key %s)", f.job.Key)
	}
	return "the run"
}

func (f finder) progress(began time.Time, last error) {
	waited := time.Since(began).Round(time.Second)
	if f.reached() {
		fmt.Fprintf(f.out, "bridge: sync: %s: still looking for %s after %s: the server answers, no run is found or elected yet\n", f.sink.Name(), f.what(), waited)
		return
	}
	why := "no answer yet"
	if last != nil {
		why = last.Error()
	}
	fmt.Fprintf(f.out, "bridge: sync: %s: still waiting for the server after %s: %s\n", f.sink.Name(), waited, why)
}

func (f finder) gaveUp(waited time.Duration, last error) error {
	waited = waited.Round(time.Second)
	why := ""
	if last != nil && !errors.Is(last, context.DeadlineExceeded) && !errors.Is(last, context.Canceled) {
		why = " (last error: " + last.Error() + ")"
	}
	if f.reached() {
		return fmt.Errorf("%s: no run to upload to after %s (--timeout): the server answers, but %s was not found or elected in that time%s; the samples stay in %s: run bridge sync again",
			f.sink.Name(), waited, f.what(), why, f.spool)
	}
	return fmt.Errorf("%s: no run to upload to: the server did not answer in %s (--timeout)%s; the samples stay in %s: run bridge sync again once it does",
		f.sink.Name(), waited, why, f.spool)
}
