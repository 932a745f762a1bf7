package tracker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
)

// memQueue is an in-memory Queue with the spool's semantics.
type memQueue struct {
	mu      sync.Mutex
	samples []metrics.Sample
	acked   int64
	untrack bool
	tracked []string
}

func (q *memQueue) Pending(_, _ string, max int) []metrics.Sample {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []metrics.Sample
	for _, s := range q.samples {
		if s.Seq > q.acked && len(out) < max {
			out = append(out, s)
		}
	}
	return out
}
func (q *memQueue) Ack(_, _ string, seq int64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if seq > q.acked {
		q.acked = seq
	}
	return nil
}
func (q *memQueue) Untrack(_, _ string) { q.mu.Lock(); q.untrack = true; q.mu.Unlock() }
func (q *memQueue) Track(_, run string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.tracked = append(q.tracked, run)
	return nil
}

// scriptSink answers Send with the errors of its script, then succeeds,
// recording every seq it accepted.
type scriptSink struct {
	mu       sync.Mutex
	script   []error
	partial  int // on the first call, ack only this many and fail
	accepted []int64
	calls    int
	gaps     []time.Time
}

func (s *scriptSink) Name() string { return "script" }
func (s *scriptSink) Run() RunInfo { return RunInfo{ID: "run"} }
func (s *scriptSink) Start(context.Context, StartInfo) ([]string, error) {
	return nil, nil
}
func (s *scriptSink) SetTags(context.Context, map[string]string) error { return nil }
func (s *scriptSink) Finish(context.Context, EndInfo) error            { return nil }
func (s *scriptSink) Send(_ context.Context, b []metrics.Sample) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.gaps = append(s.gaps, time.Now())
	if s.partial > 0 {
		n := s.partial
		s.partial = 0
		for _, x := range b[:n] {
			s.accepted = append(s.accepted, x.Seq)
		}
		return n, errors.New("connection reset")
	}
	if len(s.script) > 0 {
		err := s.script[0]
		s.script = s.script[1:]
		return 0, err
	}
	for _, x := range b {
		s.accepted = append(s.accepted, x.Seq)
	}
	return len(b), nil
}

// stampedQueue is a memQueue that notes when the forwarder first read a
// batch from it: a time before that batch's send started.
type stampedQueue struct {
	*memQueue
	mu    sync.Mutex
	first time.Time
}

func (q *stampedQueue) Pending(sink, run string, max int) []metrics.Sample {
	at := time.Now() // before the read: never after the send it feeds
	out := q.memQueue.Pending(sink, run, max)
	q.mu.Lock()
	if len(out) > 0 && q.first.IsZero() {
		q.first = at
	}
	q.mu.Unlock()
	return out
}

func (q *stampedQueue) firstRead() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.first
}

func queueOf(n int) *memQueue {
	q := &memQueue{acked: -1}
	for i := 0; i < n; i++ {
		q.samples = append(q.samples, metrics.Sample{Seq: int64(i)})
	}
	return q
}

func TestForwarderRetriesInOrderWithoutDuplicates(t *testing.T) {
	q := queueOf(25)
	sink := &scriptSink{script: []error{errors.New("dial tcp: connection refused"), fmt.Errorf("HTTP 503")}, partial: 0}
	f := &Forwarder{Sink: sink, Queue: q, Batch: 10, MinGap: time.Millisecond, MaxGap: 5 * time.Millisecond}
	if !f.Drain(context.Background()) {
		t.Fatal("drain did not finish")
	}
	if len(sink.accepted) != 25 {
		t.Fatalf("accepted %d samples, want 25: %v", len(sink.accepted), sink.accepted)
	}
	for i, s := range sink.accepted {
		if s != int64(i) {
			t.Fatalf("accepted out of order or twice: %v", sink.accepted)
		}
	}
	if _, sent, _ := f.Status(); sent != 25 {
		t.Errorf("sent = %d", sent)
	}
}

func TestForwarderPartialAckResumesAfterAckedPart(t *testing.T) {
	q := queueOf(10)
	sink := &scriptSink{partial: 4}
	f := &Forwarder{Sink: sink, Queue: q, Batch: 10, MinGap: time.Millisecond}
	f.Drain(context.Background())
	want := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	if fmt.Sprint(sink.accepted) != fmt.Sprint(want) {
		t.Fatalf("accepted = %v, want %v", sink.accepted, want)
	}
}

