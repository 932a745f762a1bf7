package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/waitfor"
)

type fixed struct {
	name string
	pts  []Point
	err  error
}

func (f fixed) Name() string { return f.name }
func (f fixed) Collect(_ context.Context, b *Batch) error {
	b.Points = append(b.Points, f.pts...)
	return f.err
}

// hung blocks until release is closed, counting concurrent calls.
type hung struct {
	release chan struct{}
	calls   atomic.Int32
	active  atomic.Int32
	maxAct  atomic.Int32
}

func (h *hung) Name() string { return "hung" }
func (h *hung) Collect(_ context.Context, b *Batch) error {
	h.calls.Add(1)
	n := h.active.Add(1)
	if n > h.maxAct.Load() {
		h.maxAct.Store(n)
	}
	<-h.release // ignores ctx on purpose, as a stuck syscall would
	h.active.Add(-1)
	b.Points = append(b.Points, pt("late", 0))
	return nil
}

type panicky struct{}

func (panicky) Name() string                          { return "panicky" }
func (panicky) Collect(context.Context, *Batch) error { panic("boom") }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func names(s Sample) []string {
	var out []string
	for _, p := range s.Points {
		out = append(out, p.Name())
	}
	return out
}

func TestSamplerMergesSortsAndNumbers(t *testing.T) {
	s := NewSampler([]Collector{
		fixed{name: "b", pts: []Point{pt("node_b", 0), pt("container_a", 0)}},
		fixed{name: "a", pts: []Point{pt("gpu_0_x", 0)}, err: errors.New("partly failed")},
	}, time.Second, quiet())
	defer s.Close()
	s.SetNextSeq(7)
	first := s.Sample(context.Background())
	second := s.Sample(context.Background())
	if first.Seq != 7 || second.Seq != 8 {
		t.Fatalf("seqs %d, %d, want 7, 8", first.Seq, second.Seq)
	}
	got := names(first)
	want := []string{"container_a", "gpu_0_x", "node_b"}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("points %v, want %v (a collector's error keeps its points)", got, want)
	}
}

// One value per name: the earlier collector's, whichever answers first.
func TestSamplerKeepsFirstCollectorsValue(t *testing.T) {
	slow := &gated{release: make(chan struct{}), pts: []Point{pt("gpu_0_utilization_percentage", 1)}}
	s := NewSampler([]Collector{
		slow,
		&signaller{fixed: fixed{name: "scrape", pts: []Point{pt("gpu_0_utilization_percentage", 2), pt("gpu_0_prof_x_ratio", 0.5)}}, then: slow.release},
	}, time.Minute, quiet())
	defer s.Close()
	smp := s.Sample(context.Background())
	if len(smp.Points) != 2 {
		t.Fatalf("points %+v, want one per name", smp.Points)
	}
	if v, _ := smp.Value("gpu_0_utilization_percentage"); v != 1 {
		t.Errorf("gpu_0_utilization_percentage = %v, want the first collector's 1 (it answered last)", v)
	}
}

// gated answers once release is closed.
type gated struct {
	release chan struct{}
	pts     []Point
}

func (g *gated) Name() string { return "gated" }
func (g *gated) Collect(_ context.Context, b *Batch) error {
	<-g.release
	b.Points = append(b.Points, g.pts...)
	return nil
}

// signaller answers, then lets the gated collector answer after it.
type signaller struct {
	fixed
	then chan struct{}
}

func (s *signaller) Collect(ctx context.Context, b *Batch) error {
	defer close(s.then)
	return s.fixed.Collect(ctx, b)
}

