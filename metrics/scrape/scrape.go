// Package scrape is a collector that reads Prometheus text-format endpoints
// (dcgm-exporter, node-exporter, anything) with prometheus/common's parser.
// It maps what bridge knows (dcgm-exporter's GPU series to gpu_N_ keys) and,
// when asked, passes the rest through under a prom_ prefix.
//
// No exporter can harm bridge through it: each answer is read as a stream
// within the bounds below (bytes before and after inflating, line length,
// series kept and their label bytes), an answer over any of them is dropped
// whole, a URL adds at most maxKeys keys over the run, redirects leave
// neither the URL's scheme nor its host, and a URL is only ever shown
// through redact.URI (its password and secret-looking query values hidden).
package scrape

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"sync"
	"time"
	"unique"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/redact"
)

// Bounds on what one --scrape URL may cost, whatever its exporter sends.
// An answer over a per-answer bound adds nothing (it is dropped whole).
const (
	// maxBodyBytes bounds the bytes read from the connection, and again
	// the bytes a gzip body inflates to: a gzip bomb stops here.
	maxBodyBytes = 16 << 20
	// maxLineBytes bounds one line: one series with its labels, or a
	// comment.
	maxLineBytes = 64 << 10
	// maxSeries bounds the series bridge keeps from one answer (mapped to
	// gpu_N_ keys or passed through), after --scrape-include and
	// --scrape-exclude: dcgm-exporter serves a few hundred on an 8-GPU
	// node; a larger exporter is narrowed with those filters. Every
	// sample held (the spool keeps up to 1024 unacknowledged ones in
	// memory) holds at most this many points from one URL.
	maxSeries = 2000
	// maxLabelBytes bounds the metric names, label names and label values
	// of the series bridge keeps from one answer.
	maxLabelBytes = 1 << 20
	// maxKeyLength bounds a key (MLflow refuses keys over 250 characters):
	// a series whose key would be longer is left out.
	maxKeyLength = 250
	// maxKeys bounds the distinct keys one URL adds over the whole run: an
	// exporter whose label values change at every answer (a timestamp, a
	// request id) cannot grow the key space of the run, and the memory
	// bridge and the trackers keep per key, without end. Series with new
	// keys past it are left out.
	maxKeys = 10_000
	// maxGPUs bounds dcgm-exporter's gpu label (the GPU's index on the
	// node): the NVIDIA driver supports at most 32 GPUs in one system
	// (NV_MAX_DEVICES, open-gpu-kernel-modules nvlimits.h).
	maxGPUs = 32
	// maxMIGID bounds the GPU_I_ID label (a MIG GPU instance id): a GPU
	// holds at most 7 MIG instances, numbered by their placement, far
	// below this.
	maxMIGID = 32
)

// errTooLarge is the error of an answer over one of the bounds.
var errTooLarge = errors.New("answer over a bound")

// Options configure the collector.
type Options struct {
	URLs        []string       // endpoints, read in parallel at every sample
	Include     *regexp.Regexp // nil: every series; else only names it matches
	Exclude     *regexp.Regexp // nil: none excluded
	Passthrough bool           // series bridge does not map become prom_<name>[__<label>_<value>...]
	Timeout     time.Duration  // per request, reading the answer included; default 2s
	Grace       time.Duration  // longest a sample waits for requests in flight; default 250ms
	// Pod and Namespace are this pod's identity; when both are set, series
	// that carry pod/namespace labels (dcgm-exporter --kubernetes) count
	// only when they name this pod.
	Pod, Namespace string
	// GPUIndexes maps GPU UUIDs to the indexes bridge's NVML collector
	// uses (nil, or returning nil, when NVML is off). When it has entries,
	// a dcgm-exporter series is keyed by its UUID label's index there, and
	// one whose GPU NVML does not see (another container's) is dropped.
	GPUIndexes func() map[string]int
	Log        *slog.Logger
}

// Collector reads the endpoints. It implements metrics.Collector,
// metrics.Detector and metrics.Closer.
type Collector struct {
	o      Options
	client *http.Client
	// life ends at Close: the requests in flight are cancelled then, and
	// no other starts.
	life context.Context
	end  context.CancelFunc

	mu      sync.Mutex
	targets []*target
}

// target is one URL's scrape: at most one request in flight, and its
// result held until a sample takes it (once: a dead exporter's last values
// are never repeated). c.mu guards every field; the request in flight
// reads keys and uses reader without it (keys change only once that
// request has returned).
type target struct {
	url    string
	shown  string // url as bridge prints it (redact.URI)
	busy   bool
	done   chan struct{} // closed when the request in flight ends
	points []metrics.Point
	have   bool

	failures int             // failed scrapes since start
	failing  bool            // in a failure streak (logged once)
	warned   map[string]bool // reports made once a run: "bound", "long", "keys"

	// keys are those this URL has added (maxKeys), each with its
	// descriptor: the samples held in memory share one of each.
	keys   map[unique.Handle[string]]*metrics.Desc
	reader *reader // the request in flight's
}

