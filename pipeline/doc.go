// Package pipeline is bridge's data path, shared by its commands:
//
//	collectors -> Sampler -> sampling loop -> spool (the one buffer) -> spool file
//	                                       -> /metrics, end-of-run table
//	                         spool -> forwarder -> sink (one per tracker)
//
// Collectors (collectors.go) is the one list of collectors, each its
// package's metrics.Registration, and Trackers (trackers.go) the one list
// of trackers: --scopes, --trackers and the collectors' own options come
// from them (Choices). Sources (sources.go)
// are the collectors a job runs and what the rest of bridge needs from
// them; StartSinksWith (start.go) starts the trackers' runs before the
// child does;
// Session (session.go) runs sampling (loop.go), spooling and forwarding
// (forward.go), ends them within the run's deadline (end.go), and reports
// where the samples went (table.go). See docs/architecture.md.
package pipeline
