package pipeline

import "github.com/bridge-dev/bridge/promexport"

// serveMetrics starts /metrics when --metrics-addr is set. An address that
// cannot be bound is logged, not fatal: observability must not stop a job.
func (s *Session) serveMetrics() {
	if s.set.MetricsAddr == "" {
		return
	}
	e := promexport.New(promexport.Options{RunID: s.runID, NodeID: s.set.NodeID, Health: s.health, Log: s.log})
	if err := e.Serve(s.set.MetricsAddr); err != nil {
		s.log.Error("metrics endpoint is off", "err", err)
		return
	}
	s.prom = e
}

// MetricsAddr is the address /metrics is served on, "" when it is off:
// the port the system chose for a --metrics-addr of port 0.
func (s *Session) MetricsAddr() string {
	if s.prom == nil {
		return ""
	}
	return s.prom.Addr()
}

// runID is the run_id label of /metrics: the first tracker's run now (a
// tracker that started late has one only once it answered). It runs on the
// HTTP server's goroutine, as health does.
func (s *Session) runID() string {
	for _, r := range s.sinks {
		if id := r.run(); id != "" {
			return id
		}
	}
	return ""
}

// health is bridge's own state for /metrics; it runs on the HTTP server's
// goroutine, so it reads only what is safe beside the pipeline. Every run
// is read through run(): a tracker that started late writes to a run its
// SinkRun.RunID does not hold.
func (s *Session) health() promexport.Health {
	h := promexport.Health{Dropped: int(s.spool.Stats().LostUnwritten)}
	for _, r := range s.sinks {
		_, sent, _ := r.fwd.Status()
		errs, last := r.fwd.Counters()
		h.Sinks = append(h.Sinks, promexport.SinkHealth{
			Name: r.Sink.Name(), Sent: sent, Pending: s.spool.PendingCount(r.Sink.Name(), r.run()),
			Errors: errs, LastSend: last,
		})
	}
	if s.sources != nil {
		h.Scrapes = s.sources.ScrapeFailures()
	}
	h.Collectors = s.sampler.Health()
	return h
}