// New returns the collector.
func New(o Options) *Collector {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Grace <= 0 {
		o.Grace = 250 * time.Millisecond
	}
	c := &Collector{o: o, client: newHTTPClient()}
	c.life, c.end = context.WithCancel(context.Background())
	for _, u := range o.URLs {
		c.targets = append(c.targets, &target{url: u, shown: redact.URI(u), warned: map[string]bool{}, keys: map[unique.Handle[string]]*metrics.Desc{}})
	}
	return c
}

// Name implements metrics.Collector.
func (c *Collector) Name() string { return Name }

// Detect implements metrics.Detector: the URLs, as bridge shows them.
func (c *Collector) Detect(context.Context) map[string]any {
	urls := make([]string, len(c.targets))
	for i, t := range c.targets {
		urls[i] = t.shown
	}
	return map[string]any{"urls": urls}
}

// Failures returns the failed scrapes (answers over a bound included) per
// URL so far, each URL as bridge shows it (redact.URI).
func (c *Collector) Failures() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.targets))
	for _, t := range c.targets {
		out[t.shown] += t.failures
	}
	return out
}

// Close implements metrics.Closer: it cancels the requests in flight
// without waiting for them (one that ends so is not a failure of its
// exporter), starts none after, and closes the idle connections. A second
// Close does nothing.
func (c *Collector) Close() error {
	c.end()
	c.client.CloseIdleConnections()
	return nil
}

// Collect starts a request to every URL that has none in flight, waits for
// them at most Grace, and returns what has arrived since the last sample: a
// slow or hung exporter never holds a sample (fast sampling near the memory
// limit included) longer than Grace; its answer, if any, goes into a later
// sample. A failure adds nothing, is counted, and is logged once per failure
// streak. Collect never returns an error: an exporter going away must not
// look like a broken bridge. After Close it starts no request.
func (c *Collector) Collect(ctx context.Context, b *metrics.Batch) error {
	c.mu.Lock()
	var waits []chan struct{}
	for _, t := range c.targets {
		if !t.busy && c.life.Err() == nil {
			t.busy, t.done = true, make(chan struct{})
			go c.scrape(t, t.done)
		}
		if t.busy {
			waits = append(waits, t.done)
		}
	}
	c.mu.Unlock()

	grace := time.NewTimer(c.o.Grace)
	defer grace.Stop()
wait:
	for _, ch := range waits {
		select {
		case <-ch:
		case <-grace.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.targets {
		if t.have {
			for _, p := range t.points {
				b.Add(p.Desc, p.Value, t.shown)
			}
			t.points, t.have = nil, false
		}
	}
	return nil
}

// scrape runs one request bounded by its own timeout and by Close, not by
// the sample's end: an answer that comes after the sample has gone goes
// into a later one. It runs on a goroutine of its own, outside the
// Sampler's recover: a panic on hostile input is this scrape's failure,
// never bridge's end.
func (c *Collector) scrape(t *target, done chan struct{}) {
	defer close(done)
	var (
		a   *answer
		err error
	)
	func() {
		defer func() {
			if p := recover(); p != nil {
				a, err = nil, fmt.Errorf("internal error reading the answer: %v", p)
			}
		}()
		a, err = c.fetch(c.life, t)
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	t.busy = false
	if c.life.Err() != nil {
		return // cancelled by Close: bridge is ending, the exporter did nothing wrong
	}
	c.record(t, a, err)
	if err == nil {
		for h, d := range a.seen {
			t.keys[h] = d
		}
		t.points, t.have = a.points, true
	}
}

// record counts a failure and reports it: the first failure of a streak
// once (and the recovery); an answer over a bound, and series left out
// for their keys, once a run each (an exporter that always answers too
// much would otherwise alternate warnings). c.mu is held.
func (c *Collector) record(t *target, a *answer, err error) {
	log := c.o.Log.With("url", t.shown)
	once := func(what, msg string, args ...any) {
		if !t.warned[what] {
			t.warned[what] = true
			log.Warn(msg, args...)
		}
	}
	switch {
	case errors.Is(err, errTooLarge):
		t.failures++
		once("bound", "scrape answer dropped whole: it is over a bound of what one answer may cost bridge (narrow a large exporter with --scrape-include or --scrape-exclude); such answers are counted in bridge_scrape_failures_total and not reported again (sampling goes on)", "err", err)
	case err != nil:
		t.failures++
		if !t.failing {
			t.failing = true
			log.Warn("cannot scrape; its series are missing until it answers (sampling goes on)", "err", err)
		}
	case t.failing:
		t.failing = false
		log.Info("scrape target answers again", "failed_scrapes", t.failures)
	}
	if a == nil {
		return
	}
	if a.long > 0 {
		once("long", "scraped series left out: their keys would be longer than MLflow takes; not reported again", "max_key_length", maxKeyLength, "example", a.longExample)
	}
	if a.overKeys > 0 {
		once("keys", "scraped series with new keys left out: this URL has added the most distinct keys bridge takes from one URL in a run (are its label values changing at every answer?); not reported again", "max_keys", maxKeys)
	}
}
