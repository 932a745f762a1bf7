package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/tracker"
)

// The tests drive a real spool in a temporary directory and fake collectors
// and sinks. None asserts where samples fall in time: they poll for what
// must happen, under a generous deadline.

const deadline = 10 * time.Second

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// counter is a collector whose only point counts its calls.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) Name() string { return "counter" }

// testCalls is the counter's one series.
var testCalls = &metrics.Desc{Name: "test_calls_count", Unit: metrics.UnitCount, Scope: metrics.ScopeNode, Help: "Calls of the test collector."}

func (c *counter) Collect(_ context.Context, b *metrics.Batch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	b.Add(testCalls, float64(c.n), "test")
	return nil
}

func (c *counter) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// fakeSink records what it is sent and checks the Sink contract: no Send
// after Finish, Finish once.
type fakeSink struct {
	t        *testing.T
	name     string
	startErr error
	runID    string
	hang     bool // Send blocks until its ctx is done

	mu       sync.Mutex
	seqs     []int64
	finished int
}

func (f *fakeSink) Name() string         { return f.name }
func (f *fakeSink) Run() tracker.RunInfo { return tracker.RunInfo{ID: f.runID} }

func (f *fakeSink) Start(context.Context, tracker.StartInfo) ([]string, error) {
	return []string{"FAKE_RUN=" + f.runID}, f.startErr
}

func (f *fakeSink) Send(ctx context.Context, smp []metrics.Sample) (int, error) {
	f.mu.Lock()
	if f.finished > 0 {
		f.t.Errorf("%s: Send after Finish", f.name)
	}
	f.mu.Unlock()
	if f.hang {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range smp {
		f.seqs = append(f.seqs, s.Seq)
	}
	return len(smp), nil
}

func (f *fakeSink) Finish(context.Context, tracker.EndInfo) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finished++
	return nil
}

func (f *fakeSink) received() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.seqs...)
}

func settings(t *testing.T) config.Config {
	return config.Config{
		Interval: time.Millisecond, CollectTimeout: deadline,
		FlushTimeout: deadline, Spool: filepath.Join(t.TempDir(), "spool.jsonl"),
	}
}

func open(t *testing.T, set config.Config, cs []metrics.Collector, mem MemoryProbe, sinks ...tracker.Sink) *Session {
	t.Helper()
	st := StartSinksWith(context.Background(), sinks, tracker.StartInfo{}, StartPolicy{Timeout: config.DefaultStartTimeout}, quiet())
	s := Open(Options{Settings: set, Log: quiet(), Version: "test", Collectors: cs, Memory: mem, Started: st,
		StartTags: map[string]string{"k": "v"}, Phase: func(d time.Duration) time.Duration { return d }})
	return s
}

func report(s *Session) string {
	var b bytes.Buffer
	s.Report(&b, Ending{Title: "end"})
	return b.String()
}

// Every sample reaches the spool and the sink once, in order, the final one
// (taken at Stop) included; Finish comes after the last Send.
func TestSessionOrderAndShutdown(t *testing.T) {
	c := &counter{}
	sink := &fakeSink{t: t, name: "fake", runID: "r1"}
	set := settings(t)
	s := open(t, set, []metrics.Collector{c}, nil, sink)
	s.Run()
	waitfor.Cond(t, deadline, "five samples at the sink", func() bool { return len(sink.received()) >= 5 })
	s.Stop(nil)
	s.Finish(tracker.EndInfo{ExitCode: 3, Time: time.Now()})

	got := sink.received()
	taken := c.calls()
	if len(got) != taken {
		t.Errorf("sink got %d samples, %d were taken", len(got), taken)
	}
	for i, seq := range got {
		if seq != int64(i) {
			t.Fatalf("sink got seqs %v: want 0..%d in order", got, taken-1)
		}
	}
	if sink.finished != 1 {
		t.Errorf("Finish called %d times, want 1", sink.finished)
	}
	if n := s.Acc().Samples(); n != taken {
		t.Errorf("accumulator has %d samples, want %d", n, taken)
	}
	if r := report(s); !strings.Contains(r, fmt.Sprintf("  fake      %d samples sent to run r1\n", taken)) || strings.Contains(r, "not sent") || strings.Contains(r, "collector") {
		t.Errorf("report:\n%s\nwant every sample sent to run r1, and no collector row (none failed)", r)
	}

	smp, acks, attempts, err := spooltest.ReadFile(set.Spool)
	if err != nil {
		t.Fatal(err)
	}
	if len(smp) != taken || len(attempts) != 1 || attempts[0].End == nil || *attempts[0].End.ExitCode != 3 {
		t.Errorf("spool: %d samples, attempts %+v; want %d samples and one ended attempt with exit 3", len(smp), attempts, taken)
	}
	if attempts[0].Start.Runs["fake"] != "r1" || attempts[0].Start.Info["k"] != "v" {
		t.Errorf("start record %+v: want the run and the start tags", attempts[0].Start)
	}
	if len(acks) != 1 {
		t.Errorf("acks %v: want one sink's", acks)
	}
}