// A hung collector costs one timeout, is skipped while its call is stuck
// (never called twice at once) and contributes again once it returns.
func TestSamplerSurvivesHungCollector(t *testing.T) {
	t.Parallel()
	h := &hung{release: make(chan struct{})}
	s := NewSampler([]Collector{h, fixed{name: "ok", pts: []Point{pt("node_x", 0)}}}, answerTimeout, quiet())
	defer s.Close()
	for i := 0; i < 3; i++ {
		smp := s.Sample(context.Background())
		if got := names(smp); len(got) != 1 || got[0] != "node_x" {
			t.Fatalf("sample %d: points %v, want only node_x", i, got)
		}
	}
	if c := h.calls.Load(); c != 1 {
		t.Fatalf("hung collector called %d times while stuck, want 1", c)
	}
	close(h.release)
	deadline := time.Now().Add(5 * time.Second)
	for h.active.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	// The busy flag clears after the call returns; give the goroutine a beat.
	var got []string
	for time.Now().Before(deadline) {
		got = names(s.Sample(context.Background()))
		if len(got) == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(got) != 2 {
		t.Fatalf("after release: points %v, want late and node_x", got)
	}
	if h.maxAct.Load() != 1 {
		t.Errorf("collector ran %d calls at once", h.maxAct.Load())
	}
}

func TestSamplerRecoversPanics(t *testing.T) {
	s := NewSampler([]Collector{panicky{}, fixed{name: "ok", pts: []Point{pt("node_x", 0)}}}, time.Second, quiet())
	defer s.Close()
	if got := names(s.Sample(context.Background())); len(got) != 1 || got[0] != "node_x" {
		t.Fatalf("points %v, want node_x only", got)
	}
	// And again: a panic is not sticky.
	if got := names(s.Sample(context.Background())); len(got) != 1 {
		t.Fatalf("second sample: %v", got)
	}
}

// A collector that has answered is free for the very next Sample: it used to
// be marked idle only after its result was sent, so a Sample started at once
// could skip it as still busy.
func TestSamplerBackToBackSamplesAreWhole(t *testing.T) {
	s := NewSampler([]Collector{
		fixed{name: "a", pts: []Point{pt("a", 0)}},
		fixed{name: "b", pts: []Point{pt("b", 0)}},
	}, 5*time.Second, quiet())
	defer s.Close()
	for i := range 500 {
		if got := names(s.Sample(context.Background())); len(got) != 2 {
			t.Fatalf("sample %d has %v, want both collectors' points", i, got)
		}
	}
}

// answerTimeout is the sampler's timeout in tests where a collector that does
// answer must be in the sample: long enough for a loaded machine (only the
// hung collector's first call waits it out).
const answerTimeout = 5 * time.Second

// Workers live from the first Sample to Close: one goroutine per collector
// however many samples are taken, a hung call holds only its own worker, and
// Close ends them all (the hung one once its call returns).
func TestSamplerWorkersEndOnClose(t *testing.T) {
	base := runtime.NumGoroutine()
	h := &hung{release: make(chan struct{})}
	cs := []Collector{h, fixed{name: "a", pts: []Point{pt("a", 0)}}, fixed{name: "b", pts: []Point{pt("b", 0)}}}
	s := NewSampler(cs, answerTimeout, quiet())
	if n := runtime.NumGoroutine(); n > base {
		t.Errorf("%d goroutines after NewSampler, want at most %d (workers start with the first Sample)", n, base)
	}
	for i := range 20 {
		if got := names(s.Sample(context.Background())); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("sample %d: %v, want a and b", i, got)
		}
	}
	// Polled: the first sample's timeout fires its context's cancel in a
	// goroutine of the timer's own, which may not have ended yet; a
	// goroutine leaked per sample never ends.
	waitfor.Cond(t, 10*time.Second, "at most one worker a collector after 20 samples with a hung collector",
		func() bool { return runtime.NumGoroutine() <= base+len(cs) })
	s.Close()
	s.Close() // idempotent
	if smp := s.Sample(context.Background()); len(smp.Points) != 0 {
		t.Errorf("sample after Close has %v, want none", names(smp))
	}
	waitfor.Cond(t, 10*time.Second, "idle workers to exit after Close", func() bool { return runtime.NumGoroutine() <= base+1 })
	close(h.release)
	waitfor.Cond(t, 10*time.Second, "the hung worker to exit once its call returned", func() bool { return runtime.NumGoroutine() <= base })
}

// A Sampler that never sampled has no workers to end.
func TestSamplerCloseWithoutSample(t *testing.T) {
	base := runtime.NumGoroutine()
	NewSampler([]Collector{fixed{name: "a"}}, time.Second, quiet()).Close()
	if n := runtime.NumGoroutine(); n > base {
		t.Errorf("%d goroutines, want %d", n, base)
	}
}

// slowOnce blocks its first call until release is closed, answering "first";
// later calls answer "second" at once.
type slowOnce struct {
	release chan struct{}
	calls   atomic.Int32
	done    atomic.Int32 // calls that returned
}

func (o *slowOnce) Name() string { return "slowOnce" }
func (o *slowOnce) Collect(_ context.Context, b *Batch) error {
	defer o.done.Add(1)
	if o.calls.Add(1) == 1 {
		<-o.release
		b.Points = append(b.Points, pt("first", 0))
		return nil
	}
	b.Points = append(b.Points, pt("second", 0))
	return nil
}

// An answer that comes after its sample's timeout belongs to no sample: the
// next sample calls the collector again and carries only the fresh answer.
func TestSamplerDropsLateAnswer(t *testing.T) {
	t.Parallel()
	o := &slowOnce{release: make(chan struct{})}
	s := NewSampler([]Collector{o}, answerTimeout, quiet())
	defer s.Close()
	if got := names(s.Sample(context.Background())); len(got) != 0 {
		t.Fatalf("first sample: %v, want nothing (timed out)", got)
	}
	close(o.release)
	waitfor.Cond(t, 10*time.Second, "the late call to return", func() bool { return o.done.Load() == 1 })
	if got := names(s.Sample(context.Background())); !slices.Equal(got, []string{"second"}) {
		t.Fatalf("second sample: %v, want [second] (the late first answer dropped)", got)
	}
}

