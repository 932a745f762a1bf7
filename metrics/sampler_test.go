package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

type fixed struct {
	name string
	pts  []Point
	err  error
}

func (f fixed) Name() string                             { return f.name }
func (f fixed) Collect(context.Context) ([]Point, error) { return f.pts, f.err }

// hung blocks until release is closed, counting concurrent calls.
type hung struct {
	release chan struct{}
	calls   atomic.Int32
	active  atomic.Int32
	maxAct  atomic.Int32
}

func (h *hung) Name() string { return "hung" }
func (h *hung) Collect(context.Context) ([]Point, error) {
	h.calls.Add(1)
	n := h.active.Add(1)
	if n > h.maxAct.Load() {
		h.maxAct.Store(n)
	}
	<-h.release // ignores ctx on purpose, as a stuck syscall would
	h.active.Add(-1)
	return []Point{{Name: "late"}}, nil
}

type panicky struct{}

func (panicky) Name() string                             { return "panicky" }
func (panicky) Collect(context.Context) ([]Point, error) { panic("boom") }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func names(s Sample) []string {
	var out []string
	for _, p := range s.Points {
		out = append(out, p.Name)
	}
	return out
}

func TestSamplerMergesSortsAndNumbers(t *testing.T) {
	s := NewSampler([]Collector{
		fixed{name: "b", pts: []Point{{Name: "node_b"}, {Name: "container_a"}}},
		fixed{name: "a", pts: []Point{{Name: "gpu_0_x"}}, err: errors.New("partly failed")},
	}, time.Second, quiet())
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
	slow := &gated{release: make(chan struct{}), pts: []Point{{Name: "gpu_0_utilization_percentage", Value: 1, Source: "nvml"}}}
	s := NewSampler([]Collector{
		slow,
		&signaller{fixed: fixed{name: "scrape", pts: []Point{{Name: "gpu_0_utilization_percentage", Value: 2, Source: "dcgm"}, {Name: "gpu_0_prof_x_ratio", Value: 0.5}}}, then: slow.release},
	}, time.Minute, quiet())
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
func (g *gated) Collect(context.Context) ([]Point, error) {
	<-g.release
	return g.pts, nil
}

// signaller answers, then lets the gated collector answer after it.
type signaller struct {
	fixed
	then chan struct{}
}

func (s *signaller) Collect(ctx context.Context) ([]Point, error) {
	defer close(s.then)
	return s.fixed.Collect(ctx)
}

// A hung collector costs one timeout, is skipped while its call is stuck
// (never called twice at once) and contributes again once it returns.
func TestSamplerSurvivesHungCollector(t *testing.T) {
	h := &hung{release: make(chan struct{})}
	s := NewSampler([]Collector{h, fixed{name: "ok", pts: []Point{{Name: "node_x"}}}}, 50*time.Millisecond, quiet())
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
	s := NewSampler([]Collector{panicky{}, fixed{name: "ok", pts: []Point{{Name: "node_x"}}}}, time.Second, quiet())
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
		fixed{name: "a", pts: []Point{{Name: "a"}}},
		fixed{name: "b", pts: []Point{{Name: "b"}}},
	}, 5*time.Second, quiet())
	defer s.Close()
	for i := range 500 {
		if got := names(s.Sample(context.Background())); len(got) != 2 {
			t.Fatalf("sample %d has %v, want both collectors' points", i, got)
		}
	}
}
