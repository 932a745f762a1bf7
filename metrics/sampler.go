package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
	"time"
)

// Sampler runs a fixed list of collectors and merges their points into one
// Sample. Each collector runs in its own goroutine under a timeout and with
// recover(): a collector that panics loses its points for that sample only, and
// one that hangs (an NVML call, a stuck NFS statfs) is skipped until its call
// returns, so it can never stall sampling or start a second concurrent call.
//
// Contract: Sample is not safe for concurrent use; one goroutine drives it.
type Sampler struct {
	collectors []Collector
	timeout    time.Duration
	log        *slog.Logger
	now        func() time.Time

	mu      sync.Mutex
	busy    map[int]bool // collector index -> a call is still running
	warned  map[int]bool // collector index -> an error was logged at warn once
	nextSeq int64
}

// NewSampler returns a Sampler over cs. timeout bounds each collector's call.
func NewSampler(cs []Collector, timeout time.Duration, log *slog.Logger) *Sampler {
	if log == nil {
		log = slog.Default()
	}
	return &Sampler{
		collectors: cs,
		timeout:    timeout,
		log:        log,
		now:        time.Now,
		busy:       map[int]bool{},
		warned:     map[int]bool{},
	}
}

// SetNextSeq makes the next sample's Seq n (used when a spool is resumed).
func (s *Sampler) SetNextSeq(n int64) { s.nextSeq = n }

type result struct {
	idx    int
	points []Point
	err    error
}

// Sample takes one sample. The sample's Time is taken before the collectors run.
// Points are sorted by name so that output and posted bodies are stable.
func (s *Sampler) Sample(ctx context.Context) Sample {
	smp := Sample{Seq: s.nextSeq, Time: s.now()}
	s.nextSeq++

	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	results := make(chan result, len(s.collectors))
	started := 0
	for i, c := range s.collectors {
		s.mu.Lock()
		if s.busy[i] {
			s.mu.Unlock()
			s.log.Debug("collector still busy from an earlier sample; skipped", "collector", c.Name())
			continue
		}
		s.busy[i] = true
		s.mu.Unlock()
		started++
		go s.run(cctx, i, c, results)
	}
	parts := make([][]Point, len(s.collectors))
	for n := 0; n < started; n++ {
		select {
		case r := <-results:
			parts[r.idx] = s.take(r)
		case <-cctx.Done():
			s.log.Warn("collectors did not answer in time; their points are missing from this sample",
				"timeout", s.timeout, "pending", started-n)
			n = started // stop waiting; late results are dropped
		}
	}
	for _, p := range parts {
		smp.Points = append(smp.Points, p...)
	}
	sort.SliceStable(smp.Points, func(a, b int) bool { return smp.Points[a].Name < smp.Points[b].Name })
	smp.Points = s.dedupe(smp.Points)
	return smp
}

// dedupe keeps one point per name, the earliest collector's (points are in
// collector order within a name): NVML's gpu_0_ series win over the same
// keys mapped from a scraped dcgm-exporter, and a tracker never gets two
// values for one key and step.
func (s *Sampler) dedupe(pts []Point) []Point {
	out := pts[:0]
	for _, p := range pts {
		if n := len(out); n > 0 && out[n-1].Name == p.Name {
			s.log.Debug("two collectors produced one series; the first collector's value is kept", "name", p.Name, "dropped_source", p.Source)
			continue
		}
		out = append(out, p)
	}
	return out
}

func (s *Sampler) run(ctx context.Context, i int, c Collector, out chan<- result) {
	r := result{idx: i}
	func() {
		defer func() {
			if p := recover(); p != nil {
				r.err = fmt.Errorf("collector %s panicked: %v\n%s", c.Name(), p, debug.Stack())
			}
		}()
		r.points, r.err = c.Collect(ctx)
	}()
	// Not busy before the result is handed over: a next Sample that starts as
	// soon as this one returns must not skip a collector that has finished.
	s.mu.Lock()
	s.busy[i] = false
	s.mu.Unlock()
	out <- r // buffered for every collector: never blocks
}

func (s *Sampler) take(r result) []Point {
	c := s.collectors[r.idx]
	if r.err != nil {
		s.mu.Lock()
		first := !s.warned[r.idx]
		s.warned[r.idx] = true
		s.mu.Unlock()
		lvl := slog.LevelDebug
		if first {
			lvl = slog.LevelWarn
		}
		s.log.Log(context.Background(), lvl, "collector failed", "collector", c.Name(), "err", r.err)
	}
	return r.points
}

// Detect asks every Detector for what it found, keyed by collector name.
func (s *Sampler) Detect(ctx context.Context) map[string]any {
	out := map[string]any{}
	for _, c := range s.collectors {
		d, ok := c.(Detector)
		if !ok {
			continue
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					out[c.Name()] = map[string]any{"error": fmt.Sprint(p)}
				}
			}()
			out[c.Name()] = d.Detect(ctx)
		}()
	}
	return out
}

// Close closes every collector that holds resources.
func (s *Sampler) Close() {
	for _, c := range s.collectors {
		if cl, ok := c.(Closer); ok {
			if err := cl.Close(); err != nil {
				s.log.Debug("closing collector", "collector", c.Name(), "err", err)
			}
		}
	}
}
