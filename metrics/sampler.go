package metrics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bridge-dev/bridge/internal/kfile"
)

// Sampler runs a fixed list of collectors and merges their points into one
// Sample. Each collector has one long-lived worker goroutine, started by the
// first Sample and ended by Close: a sample hands each worker a job instead of
// starting a goroutine (and a channel and closures) per collector per sample.
// Calls run under a timeout and with recover(): a collector that panics loses
// its points for that sample only, and one that hangs (an NVML call, a stuck
// NFS statfs) is skipped until its call returns, so it can never stall
// sampling or start a second concurrent call; its worker is the only
// goroutine it holds. It keeps each collector's Health, as node_exporter
// reports its collectors.
//
// Contract: Sample is not safe for concurrent use; one goroutine drives it.
// Health may be called from any goroutine.
type Sampler struct {
	collectors []Collector
	timeout    time.Duration
	log        *slog.Logger

	mu     sync.Mutex
	health []Health // per collector; written by Sample, read by Health (under mu)

	// Owned by the goroutine that calls Sample (and Close).
	workers  []worker
	results  chan result // capacity len(collectors): a worker's send never blocks
	started  bool
	closed   bool
	nextSeq  int64
	answered []bool       // per collector, its batch holds this sample's points; reused
	asked    []bool       // per collector, this sample handed it a job; reused
	warned   map[int]bool // collector index -> an error was logged at warn once
	// refusedSeries are the series a value of which was left out (check),
	// each logged at warn once.
	refusedSeries map[string]bool
}

// worker is one collector's goroutine and the sampling side's view of it.
type worker struct {
	jobs chan job // capacity 1; closed by Close
	// inflight: a job was handed over and its result not yet received.
	// Only the Sample goroutine reads or writes it, so a worker is free
	// again as soon as its result is taken (no flag cleared after a send
	// that a next Sample could race with).
	inflight bool
	since    time.Time // when its job in flight was handed over
	// batch is what the collector adds its points to: the worker's while
	// a job runs, the Sample goroutine's once the result is received
	// (the channels order the two). Reused from sample to sample.
	batch Batch
}

// job asks a worker for one Collect under ctx, for sample seq.
type job struct {
	ctx     context.Context
	seq     int64
	explain bool // the batch is to hold each point's source
}

type result struct {
	idx  int
	seq  int64 // the sample that asked; an older one's result is dropped
	err  error
	took time.Duration // the Collect call's
}

// Health is one collector's record: how its last run went, as
// node_exporter's node_scrape_collector_duration_seconds and
// node_scrape_collector_success report it, and its failures so far.
type Health struct {
	Collector string        // its Name
	Runs      int           // samples that asked it for points
	Failures  int           // runs that failed: an error, a panic, no answer in time, or still busy with an earlier run
	Duration  time.Duration // of its last run; for one that did not answer, how long it had run by then
	OK        bool          // its last run succeeded
	LastError string        // the first line of its last failure's error; "" before any
	// Refused counts the values it added that were left out of their
	// samples (check): none reached a tracker, the spool or /metrics.
	Refused int
	// LastRefused says which was the last of them, and why; "" before any.
	LastRefused string
}

// errBusy is the failure of a run skipped because the collector's call of
// an earlier sample has not returned yet.
var errBusy = errors.New("still in a call of an earlier sample that did not answer in time")

// NewSampler returns a Sampler over cs. timeout bounds each collector's call.
func NewSampler(cs []Collector, timeout time.Duration, log *slog.Logger) *Sampler {
	if log == nil {
		log = slog.Default()
	}
	health := make([]Health, len(cs))
	for i, c := range cs {
		health[i].Collector = c.Name()
	}
	return &Sampler{
		collectors: cs,
		timeout:    timeout,
		log:        log,
		health:     health,
		workers:    make([]worker, len(cs)),
		results:    make(chan result, len(cs)),
		answered:   make([]bool, len(cs)),
		asked:      make([]bool, len(cs)),
		warned:     map[int]bool{},

		refusedSeries: map[string]bool{},
	}
}

// Health returns each collector's record, in the Sampler's order.
func (s *Sampler) Health() []Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.health)
}

