package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

// stuckSink ignores its contexts: Start never returns (until release), and
// Finish blocks until its ctx is done.
type stuckSink struct {
	fakeSink
	release chan struct{}
	started chan struct{} // closed when Start was entered
}

func (s *stuckSink) Start(context.Context, tracker.StartInfo) ([]string, error) {
	close(s.started)
	<-s.release
	return nil, nil
}

// A sink whose Start ignores its context does not hold StartSinks past the
// deadline; the others are started and kept.
func TestStartSinksBoundedByDeadline(t *testing.T) {
	stuck := &stuckSink{fakeSink: fakeSink{t: t, name: "stuck", runID: "s"}, release: make(chan struct{}), started: make(chan struct{})}
	defer close(stuck.release)
	good := &fakeSink{t: t, name: "good", runID: "g"}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan Started, 1)
	go func() { done <- StartSinks(ctx, []tracker.Sink{stuck, good}, tracker.StartInfo{}, quiet()) }()
	var st Started
	select {
	case st = <-done:
	case <-time.After(deadline):
		t.Fatal("StartSinks waited on a sink that ignores its context")
	}
	if len(st.Runs) != 1 || st.Runs[0].Sink.Name() != "good" {
		t.Errorf("runs = %+v, want only the good sink", st.Runs)
	}
	if len(st.Failed) != 1 || !strings.Contains(st.Failed[0].Value, "--start-timeout") {
		t.Errorf("failed = %+v, want the stuck sink, naming --start-timeout", st.Failed)
	}
}

// hangFinish blocks in Finish until its ctx is done.
type hangFinish struct{ fakeSink }

func (h *hangFinish) Finish(ctx context.Context, _ tracker.EndInfo) error {
	<-ctx.Done()
	return ctx.Err()
}

// Stop and Finish together end by EndBy's deadline even when the sink
// never takes a sample nor answers Finish.
func TestEndByBoundsStopAndFinish(t *testing.T) {
	sink := &hangFinish{fakeSink{t: t, name: "hung", runID: "r", hang: true}}
	set := settings(t)
	set.FlushTimeout = time.Hour // EndBy, not this, is the bound
	s := open(t, set, []metrics.Collector{&counter{}}, nil, sink)
	s.Run()
	waitFor(t, "a sample", func() bool { return s.spool.NextSeq() > 0 })
	end := time.Now().Add(500 * time.Millisecond)
	s.EndBy(end)
	finished := make(chan struct{})
	go func() {
		s.Stop(nil)
		s.Finish(tracker.EndInfo{Time: time.Now()})
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(deadline):
		t.Fatal("Stop and Finish outlived EndBy's deadline by far")
	}
}

// Closing Stop's abort channel also cuts Finish short.
func TestAbortCutsFinish(t *testing.T) {
	sink := &hangFinish{fakeSink{t: t, name: "hung", runID: "r"}}
	set := settings(t)
	set.FlushTimeout = time.Hour
	s := open(t, set, []metrics.Collector{&counter{}}, nil, sink)
	s.Run()
	abort := make(chan struct{})
	s.Stop(abort) // the sink takes every sample: Stop returns
	close(abort)
	finished := make(chan struct{})
	go func() {
		s.Finish(tracker.EndInfo{Time: time.Now()})
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(deadline):
		t.Fatal("Finish ignored the abort")
	}
}