// The spool is the one buffer between sampling and the trackers, and its
// count of dropped samples the one count: with no file and a tracker that
// takes nothing, it drops its oldest samples past its bound while sampling
// goes on, says so once, and /metrics and the end-of-run table count the
// same drops.
func TestSessionDropsAreTheSpools(t *testing.T) {
	c := &counter{}
	hung := &fakeSink{t: t, name: "hung", runID: "r1", hang: true}
	set := settings(t)
	set.FlushTimeout = time.Millisecond
	var logs syncbuf.Buffer
	sp := spool.NewMemory(spool.Options{MaxBuffered: 2, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	st := StartSinksWith(context.Background(), []tracker.Sink{hung}, tracker.StartInfo{}, StartPolicy{Timeout: config.DefaultStartTimeout}, quiet())
	s := Open(Options{Settings: set, Log: quiet(), Version: "test", Collectors: []metrics.Collector{c}, Spool: sp, Started: st,
		Phase: func(d time.Duration) time.Duration { return d }})
	s.Run()
	waitfor.Cond(t, deadline, "five samples dropped while sampling goes on", func() bool { return s.health().Dropped >= 5 })
	s.Stop(nil)
	s.Finish(tracker.EndInfo{Time: time.Now()})
	lost := sp.Stats().LostUnwritten
	if h := s.health(); int64(h.Dropped) != lost || lost < 5 || lost > int64(c.calls())-2 {
		t.Errorf("/metrics counts %d dropped, the spool %d, of %d samples taken; want the spool's count, and the newest 2 kept", h.Dropped, lost, c.calls())
	}
	if n := strings.Count(logs.String(), "dropping the oldest samples"); n != 1 {
		t.Errorf("%d warnings for %d drops, want 1:\n%s", n, lost, logs.String())
	}
	if r := report(s); !strings.Contains(r, fmt.Sprintf("%d of them were dropped from the full memory buffer", lost)) {
		t.Errorf("report:\n%s\nwant the %d dropped samples", r, lost)
	}
}

// A sink refused at start gets nothing and is named in the report; one
// whose tracker is down but whose run is known is kept; one without a run
// is dropped.
func TestStartSinksFailures(t *testing.T) {
	refused := &fakeSink{t: t, name: "refused", runID: "r0", startErr: tracker.Permanent(errors.New("401"))}
	down := &fakeSink{t: t, name: "down", runID: "r1", startErr: errors.New("connection refused")}
	norun := &fakeSink{t: t, name: "norun", startErr: errors.New("connection refused")}
	ok := &fakeSink{t: t, name: "ok", runID: "r2"}
	// Start is retried within the timeout; a short one keeps the test short.
	st := StartSinksWith(context.Background(), []tracker.Sink{refused, down, norun, ok}, tracker.StartInfo{}, StartPolicy{Timeout: 300 * time.Millisecond}, quiet())
	var names []string
	for _, r := range st.Runs {
		names = append(names, r.Sink.Name()+"="+r.RunID)
	}
	if strings.Join(names, " ") != "down=r1 ok=r2" {
		t.Errorf("started %v, want down=r1 ok=r2", names)
	}
	if len(st.Failed) != 2 || st.Failed[0].What != "refused" || st.Failed[1].What != "norun" {
		t.Errorf("failed rows %+v, want refused and norun", st.Failed)
	}
	if len(st.Env) != 4 {
		t.Errorf("env %v: want every sink's variables, started or not", st.Env)
	}

	s := Open(Options{Settings: settings(t), Log: quiet(), Collectors: []metrics.Collector{&counter{}}, Started: st})
	s.Run()
	waitfor.Cond(t, deadline, "a sample at the started sink", func() bool { return len(ok.received()) > 0 })
	s.Stop(nil)
	s.Finish(tracker.EndInfo{Time: time.Now()})
	if len(refused.received())+len(norun.received()) > 0 || refused.finished+norun.finished > 0 {
		t.Error("a sink that did not start was used")
	}
	if r := report(s); !strings.Contains(r, "not used: permanent tracker error: 401") {
		t.Errorf("report:\n%s\nwant the refused sink's reason", r)
	}
}

// A sink that never answers cannot hold bridge past the flush timeout, nor
// past an abort; its samples stay in the spool and the report says so.
func TestSessionHungSink(t *testing.T) {
	for _, viaAbort := range []bool{false, true} {
		name := "flush timeout"
		if viaAbort {
			name = "abort"
		}
		t.Run(name, func(t *testing.T) {
			hung := &fakeSink{t: t, name: "hung", runID: "r1", hang: true}
			set := settings(t)
			abort := make(chan struct{})
			if viaAbort {
				set.FlushTimeout = time.Hour
				close(abort)
			} else {
				set.FlushTimeout = time.Millisecond
			}
			s := open(t, set, []metrics.Collector{&counter{}}, nil, hung)
			s.Run()
			waitfor.Cond(t, deadline, "a sample in the spool", func() bool { return s.spool.PendingCount("hung", "r1") > 0 })
			stopped := make(chan struct{})
			go func() {
				s.Stop(abort)
				close(stopped)
			}()
			select {
			case <-stopped:
			case <-time.After(deadline):
				t.Fatal("Stop did not return with a hung sink")
			}
			s.Finish(tracker.EndInfo{Time: time.Now()})
			if r := report(s); !strings.Contains(r, " not sent: upload them with: bridge sync ") {
				t.Errorf("report:\n%s\nwant the unsent samples", r)
			}
		})
	}
}

// probe reports the working set above the threshold.
type probe struct{ calls chan struct{} }

func (p probe) MemoryPoints(context.Context) ([]metrics.Point, error) {
	select {
	case p.calls <- struct{}{}:
	default:
	}
	return []metrics.Point{metrics.At(metrics.ContainerMemoryWorkingSetPercent, 99)}, nil
}

// limited is a collector under a memory limit, below the threshold.
type limited struct{ counter }

func (l *limited) Collect(ctx context.Context, b *metrics.Batch) error {
	err := l.counter.Collect(ctx, b)
	b.Add(metrics.ContainerMemoryWorkingSetPercent, 10, "test")
	return err
}

// Between samples the memory probe is read; a working set near the limit
// takes the next sample at once, long before the regular interval.
func TestSessionMemoryProbe(t *testing.T) {
	c := &limited{}
	set := settings(t)
	set.Interval, set.FastInterval, set.FastThreshold = time.Hour, time.Millisecond, 90
	p := probe{calls: make(chan struct{}, 1)}
	s := open(t, set, []metrics.Collector{c}, p)
	s.Run()
	waitfor.Cond(t, deadline, "a second sample through the probe", func() bool { return c.calls() >= 2 })
	s.Stop(nil)
	s.Finish(tracker.EndInfo{Time: time.Now()})
	select {
	case <-p.calls:
	default:
		t.Error("the probe was never read")
	}
}

// hungProbe is a memory probe whose read hangs for real: it opens a FIFO
// that nobody writes, as a memory.stat read stalled in the kernel.
type hungProbe struct {
	fifo    string
	entered chan struct{} // closed at the first call
	once    *sync.Once
	calls   *atomic.Int64
}

func (p hungProbe) MemoryPoints(context.Context) ([]metrics.Point, error) {
	p.calls.Add(1)
	p.once.Do(func() { close(p.entered) })
	_, err := os.ReadFile(p.fifo)
	return nil, err
}

// A memory probe stuck in a read stalls neither sampling nor Stop: samples
// go on at the interval, no second probe is started beside the stuck one,
// and the session ends.
func TestSessionMemoryProbeHangs(t *testing.T) {
	c := &limited{}
	set := settings(t)
	set.Interval, set.FastInterval, set.FastThreshold = 5*time.Millisecond, time.Millisecond, 90
	fifo := filepath.Join(t.TempDir(), "memory.stat")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	p := hungProbe{fifo: fifo, entered: make(chan struct{}), once: &sync.Once{}, calls: &atomic.Int64{}}
	s := open(t, set, []metrics.Collector{c}, p)
	s.Run()
	waitfor.Cond(t, deadline, "the memory probe entering its read", waitfor.Closed(p.entered))
	at := c.calls()
	waitfor.Cond(t, deadline, "three more samples while the probe hangs", func() bool { return c.calls() >= at+3 })
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.Stop(nil)
		s.Finish(tracker.EndInfo{Time: time.Now()})
	}()
	waitfor.Cond(t, deadline, "Stop and Finish while the probe hangs", waitfor.Closed(stopped))
	if n := p.calls.Load(); n != 1 {
		t.Errorf("the probe was called %d times, want once: no second probe beside a stuck one", n)
	}
	// Let the stuck read return (a writer's open ends it), so that the
	// test leaves no goroutine behind.
	w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("no reader on the FIFO: the probe was not stuck in it (%v)", err)
	}
	w.Close()
}