// releaser frees a hung collector during a later sample and waits until its
// call has returned, so the late answer arrives while that sample waits.
type releaser struct {
	h    *hung
	once atomic.Bool
}

func (r *releaser) Name() string { return "releaser" }
func (r *releaser) Collect(_ context.Context, b *Batch) error {
	if r.h.calls.Load() == 1 && r.once.CompareAndSwap(false, true) {
		close(r.h.release)
		for r.h.active.Load() != 0 {
			runtime.Gosched()
		}
	}
	b.Points = append(b.Points, pt("r", 0))
	return nil
}

// A collector skipped as busy whose late answer comes in during a later
// sample does not put that answer in it, and is called again by the next.
func TestSamplerLateAnswerDuringLaterSample(t *testing.T) {
	t.Parallel()
	h := &hung{release: make(chan struct{})}
	r := &releaser{h: h}
	s := NewSampler([]Collector{h, r}, answerTimeout, quiet())
	defer s.Close()
	// Sample 0: h hangs and the sample times out on it; r is disarmed.
	r.once.Store(true)
	if got := names(s.Sample(context.Background())); !slices.Equal(got, []string{"r"}) {
		t.Fatalf("sample 0: %v, want [r]", got)
	}
	r.once.Store(false) // sample 1: h is still busy; r releases it
	if got := names(s.Sample(context.Background())); !slices.Equal(got, []string{"r"}) {
		t.Fatalf("sample 1: %v, want [r] (h was skipped as busy; its late answer is not this sample's)", got)
	}
	waitfor.Cond(t, 10*time.Second, "h's call to return", func() bool { return h.active.Load() == 0 })
	var got []string
	waitfor.Cond(t, 10*time.Second, "h to answer again", func() bool {
		got = names(s.Sample(context.Background()))
		return len(got) == 2
	})
	if !slices.Equal(got, []string{"late", "r"}) || h.calls.Load() != 2 {
		t.Fatalf("points %v after %d calls, want [late r] from a second call", got, h.calls.Load())
	}
}

// ctxWatcher waits for its context to end and records how it ended; done
// is closed after that (the synchronisation point for its fields). It
// answers no points: its answer may come in just as the timeout does, and
// either may win the sample's wait.
type ctxWatcher struct {
	started  chan struct{}
	done     chan struct{}
	deadline bool
	err      error
}

func newCtxWatcher() *ctxWatcher {
	return &ctxWatcher{started: make(chan struct{}), done: make(chan struct{})}
}

func (w *ctxWatcher) Name() string { return "ctxWatcher" }
func (w *ctxWatcher) Collect(ctx context.Context, _ *Batch) error {
	_, w.deadline = ctx.Deadline()
	close(w.started) // called once per test
	<-ctx.Done()
	w.err = ctx.Err()
	close(w.done)
	return w.err
}

// wait returns once Collect has returned, failing the test after 10 s.
func (w *ctxWatcher) wait(t *testing.T) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the collector's context did not end within 10 s")
	}
}

// A collector's context carries the deadline and ends at the timeout, or
// earlier when the caller's context ends.
func TestSamplerContextEnds(t *testing.T) {
	w := newCtxWatcher()
	s := NewSampler([]Collector{w}, 20*time.Millisecond, quiet())
	defer s.Close()
	s.Sample(context.Background()) // returns at the timeout (or with the answer it ended)
	w.wait(t)
	if !errors.Is(w.err, context.DeadlineExceeded) || !w.deadline {
		t.Errorf("after the timeout: ctx.Err() = %v (want DeadlineExceeded), deadline set %v", w.err, w.deadline)
	}

	w = newCtxWatcher()
	s = NewSampler([]Collector{w}, time.Hour, quiet())
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-w.started
		cancel()
	}()
	s.Sample(ctx) // an hour's timeout: only the cancel ends it
	w.wait(t)
	if !errors.Is(w.err, context.Canceled) {
		t.Errorf("after the caller's cancel: ctx.Err() = %v, want Canceled", w.err)
	}
}

// A sample without points has nil Points (JSON null), as before.
func TestSamplerEmptySampleIsNil(t *testing.T) {
	s := NewSampler([]Collector{fixed{name: "none"}}, time.Second, quiet())
	defer s.Close()
	if smp := s.Sample(context.Background()); smp.Points != nil {
		t.Errorf("Points = %#v, want nil", smp.Points)
	}
}

