// Package promexport serves bridge's samples on /metrics in the Prometheus
// text format: the very samples the trackers get, each under the name, type,
// help and base unit its descriptor gives (cAdvisor's names where cAdvisor
// has the series, metrics.Desc), and bridge's own health (samples taken,
// dropped by the spool, sent and pending per tracker, send errors).
package promexport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bridge-dev/bridge/metrics"
)

// SinkHealth is one tracker's forwarding state.
type SinkHealth struct {
	Name     string
	Sent     int       // samples the tracker acknowledged
	Pending  int       // samples in the spool it has not acknowledged
	Errors   int       // failed sends
	LastSend time.Time // last successful send; zero: none yet
}

// Health is bridge's own state, read at each scrape.
type Health struct {
	Dropped    int // samples the spool dropped from its full memory buffer
	Sinks      []SinkHealth
	Scrapes    map[string]int   // failed --scrape reads per URL
	Collectors []metrics.Health // each collector's last run (the Sampler's)
}

// Options configure an Exporter.
type Options struct {
	// RunID is the label run_id on every series, read at each scrape: a
	// tracker that started after the job has no run at first. Nil: "".
	RunID  func() string
	NodeID string        // label node_id on every series
	Health func() Health // nil: no per-tracker health series
	Log    *slog.Logger
}

// Exporter holds the latest sample and exposes it. Observe is called by the
// pipeline's sampling loop; scrapes read under a lock, so a slow scraper
// never holds the loop longer than one copy of a slice header.
type Exporter struct {
	opt   Options
	reg   *prometheus.Registry
	mu    sync.Mutex
	last  metrics.Sample
	have  bool
	taken int64
	srv   *http.Server
	addr  string
}

// New returns an Exporter with its registry ready (Serve starts HTTP).
func New(o Options) *Exporter {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	e := &Exporter{opt: o, reg: prometheus.NewRegistry()}
	e.reg.MustRegister(e)
	return e
}

// Observe records smp as the latest sample. The pipeline calls it with every
// sample it spools, after the spool has it.
func (e *Exporter) Observe(smp metrics.Sample) {
	e.mu.Lock()
	e.last, e.have = smp, true
	e.taken++
	e.mu.Unlock()
}

// Describe sends nothing: the series depend on what the collectors found,
// so this is an unchecked collector (client_golang's term).
func (e *Exporter) Describe(chan<- *prometheus.Desc) {}

var (
	labelNames   = []string{"run_id", "node_id"}
	takenDesc    = prometheus.NewDesc("bridge_samples_taken_total", "Samples bridge has taken (and spooled) in this process.", labelNames, nil)
	seqDesc      = prometheus.NewDesc("bridge_sample_seq", "Sequence number of the latest sample: the MLflow step of the values exposed with it.", labelNames, nil)
	droppedDesc  = prometheus.NewDesc("bridge_samples_dropped_total", "Samples the spool dropped, oldest first, from its full memory buffer (a disk that fails or stalls; no spool file and the trackers behind).", labelNames, nil)
	sinkLabels   = append(append([]string(nil), labelNames...), "sink")
	sentDesc     = prometheus.NewDesc("bridge_sink_samples_sent_total", "Samples a tracker acknowledged.", sinkLabels, nil)
	pendingDesc  = prometheus.NewDesc("bridge_sink_samples_pending", "Samples in the spool a tracker has not acknowledged.", sinkLabels, nil)
	errorsDesc   = prometheus.NewDesc("bridge_sink_send_errors_total", "Failed sends to a tracker (each retry counts).", sinkLabels, nil)
	scrapeDesc   = prometheus.NewDesc("bridge_scrape_failures_total", "Failed reads of a --scrape URL (errors and timeouts).", append(append([]string(nil), labelNames...), "url"), nil)
	lastSendDesc = prometheus.NewDesc("bridge_sink_last_success_timestamp_seconds", "Unix time of the last successful send to a tracker.", sinkLabels, nil)
	// As node_exporter's node_scrape_collector_duration_seconds and
	// node_scrape_collector_success.
	collectorLabels  = append(append([]string(nil), labelNames...), "collector")
	collectorDurDesc = prometheus.NewDesc("bridge_collector_duration_seconds", "Duration of a collector's last run in the sampling loop (for one that did not answer in time, how long it had run by then).", collectorLabels, nil)
	collectorOKDesc  = prometheus.NewDesc("bridge_collector_success", "Whether a collector's last run succeeded (1) or failed (0): an error, a panic, no answer within --collect-timeout.", collectorLabels, nil)
	collectorErrDesc = prometheus.NewDesc("bridge_collector_failures_total", "Failed runs of a collector.", collectorLabels, nil)
	collectorRefDesc = prometheus.NewDesc("bridge_collector_values_refused_total", "Values a collector gave that were left out of the samples: not finite, out of their series' range, or above their total.", collectorLabels, nil)
)

