// Package scrape is a collector that reads Prometheus text-format endpoints
// (dcgm-exporter, node-exporter, anything) with prometheus/common's parser.
// It maps what bridge knows (dcgm-exporter's GPU series to gpu_N_ keys) and,
// when asked, passes the rest through under a prom_ prefix.
package scrape

import (
	"context"

	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bridge-dev/bridge/metrics"
)

// Options configure the collector.
type Options struct {
	URLs        []string       // endpoints, read in parallel at every sample
	Include     *regexp.Regexp // nil: every series; else only names it matches
	Exclude     *regexp.Regexp // nil: none excluded
	Passthrough bool           // series bridge does not map become prom_<name>[__<label>_<value>...]
	Timeout     time.Duration  // per request; default 2s
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
	Client     *http.Client // nil: a default client
	Log        *slog.Logger
}

// Collector reads the endpoints. It implements metrics.Collector.
type Collector struct {
	o Options

	mu       sync.Mutex
	targets  []*target
	failures map[string]int  // per URL, since start
	failing  map[string]bool // per URL: in a failure streak (logged once)
}

// target is one URL's scrape: at most one request in flight, and its
// result held until a sample takes it (once: a dead exporter's last values
// are never repeated).
type target struct {
	url    string
	busy   bool
	done   chan struct{} // closed when the request in flight ends
	points []metrics.Point
	have   bool
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
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	c := &Collector{o: o, failures: map[string]int{}, failing: map[string]bool{}}
	for _, u := range o.URLs {
		c.targets = append(c.targets, &target{url: u})
	}
	return c
}

// Name implements metrics.Collector.
func (c *Collector) Name() string { return "scrape" }

// Failures returns the failed scrapes per URL so far.
func (c *Collector) Failures() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.failures))
	for k, v := range c.failures {
		out[k] = v
	}
	return out
}

// Collect starts a request to every URL that has none in flight, waits for
// them at most Grace, and returns what has arrived since the last sample: a
// slow or hung exporter never holds a sample (fast sampling near the memory
// limit included) longer than Grace; its answer, if any, goes into a later
// sample. A failure adds nothing, is counted, and is logged once per failure
// streak. Collect never returns an error: an exporter going away must not
// look like a broken bridge.
func (c *Collector) Collect(ctx context.Context) ([]metrics.Point, error) {
	c.mu.Lock()
	var waits []chan struct{}
	for _, t := range c.targets {
		if !t.busy {
			t.busy, t.done = true, make(chan struct{})
			go c.scrape(t, t.done)
		}
		waits = append(waits, t.done)
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
	var out []metrics.Point
	for _, t := range c.targets {
		if t.have {
			out = append(out, t.points...)
			t.points, t.have = nil, false
		}
	}
	return out, nil
}

// scrape runs one request; its own timeout bounds it, not the sample's.
func (c *Collector) scrape(t *target, done chan struct{}) {
	defer close(done)
	fams, err := c.fetch(context.Background(), t.url)
	var pts []metrics.Point
	if err == nil {
		pts = c.Map(fams, t.url)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record(t.url, err)
	if err == nil {
		t.points, t.have = pts, true
	}
	t.busy = false
}

// record counts a failure and logs the first of a streak; c.mu is held.
func (c *Collector) record(u string, err error) {
	switch {
	case err != nil:
		c.failures[u]++
		if !c.failing[u] {
			c.failing[u] = true
			c.o.Log.Warn("cannot scrape; its series are missing until it answers (sampling goes on)", "url", u, "err", err)
		}
	case c.failing[u]:
		c.failing[u] = false
		c.o.Log.Info("scrape target answers again", "url", u, "failed_scrapes", c.failures[u])
	}
}

func (c *Collector) fetch(ctx context.Context, u string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("--scrape %q: %w", u, err)
	}
	// Only the classic text format: that is what the parser reads.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := c.o.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("--scrape %q: HTTP %s", u, resp.Status)
	}
	return Parse(io.LimitReader(resp.Body, 64<<20))
}

// Parse reads the Prometheus text format.
func Parse(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing the Prometheus text format: %w", err)
	}
	return fams, nil
}

// Map turns parsed families into points, in name order.
func (c *Collector) Map(fams map[string]*dto.MetricFamily, source string) []metrics.Point {
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []metrics.Point
	for _, n := range names {
		if c.o.Include != nil && !c.o.Include.MatchString(n) {
			continue
		}
		if c.o.Exclude != nil && c.o.Exclude.MatchString(n) {
			continue
		}
		f := fams[n]
		for _, m := range f.GetMetric() {
			v, ok := value(f.GetType(), m)
			if !ok {
				continue
			}
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if p, ok := c.dcgm(n, labels, v); ok {
				p.Source = source
				out = append(out, p)
				continue
			} else if strings.HasPrefix(n, "DCGM_") {
				continue // a DCGM series of another pod, or one bridge does not map
			}
			if c.o.Passthrough {
				out = append(out, metrics.Point{Name: passName(n, labels), Value: v, Scope: metrics.ScopeProm, Source: source})
			}
		}
	}
	return out
}

