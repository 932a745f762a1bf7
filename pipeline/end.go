package pipeline

import (
	"context"
	"maps"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/whyslow"
)

// The end of the run: the last sample, the forwarders' last sends and the
// end recorded on every tracker and in the spool, all within one deadline.

// EndBy sets when Stop and Finish must be over together: the child's exit
// plus the flush timeout, so that the whole wait after the child exits is at
// most the flush timeout. Without it, Stop counts FlushTimeout from its call.
func (s *Session) EndBy(deadline time.Time) { s.deadline = deadline }

// unreachedGrace is all the end of the run waits for a tracker that never
// answered during the job (connection refused, a wrong address): one more
// try, then its samples stay in the spool for `bridge sync`. A tracker that
// answered and then went away gets the whole flush timeout.
const unreachedGrace = 2 * time.Second

// finishReserve is the part of the end-of-run time kept for recording the
// end on the trackers, so that a slow drain cannot leave a run RUNNING.
func finishReserve(left time.Duration) time.Duration { return min(left/5, 5*time.Second) }

// Stop ends sampling with one final sample (taken right after the child's
// exit, so OOM counters and the last working set are current), then gives
// the forwarders until the deadline (see EndBy) less a reserve for Finish,
// or until abort is closed, to send what is left.
func (s *Session) Stop(abort <-chan struct{}) {
	if s.stopped {
		return
	}
	s.stopped = true
	if s.deadline.IsZero() {
		s.deadline = time.Now().Add(s.set.FlushTimeout)
	}
	s.aborted, s.unwatchAbort = abortContext(abort)
	s.stopTick(s.deadline)
	if s.running {
		close(s.stopS)
		<-s.doneS
		ctx, cancel := context.WithDeadline(context.Background(), s.deadline)
		s.take(s.sampler.Sample(ctx), true)
		cancel()
	}
	// Forwarders send what is left, then return; the deadline (or a second
	// signal) is the hard stop.
	drainUntil := s.deadline.Add(-finishReserve(time.Until(s.deadline)))
	// They take the last samples once the file has them (a tracker is not
	// offered a sample before), or from memory if the disk stalls.
	wctx, wcancel := context.WithDeadline(s.aborted, drainUntil)
	if err := s.spool.Written(wctx); err != nil {
		s.log.Warn("the spool's disk does not answer; the trackers get the last samples from memory", "err", err)
	}
	wcancel()
	s.drain(drainUntil)
	s.fwdCancel()
	for _, r := range s.sinks {
		if n := s.spool.PendingCount(r.Sink.Name(), r.run()); n > 0 {
			s.log.Warn("tracker did not take every sample before bridge exits; "+s.Unsent(),
				"tracker", r.Sink.Name(), "unsent", n)
		}
	}
	s.sampler.Close()
}

// Finish records the end on every sink (by the deadline of EndBy or Stop, or
// until Stop's abort is closed) and in the spool, and closes the spool. The
// job's energy tags and figures (summary.FigurePoints) come from what was
// measured, unless end has them. It stops the session first if Stop was not
// called: a sink's Finish never runs beside its Send.
func (s *Session) Finish(end tracker.EndInfo) {
	s.Stop(nil)
	defer s.unwatchAbort()
	// Within the same deadline as Stop, and cut short by the same abort.
	ctx, cancel := context.WithDeadline(s.aborted, s.deadline)
	defer cancel()
	// The job's energy, from every sample taken (Stop took the last one).
	end.Tags = maps.Clone(end.Tags)
	if end.Tags == nil {
		end.Tags = map[string]string{}
	}
	for k, v := range s.acc.EnergyTags() {
		if _, set := end.Tags[k]; !set {
			end.Tags[k] = v
		}
	}
	// The node's bottleneck verdict over the job (its tag is scoped to the
	// node by a multi-node job's sink, as every bridge.* tag).
	if r, ok := s.Bottleneck(); ok {
		if _, set := end.Tags[whyslow.Tag]; !set {
			end.Tags[whyslow.Tag] = r.Text()
		}
	}
	s.adviseEnd(end)
	if end.Figures == nil {
		end.Figures = s.acc.FigurePoints()
	}
	info := maps.Clone(end.Tags)
	s.ends = make([]string, len(s.sinks))
	for i, r := range s.sinks {
		if s.ends[i] = s.finishSink(ctx, r, end); s.ends[i] == endRecorded {
			// So that `bridge sync` leaves a delivered run it ended alone.
			info[EndRecordedTag(r.Sink.Name())] = r.run()
		}
	}
	// Once the end is recorded: the run's note, the energy per step.
	s.endTick(ctx, end.Tags, tracker.TerminalStatus(end))
	if err := s.spool.WriteEnd(EndRecord(end, info)); err != nil {
		s.log.Warn("cannot write the end record to the spool", "err", err)
	}
	sctx, scancel := s.spoolContext()
	defer scancel()
	s.closeSpool(sctx)
	if s.prom != nil {
		if err := s.prom.Close(); err != nil {
			s.log.Warn("cannot stop the metrics endpoint cleanly", "err", err)
		}
	}
}