// record notes the end of collector i's run in this sample.
func (s *Sampler) record(i int, took time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := &s.health[i]
	h.Runs++
	h.Duration, h.OK = took, err == nil
	if err != nil {
		h.Failures++
		h.LastError, _, _ = strings.Cut(err.Error(), "\n") // a panic's stack stays in the log
	}
}

// SetNextSeq makes the next sample's Seq n (used when a spool is resumed).
// Like Sample, it is called from the sampling goroutine.
func (s *Sampler) SetNextSeq(n int64) { s.nextSeq = n }

// NextSeq is the Seq the next sample gets.
func (s *Sampler) NextSeq() int64 { return s.nextSeq }

// start launches the workers. Lazily, on the first Sample, so that a Sampler
// that never samples holds no goroutines.
func (s *Sampler) start() {
	s.started = true
	for i := range s.workers {
		s.workers[i].jobs = make(chan job, 1)
		go s.work(i, s.workers[i].jobs)
	}
}

// Sample takes one sample. The sample's Time is taken before the collectors run.
// Points are sorted by name so that output and posted bodies are stable.
func (s *Sampler) Sample(ctx context.Context) Sample {
	smp, _ := s.sample(ctx, false)
	return smp
}

// SampleExplained is Sample, and where each point came from (the file,
// call or URL), by name: for `bridge sample`.
func (s *Sampler) SampleExplained(ctx context.Context) (Sample, map[string]string) {
	return s.sample(ctx, true)
}

func (s *Sampler) sample(ctx context.Context, explain bool) (Sample, map[string]string) {
	smp := Sample{Seq: s.nextSeq, Time: time.Now()}
	s.nextSeq++
	if s.closed {
		s.log.Debug("sample asked of a closed sampler; it has no points", "seq", smp.Seq)
		return smp, nil
	}
	if !s.started {
		s.start()
	}

	// Results that came after an earlier sample gave up on them: their
	// workers are free again.
	for drained := false; !drained; {
		select {
		case r := <-s.results:
			s.workers[r.idx].inflight = false
			s.log.Debug("collector answered after its sample's timeout; its points were dropped",
				"collector", s.collectors[r.idx].Name())
		default:
			drained = true
		}
	}

	// Taken before the timeout starts: a collector that does not answer
	// has run at least the timeout by the time it is given up on.
	began := time.Now()
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// The collectors' reads run on their workers, which this sample stops
	// waiting for at cctx's end: kfile reads under it need no goroutine.
	cctx = kfile.Bounded(context.WithValue(cctx, sampleKey{}, sampleMarks.Add(1)))
	clear(s.answered)
	clear(s.asked)
	pending := 0
	for i := range s.workers {
		w := &s.workers[i]
		if w.inflight {
			s.log.Debug("collector still busy from an earlier sample; skipped", "collector", s.collectors[i].Name())
			s.record(i, time.Since(w.since), errBusy)
			continue
		}
		w.inflight, w.since, s.asked[i] = true, began, true
		w.jobs <- job{ctx: cctx, seq: smp.Seq, explain: explain} // the worker is idle: never blocks
		pending++
	}
	for pending > 0 {
		select {
		case r := <-s.results:
			s.workers[r.idx].inflight = false
			if r.seq != smp.Seq {
				// A late answer to an earlier sample, from a
				// collector skipped as busy in this one.
				continue
			}
			pending--
			s.take(r)
			s.answered[r.idx] = true
		case <-cctx.Done():
			why := fmt.Errorf("no answer within the collect timeout, %s", s.timeout)
			if err := ctx.Err(); err != nil {
				s.log.Warn("sample cut short; the collectors that had not answered are missing from it",
					"err", err, "pending", pending)
				why = fmt.Errorf("no answer before the sample was cut short: %w", err)
			} else {
				s.log.Warn("collectors did not answer in time; their points are missing from this sample",
					"timeout", s.timeout, "pending", pending)
			}
			for i, asked := range s.asked {
				if asked && !s.answered[i] {
					s.record(i, time.Since(s.workers[i].since), why)
				}
			}
			pending = 0 // stop waiting; late results are dropped by a later Sample
		}
	}
	n := 0
	for i, ok := range s.answered {
		if ok {
			n += len(s.workers[i].batch.Points)
		}
	}
	if n > 0 { // none: Points stays nil
		smp.Points = make([]Point, 0, n)
	}
	var sources map[string]string
	if explain {
		sources = map[string]string{}
	}
	for i, ok := range s.answered {
		if !ok {
			continue
		}
		b := &s.workers[i].batch
		smp.Points = append(smp.Points, b.Points...)
		for k := 0; explain && k < len(b.Points) && k < len(b.Sources); k++ {
			// The first collector's, as dedupe keeps.
			if name := b.Points[k].Name(); sources[name] == "" {
				sources[name] = b.Sources[k]
			}
		}
	}
	// Stable: within a name, points stay in collector order (dedupe).
	slices.SortStableFunc(smp.Points, func(a, b Point) int { return cmp.Compare(a.Name(), b.Name()) })
	smp.Points = s.dedupe(smp.Points)
	return smp, sources
}

