// Package pipeline is bridge's data path, shared by its commands:
//
//	collectors -> Sampler -> bounded queue -> spool writer -> spool file
//	                                            spool -> forwarder -> sink (one per tracker)
//
// Sources (sources.go) is the one list of collectors and what the rest of
// bridge needs from them; Trackers (trackers.go) is the one list of
// trackers; StartSinksWith (start.go) starts their runs before the child does;
// Session (session.go) runs sampling, spooling and forwarding, and reports
// where the samples went. See docs/architecture.md.
package pipeline