func TestForwarderStopsOnPermanent(t *testing.T) {
	q := queueOf(3)
	sink := &scriptSink{script: []error{Permanent(errors.New("401 UNAUTHENTICATED"))}}
	f := &Forwarder{Sink: sink, Queue: q, MinGap: time.Millisecond}
	if f.Drain(context.Background()) {
		t.Fatal("drain reported success after a permanent error")
	}
	st, _, err := f.Status()
	if st != StateStopped || !errors.Is(err, ErrPermanent) {
		t.Fatalf("state %q err %v", st, err)
	}
	if sink.calls != 1 || !q.untrack {
		t.Errorf("calls = %d (want 1: no retry of a permanent error), untracked = %v", sink.calls, q.untrack)
	}
	if len(q.Pending("", "", 10)) != 3 {
		t.Error("samples must stay pending for bridge sync")
	}
}

func TestForwarderHonoursRetryAfter(t *testing.T) {
	q := queueOf(1)
	sink := &scriptSink{script: []error{&RetryAfterError{After: 300 * time.Millisecond, Err: errors.New("429")}}}
	f := &Forwarder{Sink: sink, Queue: q, MinGap: time.Millisecond, MaxGap: time.Millisecond}
	f.Drain(context.Background())
	if len(sink.gaps) != 2 {
		t.Fatalf("calls = %d", len(sink.gaps))
	}
	// The backoff alone (MaxGap 1ms) would retry at once; only Retry-After
	// explains a gap this long.
	if gap := sink.gaps[1].Sub(sink.gaps[0]); gap < 300*time.Millisecond {
		t.Errorf("retried after %v, before the server's Retry-After of 300ms", gap)
	}
}

func TestForwarderGivesUpWhenContextEnds(t *testing.T) {
	q := queueOf(2)
	errs := make([]error, 1000)
	for i := range errs {
		errs[i] = errors.New("connection refused")
	}
	sink := &scriptSink{script: errs}
	f := &Forwarder{Sink: sink, Queue: q, MinGap: 5 * time.Millisecond, MaxGap: 10 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if f.Drain(ctx) {
		t.Fatal("drain reported success while the tracker was down")
	}
	if st, _, _ := f.Status(); st != StateRetrying {
		t.Errorf("state = %q", st)
	}
	if len(q.Pending("", "", 10)) != 2 {
		t.Error("nothing may be lost")
	}
}

func TestForwarderRecoversSinkPanic(t *testing.T) {
	q := queueOf(1)
	f := &Forwarder{Sink: &panicSink{}, Queue: q, MinGap: time.Millisecond}
	if f.Drain(context.Background()) {
		t.Fatal("a panicking sink cannot have sent")
	}
	if st, _, _ := f.Status(); st != StateStopped {
		t.Errorf("state = %q", st)
	}
}

type panicSink struct{ scriptSink }

func (*panicSink) Send(context.Context, []metrics.Sample) (int, error) { panic("boom") }

// recorder keeps the log records a forwarder writes.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) count(min slog.Level) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.recs {
		if rec.Level >= min {
			n++
		}
	}
	return n
}

// Retry-After: 0, repeated, must not make the forwarder hammer the server:
// the backoff still grows, and the outage is reported once when it starts
// and once when it ends.
func TestForwarderRetryAfterZeroHasFloorAndReportsOnce(t *testing.T) {
	q := queueOf(1)
	errs := make([]error, 6)
	for i := range errs {
		errs[i] = &RetryAfterError{After: 0, Err: errors.New("429")}
	}
	sink := &scriptSink{script: errs}
	rec := &recorder{}
	f := &Forwarder{Sink: sink, Queue: q, MinGap: 20 * time.Millisecond, MaxGap: time.Second, Log: slog.New(rec)}
	if !f.Drain(context.Background()) {
		t.Fatal("drain did not finish")
	}
	if len(sink.gaps) != 7 {
		t.Fatalf("calls = %d, want 7", len(sink.gaps))
	}
	for i := 1; i < len(sink.gaps); i++ {
		if gap := sink.gaps[i].Sub(sink.gaps[i-1]); gap < f.MinGap/2 {
			t.Errorf("retry %d after %v, under the floor MinGap/2 = %v", i, gap, f.MinGap/2)
		}
	}
	if n := rec.count(slog.LevelWarn); n != 1 {
		t.Errorf("%d WARN lines for one outage, want 1", n)
	}
	if n := rec.count(slog.LevelInfo); n != 2 { // the warning and "reachable again"
		t.Errorf("%d INFO-or-above lines, want 2 (start and end of the outage)", n)
	}
}