func value(t dto.MetricType, m *dto.Metric) (float64, bool) {
	var v float64
	switch t {
	case dto.MetricType_GAUGE:
		v = m.GetGauge().GetValue()
	case dto.MetricType_COUNTER:
		v = m.GetCounter().GetValue()
	case dto.MetricType_UNTYPED:
		v = m.GetUntyped().GetValue()
	default:
		return 0, false // histograms and summaries: no single value
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false // trackers reject them
	}
	return v, true
}

// dcgmSeries maps dcgm-exporter's fields (etc/default-counters.csv) to
// bridge's GPU suffixes and the factor to bridge's unit.
var dcgmSeries = map[string]struct {
	suffix, unit string
	mib          bool // MiB: to bytes, then to bridge's 10^6-byte megabytes as the NVML collector does
}{
	"DCGM_FI_DEV_GPU_UTIL":      {metrics.GPUUtilization, metrics.UnitPercentage, false},
	"DCGM_FI_DEV_FB_USED":       {metrics.GPUMemoryUsed, metrics.UnitMegabytes, true},
	"DCGM_FI_DEV_POWER_USAGE":   {metrics.GPUPowerUsage, metrics.UnitWatts, false},
	"DCGM_FI_DEV_GPU_TEMP":      {metrics.GPUTemperature, metrics.UnitCelsius, false},
	"DCGM_FI_DEV_SM_CLOCK":      {metrics.GPUSMClock, metrics.UnitMHz, false},
	"DCGM_FI_DEV_XID_ERRORS":    {metrics.GPULastXid, metrics.UnitCount, false},
	"DCGM_FI_DEV_MEM_COPY_UTIL": {metrics.GPUMemoryControllerUtilization, metrics.UnitPercentage, false},
}

// dcgm maps one dcgm-exporter series. The GPU is the gpu label (its index on
// the node); a MIG slice (GPU_I_ID label) becomes gpu_N_mig_M_.
func (c *Collector) dcgm(name string, labels map[string]string, v float64) (metrics.Point, bool) {
	var suffix, unit string
	switch {
	case dcgmSeries[name].suffix != "":
		s := dcgmSeries[name]
		suffix, unit = s.suffix, s.unit
		if s.mib {
			v = metrics.MB(v * (1 << 20))
		}
	case strings.HasPrefix(name, "DCGM_FI_PROF_"):
		base := strings.ToLower(strings.TrimPrefix(name, "DCGM_FI_PROF_"))
		if b, ok := strings.CutSuffix(base, "_bytes"); ok {
			// PCIe/NVLink counters are bytes per second.
			suffix, unit, v = "prof_"+b+"_"+metrics.UnitMegabytesPerSecond, metrics.UnitMegabytesPerSecond, v/metrics.Megabyte
		} else {
			suffix, unit = "prof_"+base+"_"+metrics.UnitRatio, metrics.UnitRatio
		}
	default:
		return metrics.Point{}, false
	}
	if !c.ours(labels) {
		return metrics.Point{}, false
	}
	idx, ok := c.gpuIndex(labels)
	if !ok {
		return metrics.Point{}, false
	}
	prefix := metrics.GPUPrefix(idx)
	if m, err := strconv.Atoi(labels["GPU_I_ID"]); err == nil && m >= 0 {
		prefix = metrics.MIGPrefix(idx, m)
	}
	return metrics.Point{Name: prefix + suffix, Value: v, Unit: unit, Scope: metrics.ScopeGPU}, true
}

// gpuIndex is the GPU's index: NVML's for its UUID when NVML works here,
// else dcgm-exporter's gpu label (the node's index).
func (c *Collector) gpuIndex(labels map[string]string) (int, bool) {
	if c.o.GPUIndexes != nil {
		if m := c.o.GPUIndexes(); len(m) > 0 {
			idx, ok := m[labels["UUID"]]
			return idx, ok
		}
	}
	gpu := labels["gpu"]
	if !metrics.Digits(gpu) {
		return 0, false
	}
	idx, err := strconv.Atoi(gpu)
	return idx, err == nil
}

// ours reports whether a series belongs to this pod: without a known
// identity, or without pod labels on the series, every GPU counts.
func (c *Collector) ours(labels map[string]string) bool {
	if c.o.Pod == "" || c.o.Namespace == "" {
		return true
	}
	pod, hasPod := labels["pod"]
	ns, hasNS := labels["namespace"]
	if !hasPod && !hasNS {
		return true
	}
	return pod == c.o.Pod && ns == c.o.Namespace
}

// passName is a key for a series bridge does not map: prom_<name>, then
// __<label>_<value> per label in name order, characters outside MLflow's key
// alphabet replaced by '_'.
func passName(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("prom_" + name)
	for _, k := range keys {
		b.WriteString("__" + k + "_" + labels[k])
	}
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || r == '.' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') {
			return r
		}
		return '_'
	}, b.String())
}
