package pipeline

import "github.com/bridge-dev/bridge/promexport"

// serveMetrics starts /metrics when --metrics-addr is set. An address that
// cannot be bound is logged, not fatal: observability must not stop a job.
func (s *Session) serveMetrics() {
	if s.set.MetricsAddr == "" {
		return
	}
	runID := ""
	for _, r := range s.sinks {
		if r.RunID != "" {
			runID = r.RunID
			break
		}
	}
	e := promexport.New(promexport.Options{RunID: runID, NodeID: s.set.NodeID, Health: s.health, Log: s.log})
	if err := e.Serve(s.set.MetricsAddr); err != nil {
		s.log.Error("metrics endpoint is off", "err", err)
		return
	}
	s.prom = e
}

// health is bridge's own state for /metrics; it runs on the HTTP server's
// goroutine, so it reads only what is safe beside the pipeline.
func (s *Session) health() promexport.Health {
	h := promexport.Health{QueueDepth: len(s.queue), Dropped: int(s.dropped.Load())}
	for _, r := range s.sinks {
		_, _, sent := r.fwd.Status()
		errs, last := r.fwd.Counters()
		h.Sinks = append(h.Sinks, promexport.SinkHealth{
			Name: r.Sink.Name(), Sent: sent, Pending: s.spool.PendingCount(r.Sink.Name(), r.RunID),
			Errors: errs, LastSend: last,
		})
	}
	if s.sources != nil {
		h.Scrapes = s.sources.ScrapeFailures()
	}
	return h
}