// startSink fails Start a few times (the tracker is down when the job
// starts), then creates run "late".
type startSink struct {
	scriptSink
	startErrs []error
	run       string
	starts    int
}

func (s *startSink) Run() RunInfo { return RunInfo{ID: s.run} }
func (s *startSink) Start(context.Context, StartInfo) ([]string, error) {
	s.starts++
	if len(s.startErrs) > 0 {
		err := s.startErrs[0]
		s.startErrs = s.startErrs[1:]
		return nil, err
	}
	s.run = "late"
	return []string{"MLFLOW_RUN_ID=late"}, nil
}

func TestForwarderStartsLateThenSendsEverything(t *testing.T) {
	q := queueOf(5)
	sink := &startSink{startErrs: []error{errors.New("connection refused"), errors.New("connection refused")}}
	f := &Forwarder{Sink: sink, Queue: q, MinGap: time.Millisecond, MaxGap: 5 * time.Millisecond, Start: &StartInfo{}}
	if !f.Drain(context.Background()) {
		t.Fatal("drain did not finish")
	}
	if sink.starts != 3 || f.CurrentRun() != "late" {
		t.Errorf("starts = %d, run %q; want 3 and the late run", sink.starts, f.CurrentRun())
	}
	if fmt.Sprint(q.tracked) != "[late]" || q.untrack {
		t.Errorf("tracked %v, untracked %v; want the late run, and no untrack (it is not giving up)", q.tracked, q.untrack)
	}
	if fmt.Sprint(sink.accepted) != "[0 1 2 3 4]" {
		t.Errorf("accepted %v", sink.accepted)
	}
}

func TestForwarderLateStartPermanentStops(t *testing.T) {
	q := queueOf(2)
	sink := &startSink{startErrs: []error{Permanent(errors.New("run id holds a NUL byte"))}}
	f := &Forwarder{Sink: sink, Queue: q, MinGap: time.Millisecond, Start: &StartInfo{}}
	if f.Drain(context.Background()) {
		t.Fatal("drain reported success without a run")
	}
	if st, _, _ := f.Status(); st != StateStopped || sink.starts != 1 || len(sink.accepted) != 0 || !q.untrack {
		t.Errorf("state %q, starts %d, accepted %v, untracked %v", st, sink.starts, sink.accepted, q.untrack)
	}
}

// Finish during a long backoff makes one try at once: the end of the job
// must not wait out a backoff longer than the flush timeout.
func TestForwarderFinishCutsBackoffOnce(t *testing.T) {
	q := queueOf(2)
	sink := &scriptSink{script: []error{errors.New("connection refused")}}
	f := &Forwarder{Sink: sink, Queue: q, MinGap: time.Hour, MaxGap: time.Hour}
	if ok := drainFinishedAfterFirstCall(t, f, sink); !ok || len(sink.accepted) != 2 {
		t.Errorf("drain = %v, accepted %v", ok, sink.accepted)
	}
}

// drainFinishedAfterFirstCall drains f, calls Finish once the sink has had
// its first call, and returns Drain's answer; the test fails when Drain
// has not returned 30 s later (an hour-long backoff not cut).
func drainFinishedAfterFirstCall(t *testing.T, f *Forwarder, sink *scriptSink) bool {
	t.Helper()
	done := make(chan bool, 1)
	go func() { done <- f.Drain(context.Background()) }()
	waitfor.Cond(t, 30*time.Second, "the sink's first call", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return sink.calls > 0
	})
	f.Finish()
	select {
	case ok := <-done:
		return ok
	case <-time.After(30 * time.Second):
		t.Fatal("Finish did not cut the hour-long backoff")
		return false
	}
}

