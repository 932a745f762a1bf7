package pipeline

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

// downSink is a tracker that is down: every call fails as a refused
// connection would. answered says whether it ever answered before (a
// tracker that was reached, then went away).
type downSink struct {
	fakeSink
	answered atomic.Bool
}

var errRefused = errors.New("connect: connection refused")

func (d *downSink) Reached() bool { return d.answered.Load() }

func (d *downSink) Start(context.Context, tracker.StartInfo) ([]string, error) {
	return nil, errRefused
}

func (d *downSink) Send(context.Context, []metrics.Sample) (int, error) { return 0, errRefused }

// stopTimed stops and finishes s and returns how long that took.
func stopTimed(s *Session) time.Duration {
	began := time.Now()
	s.Stop(nil)
	s.Finish(tracker.EndInfo{Time: time.Now()})
	return time.Since(began)
}

// A tracker never reached during the job (no answer at all: refused, a
// wrong address) holds the end of the run for unreachedGrace, not the flush
// timeout, whether its run is known or not; it is not asked to record the
// end; the table says it was never reached and how to upload its samples.
func TestUnreachedTrackerEndsQuickly(t *testing.T) {
	norun := &downSink{fakeSink: fakeSink{t: t, name: "norun"}}
	given := &downSink{fakeSink: fakeSink{t: t, name: "given", runID: "r1"}}
	set := settings(t)
	set.FlushTimeout = time.Hour
	st := StartSinksWith(context.Background(), []tracker.Sink{norun, given}, tracker.StartInfo{},
		StartPolicy{Timeout: 100 * time.Millisecond, Background: true}, quiet())
	if len(st.Runs) != 2 || st.Runs[0].Late == nil {
		t.Fatalf("runs %+v: want norun started late and given kept with its run", st.Runs)
	}
	s := Open(Options{Settings: set, Log: quiet(), Collectors: []metrics.Collector{&counter{}}, Started: st})
	s.Run()
	waitfor.Cond(t, deadline, "samples in the spool", func() bool { return s.spool.PendingCount("given", "r1") > 1 })
	ended := make(chan time.Duration, 1)
	go func() { ended <- stopTimed(s) }()
	select {
	case <-ended:
	case <-time.After(deadline):
		t.Fatalf("the end took over %s with trackers never reached, want about %s (the flush timeout is %s)", deadline, unreachedGrace, set.FlushTimeout)
	}
	if given.finished != 0 {
		t.Error("a tracker never reached was asked to record the end")
	}
	r := report(s)
	for _, want := range []string{`norun +never reached, so no run was created; `, `given +never reached; 0 samples sent to run r1; `, `\d+ not sent: upload them with: bridge sync /`} {
		if !regexp.MustCompile(want).MatchString(r) {
			t.Errorf("report:\n%s\nwant %q", r, want)
		}
	}
	if strings.Contains(r, "ok") {
		t.Errorf("report:\n%s\ncalls a tracker that never answered ok", r)
	}
}

// A tracker that answered during the job and then went away keeps the
// whole flush timeout (less the reserve for recording the end), and is
// asked to record the end; one that answered but has no run says so.
func TestReachedTrackerKeepsFlushTimeout(t *testing.T) {
	gone := &downSink{fakeSink: fakeSink{t: t, name: "gone", runID: "r1"}}
	gone.answered.Store(true)
	norun := &downSink{fakeSink: fakeSink{t: t, name: "norun"}}
	norun.answered.Store(true)
	set := settings(t)
	set.FlushTimeout = 4 * time.Second
	st := StartSinksWith(context.Background(), []tracker.Sink{gone, norun}, tracker.StartInfo{},
		StartPolicy{Timeout: 100 * time.Millisecond, Background: true}, quiet())
	s := Open(Options{Settings: set, Log: quiet(), Collectors: []metrics.Collector{&counter{}}, Started: st})
	s.Run()
	waitfor.Cond(t, deadline, "samples in the spool", func() bool { return s.spool.PendingCount("gone", "r1") > 1 })
	drain := set.FlushTimeout - finishReserve(set.FlushTimeout)
	if took := stopTimed(s); took < drain {
		t.Errorf("the end took %s, want the flush timeout's drain (%s) for a tracker that was reached", took, drain)
	}
	if gone.finished != 1 {
		t.Errorf("Finish called %d times on a tracker that was reached, want 1", gone.finished)
	}
	r := report(s)
	for _, want := range []string{`gone +0 samples sent to run r1; bridge was still retrying when it exited; `, `norun +reached, but no run was found or created before bridge exited`} {
		if !regexp.MustCompile(want).MatchString(r) {
			t.Errorf("report:\n%s\nwant %q", r, want)
		}
	}
}

// flakySink's Finish makes one request through tracker.Request, whose
// first fails attempts fail as an outage would (fails < 0: all of them).
type flakySink struct {
	fakeSink
	fails int
	tries atomic.Int64
}

var errUnavailable = errors.New("HTTP status 503")

func (f *flakySink) Finish(ctx context.Context, _ tracker.EndInfo) error {
	err := tracker.Request(ctx, func(context.Context) error {
		if n := f.tries.Add(1); f.fails < 0 || n <= int64(f.fails) {
			return errUnavailable
		}
		return nil
	})
	if err != nil && f.fails < 0 {
		// As MLflow's Finish, which joins the errors of its writes.
		err = errors.Join(err, errors.New("setting tags: HTTP status 503"))
	}
	return err
}

// The end of the job is retried within the flush timeout, and the table
// says what became of it: recorded, or left for `bridge sync` after how
// many tries over how long, with the last error.
func TestEndRowSaysWhatHappened(t *testing.T) {
	once := &flakySink{fakeSink: fakeSink{t: t, name: "once", runID: "r1"}, fails: 1}
	never := &flakySink{fakeSink: fakeSink{t: t, name: "never", runID: "r2"}, fails: -1}
	set := settings(t)
	set.FlushTimeout = 3 * time.Second
	s := open(t, set, []metrics.Collector{&counter{}}, nil, once, never)
	s.Run()
	waitfor.Cond(t, deadline, "samples sent", func() bool { return len(once.received()) > 1 })
	stopTimed(s)
	if once.tries.Load() != 2 || never.tries.Load() < 2 {
		t.Errorf("Finish's request tried %d and %d times, want 2 and more than 1", once.tries.Load(), never.tries.Load())
	}
	r := report(s)
	for _, want := range []string{
		`(?m)^  once end +recorded on the run$`,
		`(?m)^  never end +not recorded \(after \d+ tries over [0-9.]+m?s: HTTP status 503; setting tags: HTTP status 503\); record it later with: bridge sync /`,
	} {
		if !regexp.MustCompile(want).MatchString(r) {
			t.Errorf("report:\n%s\nwant %q", r, want)
		}
	}
	if strings.Contains(r, "records it later") {
		t.Errorf("report:\n%s\nspeaks of a later record", r)
	}
}