// sampleKey is the context key of the mark of the sample a Collect is for.
type sampleKey struct{}

// sampleMarks numbers the samples of every Sampler, from 1.
var sampleMarks atomic.Uint64

// SampleMark is the mark of the sample whose Collect ctx was handed to: one
// value for every collector's call in one Sample, another for the next
// Sample (of any Sampler). ok is false for a ctx no Sampler handed out (a
// Collect called directly, a Detect). Collectors that share a reading, such
// as the child's process tree, take it once a sample by it.
func SampleMark(ctx context.Context) (mark uint64, ok bool) {
	mark, ok = ctx.Value(sampleKey{}).(uint64)
	return mark, ok
}

// dedupe keeps one point per name, the earliest collector's (points are in
// collector order within a name): NVML's gpu_0_ series win over the same
// keys mapped from a scraped dcgm-exporter, and a tracker never gets two
// values for one key and step.
func (s *Sampler) dedupe(pts []Point) []Point {
	out := pts[:0]
	for _, p := range pts {
		if n := len(out); n > 0 && out[n-1].Name() == p.Name() {
			s.log.Debug("two collectors produced one series; the first collector's value is kept", "name", p.Name())
			continue
		}
		out = append(out, p)
	}
	return out
}

// work is collector i's goroutine: it runs one job at a time until Close
// closes jobs. A call that hangs keeps it here; Sample skips the collector
// until the call's result arrives.
func (s *Sampler) work(i int, jobs <-chan job) {
	c, b := s.collectors[i], &s.workers[i].batch
	for j := range jobs {
		b.Reset()
		b.Explain = j.explain
		start := time.Now()
		err := s.call(j.ctx, c, b)
		// At most one job per worker is unanswered (inflight), so the
		// buffer always has room.
		s.results <- result{idx: i, seq: j.seq, err: err, took: time.Since(start)}
	}
}

// call runs one Collect, turning a panic into an error (and dropping what
// the collector had added).
func (s *Sampler) call(ctx context.Context, c Collector, b *Batch) (err error) {
	defer func() {
		if p := recover(); p != nil {
			b.Reset()
			err = fmt.Errorf("collector %s panicked: %v\n%s", c.Name(), p, debug.Stack())
		}
	}()
	return c.Collect(ctx, b)
}

func (s *Sampler) take(r result) {
	s.record(r.idx, r.took, r.err)
	s.check(r.idx, &s.workers[r.idx].batch)
	c := s.collectors[r.idx]
	if r.err != nil {
		first := !s.warned[r.idx]
		s.warned[r.idx] = true
		lvl := slog.LevelDebug
		if first {
			lvl = slog.LevelWarn
		}
		s.log.Log(context.Background(), lvl, "collector failed", "collector", c.Name(), "err", r.err)
	}
}