// fakeClock is the forwarder's clock for the pace tests: real time, moved
// on as long as the sink says a Send takes, so that a Send "takes" that
// long and the waits the forwarder measures on the same clock follow.
type fakeClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return time.Now().Add(c.off) }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// slowSink is a scriptSink whose every Send takes `took` on the clock; it
// records each call's batch size, its real start and end.
type slowSink struct {
	scriptSink
	clock   *fakeClock
	took    time.Duration
	during  func(call int) // runs inside Send, before it answers
	sizes   []int
	starts  []time.Time
	ends    []time.Time
	sendsMu sync.Mutex
}

func (s *slowSink) Send(ctx context.Context, b []metrics.Sample) (int, error) {
	s.sendsMu.Lock()
	call := len(s.starts)
	s.starts = append(s.starts, time.Now())
	s.sizes = append(s.sizes, len(b))
	s.sendsMu.Unlock()
	if s.during != nil {
		s.during(call)
	}
	s.clock.add(s.took)
	n, err := s.scriptSink.Send(ctx, b)
	s.sendsMu.Lock()
	s.ends = append(s.ends, time.Now())
	s.sendsMu.Unlock()
	return n, err
}

func (s *slowSink) snapshot() (sizes []int, starts, ends []time.Time) {
	s.sendsMu.Lock()
	defer s.sendsMu.Unlock()
	return append([]int(nil), s.sizes...), append([]time.Time(nil), s.starts...), append([]time.Time(nil), s.ends...)
}

func (q *memQueue) add(seqs ...int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, s := range seqs {
		q.samples = append(q.samples, metrics.Sample{Seq: s})
	}
}