// Each collector's last run is recorded as node_exporter reports its
// collectors: duration and success, and the last error (its first line:
// a panic's stack stays in the log); Health may be read while sampling.
func TestSamplerHealth(t *testing.T) {
	t.Parallel()
	h := &hung{release: make(chan struct{})}
	defer close(h.release)
	s := NewSampler([]Collector{
		fixed{name: "ok", pts: []Point{pt("a", 1)}},
		fixed{name: "failing", err: errors.New("reading /x: disk on fire\nand a second line")},
		panicky{},
		h,
	}, answerTimeout, quiet())
	defer s.Close()
	stop := make(chan struct{})
	read := make(chan struct{})
	go func() { // a /metrics scrape beside sampling
		defer close(read)
		for {
			select {
			case <-stop:
				return
			default:
				s.Health()
			}
		}
	}()
	s.Sample(context.Background()) // h times out
	s.Sample(context.Background()) // h is still busy
	close(stop)
	<-read

	byName := map[string]Health{}
	for _, hl := range s.Health() {
		byName[hl.Collector] = hl
	}
	if ok := byName["ok"]; !ok.OK || ok.Runs != 2 || ok.Failures != 0 || ok.Duration <= 0 || ok.LastError != "" {
		t.Errorf("ok: %+v", ok)
	}
	if f := byName["failing"]; f.OK || f.Runs != 2 || f.Failures != 2 || f.LastError != "reading /x: disk on fire" {
		t.Errorf("failing: %+v", f)
	}
	if p := byName["panicky"]; p.OK || p.Failures != 2 || p.LastError != "collector panicky panicked: boom" {
		t.Errorf("panicky: %+v", p)
	}
	if hh := byName["hung"]; hh.OK || hh.Runs != 2 || hh.Failures != 2 || hh.LastError != errBusy.Error() || hh.Duration < answerTimeout {
		t.Errorf("hung: %+v, want two failed runs, the last skipped while the first still ran (over %s)", hh, answerTimeout)
	}
}

// A collector that does not answer within the timeout is a failed run of
// that long.
func TestSamplerHealthTimeout(t *testing.T) {
	t.Parallel()
	h := &hung{release: make(chan struct{})}
	defer close(h.release)
	s := NewSampler([]Collector{h}, 20*time.Millisecond, quiet())
	defer s.Close()
	s.Sample(context.Background())
	hl := s.Health()[0]
	if hl.OK || hl.Runs != 1 || hl.Failures != 1 || !strings.Contains(hl.LastError, "no answer within the collect timeout, 20ms") || hl.Duration < 20*time.Millisecond {
		t.Errorf("health %+v", hl)
	}
}

// marker records the sample mark of each Collect's ctx.
type marker struct {
	name  string
	mu    sync.Mutex
	marks []uint64
}

func (m *marker) Name() string { return m.name }

func (m *marker) Collect(ctx context.Context, _ *Batch) error {
	mark, ok := SampleMark(ctx)
	if !ok {
		return errors.New("no sample mark in ctx")
	}
	m.mu.Lock()
	m.marks = append(m.marks, mark)
	m.mu.Unlock()
	return nil
}

// Every collector's call in one sample has the same mark, and the next
// sample (of this Sampler or another) another: what lets collectors share
// one reading a sample (the process tree).
func TestSampleMark(t *testing.T) {
	a, b := &marker{name: "a"}, &marker{name: "b"}
	s := NewSampler([]Collector{a, b}, time.Minute, nil)
	defer s.Close()
	c := &marker{name: "c"}
	other := NewSampler([]Collector{c}, time.Minute, nil)
	defer other.Close()
	for range 3 {
		s.Sample(context.Background())
		other.Sample(context.Background())
	}
	seen := map[uint64]bool{}
	for i := range 3 {
		if a.marks[i] != b.marks[i] {
			t.Errorf("sample %d: marks %d and %d, want one for both collectors", i, a.marks[i], b.marks[i])
		}
		if seen[a.marks[i]] {
			t.Errorf("sample %d: mark %d seen in an earlier sample", i, a.marks[i])
		}
		seen[a.marks[i]] = true
	}
	for i, m := range c.marks {
		if seen[m] {
			t.Errorf("another Sampler's sample %d has mark %d, one of the first's", i, m)
		}
	}
	for _, h := range s.Health() {
		if !h.OK {
			t.Errorf("%s: %s", h.Collector, h.LastError)
		}
	}
	if _, ok := SampleMark(context.Background()); ok {
		t.Error("a mark in a ctx no Sampler handed out")
	}
}

// pt is a point of a series without a unit (any finite value is in range).
func pt(name string, v float64) Point { return At(&Desc{Name: name}, v) }