// check leaves out of collector i's batch b every value that may not leave
// a collector: a point without a descriptor, a value outside its series'
// range (Desc.Range: NaN and the infinities are outside every range), a
// part above its total (Desc.Total) in the same batch. This is the one
// place values are checked: `bridge sample`, the spool, the trackers and
// /metrics get only what passes. Each value left out is counted in the
// collector's Health; the first of each series is logged at warn, the
// others not at all (a broken sensor would repeat it every sample).
func (s *Sampler) check(i int, b *Batch) {
	// Most batches hold no value to leave out: find the first one before
	// moving anything.
	first := -1
	for k := range b.Points {
		p := &b.Points[k]
		if d := p.Desc; d == nil || d.Total != nil || !d.Range().Holds(p.Value) {
			first = k
			break
		}
	}
	if first < 0 {
		return
	}
	n, refused, last := first, 0, ""
	for k := first; k < len(b.Points); k++ {
		p := b.Points[k]
		if why := refusal(p, b.Points[:n], b.Points[k+1:]); why != "" {
			refused++
			last = p.Name() + ": " + why
			if !s.refusedSeries[p.Name()] {
				s.refusedSeries[p.Name()] = true
				s.log.Warn("a collector's value is out of its series' range; it is left out of the samples (said once a series)",
					"collector", s.collectors[i].Name(), "series", p.Name(), "why", why)
			}
			continue
		}
		b.Points[n] = p
		if b.Explain && k < len(b.Sources) {
			b.Sources[n] = b.Sources[k]
		}
		n++
	}
	b.Points = b.Points[:n]
	if b.Explain && n < len(b.Sources) {
		b.Sources = b.Sources[:n]
	}
	if refused == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.health[i].Refused += refused
	s.health[i].LastRefused = last
}

// refusal says why point p may not leave its collector, "" when it may.
// kept and rest are the batch's other points that may still be its total.
func refusal(p Point, kept, rest []Point) string {
	d := p.Desc
	if d == nil {
		return "no descriptor: a collector adds its values against their series' Desc"
	}
	if r := d.Range(); !r.Holds(p.Value) {
		return fmt.Sprintf("%s outside its range, %s to %s %s", formatValue(p.Value), formatValue(r.Min), formatValue(r.Max), d.Unit)
	}
	if d.Total == nil {
		return ""
	}
	for _, pts := range [2][]Point{kept, rest} {
		for _, q := range pts {
			if q.Name() == d.Total.Name && q.Value < p.Value && d.Total.Range().Holds(q.Value) {
				return fmt.Sprintf("%s above its total %s, %s", formatValue(p.Value), d.Total.Name, formatValue(q.Value))
			}
		}
	}
	return ""
}

func formatValue(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// Detect asks every Detector (through a wrapper: As) for what it found,
// keyed by collector name, each within the collect timeout: one that has
// not answered by then (a read that hangs) is left behind, and its entry
// says so. One that found nothing to say (nil) has no entry.
func (s *Sampler) Detect(ctx context.Context) map[string]any {
	out := map[string]any{}
	for _, c := range s.collectors {
		d, ok := As[Detector](c)
		if !ok {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, s.timeout)
		found, err := kfile.Call(dctx, func() (found map[string]any, err error) {
			defer func() {
				if p := recover(); p != nil {
					found = map[string]any{"error": fmt.Sprint(p)}
				}
			}()
			return d.Detect(kfile.Bounded(dctx)), nil
		}, nil)
		cancel()
		if err != nil {
			s.log.Warn("collector did not say what it found within the collect timeout; left out", "collector", c.Name(), "timeout", s.timeout)
			found = map[string]any{"error": fmt.Sprintf("no answer within the collect timeout, %s", s.timeout)}
		}
		if found != nil {
			out[c.Name()] = found
		}
	}
	return out
}

// Close ends the workers and closes every collector that holds resources
// (a Closer, through a wrapper: As).
// An idle worker exits at once; one stuck in a call exits when the call
// returns. Close does not wait for it, as Sample never waits past the
// timeout. Later Samples have no points; a second Close does nothing.
func (s *Sampler) Close() {
	if s.closed {
		return
	}
	s.closed = true
	if s.started {
		for i := range s.workers {
			close(s.workers[i].jobs)
		}
	}
	for _, c := range s.collectors {
		if cl, ok := As[Closer](c); ok {
			if err := cl.Close(); err != nil {
				s.log.Debug("closing collector", "collector", c.Name(), "err", err)
			}
		}
	}
}