// runForwarder runs f until the test ends; the channel closes when Run
// returns.
func runForwarder(t *testing.T, f *Forwarder) (wake chan struct{}, done chan struct{}) {
	t.Helper()
	wake = make(chan struct{}, 1)
	f.Wake = wake
	done = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { defer close(done); f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return wake, done
}

func waitCalls(t *testing.T, s *slowSink, n int) {
	t.Helper()
	waitfor.Cond(t, 30*time.Second, fmt.Sprintf("%d answered sends", n), func() bool {
		_, _, ends := s.snapshot()
		return len(ends) >= n
	})
}

// After an answer that took 300 ms, the next request waits 300 ms.
func TestForwarderPacesAfterSlowAnswer(t *testing.T) {
	q := queueOf(1)
	sink := &slowSink{clock: &fakeClock{}, took: 300 * time.Millisecond}
	sink.during = func(call int) {
		if call == 0 {
			q.add(1, 2)
		}
	}
	f := &Forwarder{Sink: sink, Queue: q, MinGap: time.Millisecond, SlowAnswer: 100 * time.Millisecond, now: sink.clock.now}
	runForwarder(t, f)
	waitCalls(t, sink, 2)
	sizes, starts, ends := sink.snapshot()
	if gap := starts[1].Sub(ends[0]); gap < 300*time.Millisecond {
		t.Errorf("second request %v after a 300 ms answer, want a pace of at least 300 ms", gap)
	}
	if sizes[1] != 2 {
		t.Errorf("second request held %d samples, want 2", sizes[1])
	}
}

// A long pace gathers what arrives into one request, and Finish ends it at
// once: the job's end never waits out a pace.
func TestForwarderPaceGathersAndFinishEndsIt(t *testing.T) {
	q := queueOf(1)
	sink := &slowSink{clock: &fakeClock{}, took: time.Hour}
	sink.during = func(call int) {
		if call == 0 {
			q.add(1, 2)
		}
	}
	f := &Forwarder{Sink: sink, Queue: q, MinGap: time.Millisecond, MaxGap: time.Hour, now: sink.clock.now}
	checkFinishEndsWait(t, f, q, sink, 3, "pace")
}

// checkFinishEndsWait runs f, whose first request is due at once and whose
// next one an hour later (its what), adds samples from..9 after the first
// and checks that Finish sends them at once, in one request.
func checkFinishEndsWait(t *testing.T, f *Forwarder, q *memQueue, sink *slowSink, from int64, what string) {
	t.Helper()
	wake, done := runForwarder(t, f)
	waitCalls(t, sink, 1)
	for seq := from; seq < 10; seq++ {
		q.add(seq)
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	f.Finish()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("Finish did not end the hour-long %s", what)
	}
	if sizes, _, _ := sink.snapshot(); fmt.Sprint(sizes) != "[1 9]" {
		t.Errorf("batches %v, want [1 9]: what arrived during the %s goes in one request", sizes, what)
	}
	if got := len(q.Pending("", "", 100)); got != 0 {
		t.Errorf("%d samples left unsent", got)
	}
}

// The next send starts Gather after the last one started at the earliest.
//
// Gather counts from when the forwarder started the first send, a moment
// the sink cannot see: its own stamp comes later, by as long as the
// goroutine waits for a CPU, and measuring from it would fail a correct
// forwarder under load. The read of the first batch comes before that
// moment, so the gap from it is at least Gather whenever the forwarder
// keeps Gather, and still far below it when Gather is ignored.
func TestForwarderGathers(t *testing.T) {
	q := &stampedQueue{memQueue: queueOf(1)}
	sink := &slowSink{clock: &fakeClock{}}
	sink.during = func(call int) {
		if call == 0 {
			q.add(1, 2, 3)
		}
	}
	f := &Forwarder{Sink: sink, Queue: q, MinGap: time.Millisecond, Gather: 300 * time.Millisecond, now: sink.clock.now}
	runForwarder(t, f)
	waitCalls(t, sink, 2)
	sizes, starts, _ := sink.snapshot()
	if gap := starts[1].Sub(q.firstRead()); gap < 300*time.Millisecond {
		t.Errorf("second request %v after the first, want at least Gather (300 ms)", gap)
	}
	if sizes[1] != 3 {
		t.Errorf("second request held %d samples, want 3", sizes[1])
	}
}

// Finish ends the gathering at once: what was taken goes in one request.
func TestForwarderFinishEndsGather(t *testing.T) {
	q := queueOf(1)
	sink := &slowSink{clock: &fakeClock{}}
	f := &Forwarder{Sink: sink, Queue: q, MinGap: time.Millisecond, Gather: time.Hour, now: sink.clock.now}
	checkFinishEndsWait(t, f, q, sink, 1, "gathering")
}

// A full batch (an outage's backlog) is sent on at once, whatever Gather.
func TestForwarderGatherLetsBacklogGo(t *testing.T) {
	q := queueOf(5)
	sink := &slowSink{clock: &fakeClock{}}
	f := &Forwarder{Sink: sink, Queue: q, Batch: 2, MinGap: time.Millisecond, Gather: time.Hour, now: sink.clock.now}
	runForwarder(t, f)
	waitCalls(t, sink, 3)
	if sizes, _, _ := sink.snapshot(); fmt.Sprint(sizes) != "[2 2 1]" {
		t.Errorf("batches %v, want [2 2 1]", sizes)
	}
}

// Answers faster than SlowAnswer add no wait (here 30 min against 1 h).
func TestForwarderFastAnswersNotPaced(t *testing.T) {
	q := queueOf(1)
	sink := &slowSink{clock: &fakeClock{}, took: 30 * time.Minute}
	sink.during = func(call int) {
		if call == 0 {
			q.add(1)
		}
	}
	f := &Forwarder{Sink: sink, Queue: q, MinGap: time.Millisecond, MaxGap: time.Hour, SlowAnswer: time.Hour, now: sink.clock.now}
	runForwarder(t, f)
	waitCalls(t, sink, 2)
}

// A failure that took long (a server's pool timeout) holds the retry at
// least as long, whatever the backoff says.
func TestForwarderSlowFailurePacesRetry(t *testing.T) {
	q := queueOf(1)
	sink := &slowSink{clock: &fakeClock{}, took: 300 * time.Millisecond}
	sink.script = []error{errors.New("HTTP 400: QueuePool limit reached")}
	// The backoff alone (MinGap 1ms, first failure) would retry at once.
	f := &Forwarder{Sink: sink, Queue: q, MinGap: time.Millisecond, MaxGap: time.Hour, SlowAnswer: 100 * time.Millisecond, now: sink.clock.now}
	runForwarder(t, f)
	waitCalls(t, sink, 2)
	_, starts, ends := sink.snapshot()
	if gap := starts[1].Sub(ends[0]); gap < 300*time.Millisecond {
		t.Errorf("retried %v after a failure that took 300 ms", gap)
	}
}

// Drain (bridge sync, the final flush) sends without pacing.
func TestForwarderDrainNotPaced(t *testing.T) {
	q := queueOf(3)
	sink := &slowSink{clock: &fakeClock{}, took: time.Hour}
	f := &Forwarder{Sink: sink, Queue: q, Batch: 1, MinGap: time.Millisecond, MaxGap: time.Hour, now: sink.clock.now}
	done := make(chan bool, 1)
	go func() { done <- f.Drain(context.Background()) }()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("drain did not send everything")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("drain waited out a pace")
	}
	if sizes, _, _ := sink.snapshot(); len(sizes) != 3 {
		t.Errorf("sends %v", sizes)
	}
}

