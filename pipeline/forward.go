package pipeline

import (
	"context"
	"time"

	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/tracker"
)

// The forwarders' lifecycle: one a sink, reading what the spool holds and
// the sink has not acknowledged, from Open until the end of the run.

// startForwarders starts a forwarder for each sink, on the spool's
// samples of its run.
func (s *Session) startForwarders() {
	fctx, cancel := context.WithCancel(context.Background())
	s.fwdCancel = cancel
	for i := range s.sinks {
		r := &s.sinks[i]
		if err := s.spool.Track(r.Sink.Name(), r.RunID); err != nil {
			s.log.Warn("cannot re-read the spool; earlier unsent samples will not be resent", "err", err)
		}
		r.fwd = &tracker.Forwarder{Sink: r.Sink, RunID: r.RunID, Start: r.Late, Queue: s.spool, Wake: s.spool.Notify(), Log: s.log,
			OnRunEnded: s.runEnded, Gather: tracker.DefaultGather}
		if r.Late != nil {
			r.fwd.OnLateStart = s.recordLateRun(r.Sink)
		}
		r.done = make(chan struct{})
		rctx, rcancel := context.WithCancel(fctx)
		r.cancel = rcancel
		go func() {
			defer close(r.done)
			defer s.recoverGo("forwarder " + r.Sink.Name())
			r.fwd.Run(rctx)
		}()
	}
}

// firstSeq is the first sample's seq: after the spool's last, and after
// the last step of this node's series on a run a tracker joined
// (tracker.RunInfo.NextStep: a restarted attempt whose spool is gone, a
// run given to bridge), so that the node's steps never start again at 0
// under the same keys.
func (s *Session) firstSeq(spooled int64) int64 {
	next := spooled
	for _, r := range s.sinks {
		if step := r.Sink.Run().NextStep; r.RunID != "" && step > next {
			next = step
			s.log.Info("continuing this node's steps after the last the run holds", "tracker", r.Sink.Name(), "run", r.RunID, "first_step", next)
		}
	}
	return next
}

// runEnded is the forwarders' OnRunEnded.
func (s *Session) runEnded() { s.endedOnce.Do(func() { close(s.ended) }) }

// RunEnded is closed once a tracker reports that its run was ended by its
// owner (tracker.ErrRunEnded): `bridge attach` stops then.
func (s *Session) RunEnded() <-chan struct{} { return s.ended }

// recordLateRun returns what records in the spool the run a late start of
// sink created, so that a restarted bridge or `bridge sync` finds it. A
// run it joined that holds this node's series raises the next sample's
// seq after them (the samples taken before it was found keep theirs).
func (s *Session) recordLateRun(sink tracker.Sink) func(run string) {
	return func(run string) {
		ri := sink.Run()
		for ri.NextStep > 0 {
			cur := s.seqFloor.Load()
			if ri.NextStep <= cur || s.seqFloor.CompareAndSwap(cur, ri.NextStep) {
				break
			}
		}
		rec := spool.Record{Time: time.Now().UnixMilli(), Sink: sink.Name(), Run: run, Info: RunRecordInfo(sink, ri.Created)}
		if err := s.spool.WriteRun(rec); err != nil {
			s.log.Error("cannot record the tracker's run in the spool; a restart or `bridge sync` would not find it", "tracker", sink.Name(), "run", run, "err", err)
		}
	}
}

// RunRecordInfo is the info of a spool run record for sink's run: where
// the run is (tracker.RunInfo.Place) and whether bridge created it (so that a
// restart or `bridge sync` may end it).
func RunRecordInfo(sink tracker.Sink, created bool) map[string]string {
	var info map[string]string
	if created {
		info = map[string]string{CreatedTag(sink.Name()): "true"}
	}
	return withPlace(info, sink)
}

// withPlace adds where sink's run is (tracker.RunInfo.Place) to info,
// which it returns (a new map when info is nil and there is something to
// add).
func withPlace(info map[string]string, sink tracker.Sink) map[string]string {
	for k, v := range sink.Run().Place {
		if info == nil {
			info = map[string]string{}
		}
		info[k] = v
	}
	return info
}

// drain gives the forwarders until drainUntil, or until the end is
// aborted, to send what is left, then cancels them: a tracker that never
// answered during the job gets unreachedGrace only.
func (s *Session) drain(drainUntil time.Time) {
	timer := time.AfterFunc(time.Until(drainUntil), s.fwdCancel)
	defer timer.Stop()
	unwatch := context.AfterFunc(s.aborted, s.fwdCancel)
	defer unwatch()
	for _, r := range s.sinks {
		r.fwd.Finish()
		// Looked at when the grace is over: a tracker that answers during
		// it keeps its flush.
		t := time.AfterFunc(unreachedGrace, func() {
			if !r.reached() {
				r.cancel()
			}
		})
		defer t.Stop()
	}
	s.waitForwarders(s.aborted.Done())
}

// waitForwarders waits for the forwarders to return, until the deadline or
// abort: cancelled, they return at once unless one is stuck reading the
// spool from a disk that stalled. Such a one is left behind (its sink is
// not finished: that would run beside its Send).
func (s *Session) waitForwarders(abort <-chan struct{}) {
	t := time.NewTimer(time.Until(s.deadline))
	defer t.Stop()
	for _, r := range s.sinks {
		select {
		case <-r.done:
			continue
		case <-t.C:
		case <-abort:
		}
		s.log.Warn("a tracker's forwarder is stuck reading the spool (a stalled disk); bridge does not wait for it",
			"tracker", r.Sink.Name(), "spool", s.spool.Path())
		return
	}
}

// forwarded reports whether r's forwarder has returned.
func forwarded(r SinkRun) bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}