// Collect exposes the latest sample's points, stamped with the sample's
// time so that Prometheus stores each value at the instant it was measured
// (the timestamp the trackers record), and bridge's health.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	e.mu.Lock()
	smp, have, taken := e.last, e.have, e.taken
	e.mu.Unlock()
	runID := ""
	if e.opt.RunID != nil {
		runID = e.opt.RunID()
	}
	lv := []string{runID, e.opt.NodeID}
	ch <- prometheus.MustNewConstMetric(takenDesc, prometheus.CounterValue, float64(taken), lv...)
	if e.opt.Health != nil {
		h := e.opt.Health()
		ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(h.Dropped), lv...)
		for _, c := range h.Collectors {
			if c.Runs == 0 {
				continue // not run yet: neither a success nor a failure
			}
			cv := append(append([]string(nil), lv...), c.Collector)
			ok := 0.0
			if c.OK {
				ok = 1
			}
			ch <- prometheus.MustNewConstMetric(collectorDurDesc, prometheus.GaugeValue, c.Duration.Seconds(), cv...)
			ch <- prometheus.MustNewConstMetric(collectorOKDesc, prometheus.GaugeValue, ok, cv...)
			ch <- prometheus.MustNewConstMetric(collectorErrDesc, prometheus.CounterValue, float64(c.Failures), cv...)
			ch <- prometheus.MustNewConstMetric(collectorRefDesc, prometheus.CounterValue, float64(c.Refused), cv...)
		}
		for u, n := range h.Scrapes {
			ch <- prometheus.MustNewConstMetric(scrapeDesc, prometheus.CounterValue, float64(n), append(append([]string(nil), lv...), u)...)
		}
		for _, s := range h.Sinks {
			sv := append(append([]string(nil), lv...), s.Name)
			ch <- prometheus.MustNewConstMetric(sentDesc, prometheus.CounterValue, float64(s.Sent), sv...)
			ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(s.Pending), sv...)
			ch <- prometheus.MustNewConstMetric(errorsDesc, prometheus.CounterValue, float64(s.Errors), sv...)
			if !s.LastSend.IsZero() {
				ch <- prometheus.MustNewConstMetric(lastSendDesc, prometheus.GaugeValue, float64(s.LastSend.UnixMilli())/1e3, sv...)
			}
		}
	}
	if !have {
		return
	}
	ch <- prometheus.NewMetricWithTimestamp(smp.Time, prometheus.MustNewConstMetric(seqDesc, prometheus.GaugeValue, float64(smp.Seq), lv...))
	seen := map[string]bool{}
	for _, p := range smp.Points {
		d := p.Desc
		if d == nil || seen[d.Name] {
			continue // a point known by name only is not one a collector made
		}
		name := d.PromName()
		if !validName(name) {
			continue
		}
		seen[d.Name] = true
		names, values := labelNames, lv
		if d.Of != nil && d.Of.PerGPU { // a per-GPU series: its GPU (and MIG slice) as labels
			names, values = append(slices.Clone(names), "gpu"), append(slices.Clone(values), strconv.Itoa(d.GPU))
			if d.MIG >= 0 {
				names, values = append(names, "mig"), append(values, strconv.Itoa(d.MIG))
			}
		}
		if len(d.Labels) > 0 { // a per-instance series: its device's labels
			names, values = slices.Clone(names), slices.Clone(values)
			for i := 0; i+1 < len(d.Labels); i += 2 {
				names, values = append(names, d.Labels[i]), append(values, d.Labels[i+1])
			}
		}
		vt := prometheus.GaugeValue
		if d.Kind == metrics.Counter {
			vt = prometheus.CounterValue
		}
		m, err := prometheus.NewConstMetric(prometheus.NewDesc(name, d.Help, names, nil), vt, d.Unit.Base(p.Value), values...)
		if err != nil {
			e.opt.Log.Debug("point not exposed", "name", d.Name, "err", err)
			continue
		}
		ch <- prometheus.NewMetricWithTimestamp(smp.Time, m)
	}
}

// validName reports whether n is a legacy Prometheus metric name, which
// every exposition format and PromQL take unquoted.
func validName(n string) bool {
	for i, r := range n {
		ok := r == '_' || r == ':' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return false
		}
	}
	return n != ""
}

// Handler serves the registry in the format the scraper asks for.
func (e *Exporter) Handler() http.Handler {
	return promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(e.opt.Log.Handler(), slog.LevelWarn),
		// One bad series must not blank the whole page.
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// Serve listens on addr (config.Config.MetricsAddr: a bare port is already 127.0.0.1:PORT) and serves /metrics until Close.
func (e *Exporter) Serve(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", e.Handler())
	e.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	e.addr = ln.Addr().String()
	go func() {
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.opt.Log.Warn("metrics endpoint stopped", "addr", e.addr, "err", err)
		}
	}()
	e.opt.Log.Info("serving Prometheus metrics", "url", "http://"+e.addr+"/metrics")
	return nil
}

// Addr is the address Serve listens on ("" before Serve).
func (e *Exporter) Addr() string { return e.addr }

// Close stops serving, letting a scrape in progress finish (up to 5 s).
func (e *Exporter) Close() error {
	if e.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return e.srv.Shutdown(ctx)
}