// Waiting for the run (ErrNotReady) is not an outage: a failure after it
// backs off from the start. Carried over, five waits would make the first
// backoff 0.5 s + up to 32 s instead of up to 1.5 s; twenty tries make a
// pass by chance impossible in practice ((1/32)^20).
func TestForwarderWaitingForRunDoesNotLengthenBackoff(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for range 20 {
		f := &Forwarder{Sink: &scriptSink{}, Queue: queueOf(1), MinGap: time.Second, MaxGap: time.Hour}
		f.defaults()
		for range 5 {
			if wait, _, stop := f.failed(fmt.Errorf("run r1: %w", ErrNotReady), log); stop || wait != 2*time.Second {
				t.Fatalf("waiting for the run: wait %v, stop %v", wait, stop)
			}
		}
		if wait, _, _ := f.failed(errors.New("HTTP 503"), log); wait > 1500*time.Millisecond {
			t.Fatalf("first backoff after waiting for the run: %v, want at most 1.5s (the waits counted as failures)", wait)
		}
	}
}

// Finish during a backoff longer than the server's Retry-After makes one try
// as soon as the server allows, not before and not after the backoff.
func TestForwarderFinishCutsBackoffToRetryAfter(t *testing.T) {
	q := queueOf(2)
	sink := &scriptSink{script: []error{&RetryAfterError{After: 300 * time.Millisecond, Err: errors.New("429")}}}
	f := &Forwarder{Sink: sink, Queue: q, MinGap: time.Hour, MaxGap: time.Hour}
	if ok := drainFinishedAfterFirstCall(t, f, sink); !ok || len(sink.accepted) != 2 {
		t.Fatalf("drain = %v, accepted %v", ok, sink.accepted)
	}
	if gap := sink.gaps[1].Sub(sink.gaps[0]); gap < 300*time.Millisecond {
		t.Errorf("retried %v after a 429 with Retry-After 300ms", gap)
	}
}

// endedSink reports its run ended by its owner from its first Send on,
// acknowledging every sample passed (as the MLflow sink does).
type endedSink struct{ scriptSink }

func (s *endedSink) Send(_ context.Context, b []metrics.Sample) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return len(b), fmt.Errorf("%w: run closed by its owner", ErrRunEnded)
}

// A run ended by its owner is no failure: what Send acknowledged is
// acknowledged (nothing stays pending), OnRunEnded is called once, the
// state says so, and nothing is retried.
func TestForwarderRunEnded(t *testing.T) {
	q := queueOf(5)
	sink := &endedSink{}
	calls := 0
	f := &Forwarder{Sink: sink, Queue: q, Batch: 2, MinGap: time.Hour, OnRunEnded: func() { calls++ }}
	if !f.Drain(context.Background()) {
		t.Fatal("drain did not finish")
	}
	if calls != 1 {
		t.Errorf("OnRunEnded called %d times, want once", calls)
	}
	if n := len(q.Pending("", "", 10)); n != 0 || sink.calls != 3 || q.untrack {
		t.Errorf("pending %d, Send calls %d (want 3 batches), untracked %v: every sample acknowledged, no retry", n, sink.calls, q.untrack)
	}
	if st, _, err := f.Status(); st != StateRunEnded || !errors.Is(err, ErrRunEnded) {
		t.Errorf("state %q err %v", st, err)
	}
}