// The second sample comes after the phase, not after a whole interval: with
// an hour's interval and a phase of zero, it is taken at once.
func TestSessionPhase(t *testing.T) {
	c := &counter{}
	set := settings(t)
	set.Interval = time.Hour
	st := StartSinksWith(context.Background(), nil, tracker.StartInfo{}, StartPolicy{Timeout: config.DefaultStartTimeout}, quiet())
	var asked atomic.Int64
	s := Open(Options{Settings: set, Log: quiet(), Version: "test", Collectors: []metrics.Collector{c}, Started: st,
		Phase: func(d time.Duration) time.Duration { asked.Store(int64(d)); return 0 }})
	s.Run()
	waitfor.Cond(t, deadline, "a second sample after a zero phase", func() bool { return c.calls() >= 2 })
	s.Stop(nil)
	s.Finish(tracker.EndInfo{Time: time.Now()})
	if time.Duration(asked.Load()) != time.Hour {
		t.Errorf("phase asked with %v, want the interval (1h)", time.Duration(asked.Load()))
	}
}

// RandomPhase stays in [0, interval) and spreads: bridges started together
// do not share a phase.
func TestRandomPhase(t *testing.T) {
	const interval = 10 * time.Second
	seen := map[time.Duration]bool{}
	var lo, hi int
	for range 1000 {
		p := RandomPhase(interval)
		if p < 0 || p >= interval {
			t.Fatalf("phase %v outside [0, %v)", p, interval)
		}
		seen[p] = true
		if p < interval/4 {
			lo++
		}
		if p >= 3*interval/4 {
			hi++
		}
	}
	// Each quarter holds ~250 of 1000 draws; under 100 is a broken draw
	// (chance below 1e-30 for a uniform one).
	if len(seen) < 900 || lo < 100 || hi < 100 {
		t.Errorf("%d distinct phases, %d in the first quarter, %d in the last: not spread over the interval", len(seen), lo, hi)
	}
	if RandomPhase(0) != 0 {
		t.Error("RandomPhase(0) != 0")
	}
}