// finishSink records the end on r's run within ctx and says, for the
// table, what became of it: endRecorded, or why not and what records it
// ("" when there is no run to record it on).
func (s *Session) finishSink(ctx context.Context, r SinkRun, end tracker.EndInfo) (row string) {
	row = "not recorded: bridge failed while recording it; " + s.endLeft()
	defer s.recoverGo("finish " + r.Sink.Name())
	switch st, _, _ := r.fwd.Status(); {
	case r.run() == "":
		return "" // no run to record it on
	case st == tracker.StateStopped:
		return "not recorded: the tracker refused bridge's requests (its error is above); " + s.endLeft()
	case st == tracker.StateRunEnded:
		return "left as its owner ended it: bridge writes nothing into a run after its owner's end"
	case !forwarded(r):
		return "not recorded: its forwarder was stuck reading the spool (a stalled disk); " + s.endLeft()
	}
	if !r.reached() {
		s.log.Warn("the tracker was never reached during the job; the end of the job is left for `bridge sync`: "+SyncCommand(s.spool.Path()),
			"tracker", r.Sink.Name(), "run", r.run())
		return "not recorded: the tracker was never reached; " + s.endLeft()
	}
	if ctx.Err() != nil {
		s.log.Warn("no time left of --flush-timeout to record the end of the job on the tracker; it is left for `bridge sync`",
			"tracker", r.Sink.Name(), "spool", s.spool.Path())
		return "not recorded: no time was left of --flush-timeout; " + s.endLeft()
	}
	if err := r.Sink.Finish(ctx, end); err != nil {
		// The sink retried each request within the deadline
		// (tracker.Writes): err says how often, for how long, and the last
		// answer. One line in the table: a sink may join several errors.
		s.log.Warn("cannot record the end of the job on the tracker; it is left for `bridge sync`", "tracker", r.Sink.Name(), "err", err)
		return "not recorded (" + strings.ReplaceAll(err.Error(), "\n", "; ") + "); " + s.endLeft()
	}
	return endRecorded
}

// Time the spool's last write and fsync get at the end of the run, at
// least, when the trackers used up the deadline; and after a second signal
// (enough for a disk that answers, not for one that stalled).
const (
	spoolCloseMin   = time.Second
	spoolCloseAbort = 100 * time.Millisecond
)

// spoolContext bounds closing the spool: the deadline (at least
// spoolCloseMin from now), or spoolCloseAbort after abort.
func (s *Session) spoolContext() (context.Context, context.CancelFunc) {
	// Not derived from aborted: an abort leaves the spool its short while.
	ctx, cancel := context.WithDeadline(context.Background(), later(s.deadline, time.Now().Add(spoolCloseMin)))
	unwatch := context.AfterFunc(s.aborted, func() {
		t := time.AfterFunc(spoolCloseAbort, cancel)
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	return ctx, func() { unwatch(); cancel() }
}

// abortContext is cancelled when abort closes (a nil abort: never), or by
// its cancel, which also ends the watch.
func abortContext(abort <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	if abort != nil {
		go func() {
			select {
			case <-abort:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
