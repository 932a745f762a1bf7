// Package pipeline is bridge's data path, shared by its commands:
//
//	collectors -> Sampler -> bounded queue -> spool writer -> spool file
//	                                            spool -> forwarder -> sink (one per tracker)
//
// Collectors (collectors.go) is the one list of collectors, each its
// package's metrics.Registration, and Trackers (trackers.go) the one list
// of trackers: --scopes, --trackers and the collectors' own options come
// from them (Choices). Sources (sources.go)
// are the collectors a job runs and what the rest of bridge needs from
// them; StartSinksWith (start.go) starts the trackers' runs before the
// child does;
// Session (session.go) runs sampling, spooling and forwarding, and reports
// where the samples went. See docs/architecture.md.
package pipeline