// With Background, a sink that reached nothing and has no run is kept for a
// start by its forwarder; what it returned is checked before the child.
func TestStartSinksBackground(t *testing.T) {
	norun := &fakeSink{t: t, name: "norun", startErr: errors.New("connection refused")}
	ok := &fakeSink{t: t, name: "ok", runID: "r2"}
	st := StartSinksWith(context.Background(), []tracker.Sink{norun, ok}, tracker.StartInfo{RunName: "job"},
		StartPolicy{Timeout: 300 * time.Millisecond, Background: true}, quiet())
	if len(st.Runs) != 2 || st.Runs[0].Late == nil || st.Runs[0].Late.RunName != "job" || st.Runs[0].RunID != "" || st.Runs[1].Late != nil {
		t.Errorf("runs %+v: want norun kept for a late start, ok started", st.Runs)
	}
	if len(st.Failed) != 0 {
		t.Errorf("failed %+v", st.Failed)
	}
}

// flaky fails every other run.
type flaky struct{ counter }

func (f *flaky) Name() string { return "flaky" }

func (f *flaky) Collect(ctx context.Context, b *metrics.Batch) error {
	f.counter.Collect(ctx, b)
	if f.calls()%2 == 1 {
		return errors.New("reading /sys/x: input/output error")
	}
	return nil
}

// A collector that failed during the job has a row of the end-of-run table:
// how many of its runs failed, and its last error.
func TestSessionReportsFailedCollector(t *testing.T) {
	f := &flaky{}
	s := open(t, settings(t), []metrics.Collector{f, &counter{}}, nil)
	s.Run()
	waitfor.Cond(t, deadline, "four runs", func() bool { return f.calls() >= 4 })
	s.Stop(nil)
	s.Finish(tracker.EndInfo{Time: time.Now()})
	r := report(s)
	runs := f.calls()
	want := fmt.Sprintf(`collector flaky +failed in %d of its %d runs`, (runs+1)/2, runs)
	if !regexp.MustCompile(want).MatchString(r) || !strings.Contains(r, "its last error: reading /sys/x: input/output error") {
		t.Errorf("report:\n%s\nwant %q and the last error", r, want)
	}
	if strings.Contains(r, "collector counter") {
		t.Errorf("report:\n%s\nhas a row for the collector that never failed", r)
	}
}
