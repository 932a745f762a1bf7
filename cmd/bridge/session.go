package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
)

// session is one job's sampling: collectors -> bounded queue -> spool ->
// forwarders -> sinks. Sampling never waits on the network: the only thing
// between a sample and the disk is a bounded channel.
type session struct {
	cfg     config.Config
	log     *slog.Logger
	src     *sources
	sampler *metrics.Sampler
	spool   *spool.Spool
	sinks   []sinkRun
	acc     *summary.Accumulator

	queue   chan metrics.Sample
	stopS   chan struct{} // closes the sampling loop
	doneS   chan struct{} // the sampling loop has returned
	doneW   chan struct{} // the spool writer has returned
	dropped int
	running bool // run was called

	failedStarts []summary.Row // sinks that could not start, for the table

	fwdCancel context.CancelFunc
	fwdWG     sync.WaitGroup
}

// sinkRun is a started sink and its forwarder.
type sinkRun struct {
	sink  tracker.Sink
	runID string
	late  *tracker.StartInfo // Start failed for now: the forwarder retries it
	fwd   *tracker.Forwarder
}

// defaultStartTimeout bounds how long the child waits for the trackers
// before it starts (a tracker that answers later still gets the samples,
// in a run created then).
const defaultStartTimeout = 5 * time.Second

// startSinks starts every sink (finding or creating its run) and returns the
// environment the child needs; the child waits at most timeout for each. A
// sink that refuses (a permanent error, an invalid answer) is dropped with a
// clear message; its samples stay in the spool. With late, a sink that could
// not reach its tracker in time is kept, and its forwarder starts it in the
// background; without (bridge sync), it is dropped too.
func startSinks(ctx context.Context, sinks []tracker.Sink, info tracker.StartInfo, timeout time.Duration, late bool, log *slog.Logger) ([]sinkRun, []string, []summary.Row) {
	var runs []sinkRun
	var env []string
	var failed []summary.Row
	for _, s := range sinks {
		e, err := startWithin(ctx, s, info, timeout)
		if verr := tracker.ValidEnv(e); verr != nil {
			// What a tracker returns never keeps the child from starting.
			e, err = nil, tracker.Permanent(verr)
		}
		// Variables the child can use even when the tracker failed (a
		// generated W&B run id) go along.
		env = append(env, e...)
		id := s.RunID()
		switch {
		case err == nil:
		case errors.Is(err, tracker.ErrPermanent) || (id == "" && !late):
			log.Error("tracker refused or unreachable at start; nothing is sent to it, samples stay in the spool (upload later with `bridge sync`)",
				"tracker", s.Name(), "err", err)
			failed = append(failed, summary.Row{What: s.Name(), Value: "not used: " + err.Error()})
			continue
		case id == "":
			log.Warn("tracker not reachable at start; the job starts without its run, bridge keeps trying in the background and sends the spooled samples to the run it creates then",
				"tracker", s.Name(), "waited", timeout, "err", err)
			li := info
			runs = append(runs, sinkRun{sink: s, late: &li})
			continue
		default:
			// The run is known (given, or generated for the child): keep
			// the sink, and let the forwarder retry until the tracker is up.
			log.Warn("tracker not reachable at start; samples are spooled and sent when it is",
				"tracker", s.Name(), "run", id, "err", err)
		}
		runs = append(runs, sinkRun{sink: s, runID: id})
	}
	return runs, env, failed
}

// startWithin calls s.Start until it succeeds, fails for good, or timeout
// (which the child waits on) has passed: a tracker that blinks for a second
// still gives the child its run.
func startWithin(ctx context.Context, s tracker.Sink, info tracker.StartInfo, timeout time.Duration) ([]string, error) {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	gap := 250 * time.Millisecond
	for {
		e, err := s.Start(sctx, info)
		if err == nil || errors.Is(err, tracker.ErrPermanent) || s.RunID() != "" {
			return e, err
		}
		t := time.NewTimer(gap)
		select {
		case <-sctx.Done():
			t.Stop()
			return e, err
		case <-t.C:
		}
		gap = min(2*gap, 2*time.Second)
	}
}

// spoolPath is the configured path or a default in the working directory
// named after the run, so that a restarted bridge with the same run id finds
// what its predecessor left.
func spoolPath(cfg config.Config, runs []sinkRun, now time.Time) string {
	if cfg.Spool != "" {
		return cfg.Spool
	}
	for _, r := range runs {
		if r.runID != "" {
			return "bridge-spool-" + safeName(r.runID) + ".jsonl"
		}
	}
	return fmt.Sprintf("bridge-spool-%s-%d.jsonl", now.UTC().Format("20060102T150405"), os.Getpid())
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') {
			return r
		}
		return '_'
	}, s)
}

// openSession records the attempt in the spool (sp, or the default path
// when sp is nil) and starts forwarding to the started sinks.
func openSession(cfg config.Config, log *slog.Logger, src *sources, sp *spool.Spool, runs []sinkRun, failed []summary.Row, startTags map[string]string) (*session, error) {
	now := time.Now()
	if sp == nil {
		var err error
		if sp, err = spool.Open(spoolPath(cfg, runs, now)); err != nil {
			return nil, err
		}
	}
	s := &session{
		cfg: cfg, log: log, src: src, spool: sp, sinks: runs, failedStarts: failed, acc: summary.New(),
		sampler: metrics.NewSampler(src.collectors, cfg.CollectTimeout, log),
		queue:   make(chan metrics.Sample, cfg.QueueSize),
		stopS:   make(chan struct{}),
		doneS:   make(chan struct{}),
		doneW:   make(chan struct{}),
	}
	s.sampler.SetNextSeq(sp.NextSeq())
	ids := map[string]string{}
	for _, r := range runs {
		ids[r.sink.Name()] = r.runID
	}
	if err := sp.WriteStart(spool.Record{Time: now.UnixMilli(), PID: os.Getpid(), Version: version, Runs: ids, Info: startTags}); err != nil {
		sp.Close()
		return nil, err
	}
	abs, _ := filepath.Abs(sp.Path())
	log.Info("spooling samples", "path", abs)

	fctx, cancel := context.WithCancel(context.Background())
	s.fwdCancel = cancel
	for i := range s.sinks {
		r := &s.sinks[i]
		if err := sp.Track(r.sink.Name(), r.runID); err != nil {
			log.Warn("cannot re-read the spool; earlier unsent samples will not be resent", "err", err)
		}
		r.fwd = &tracker.Forwarder{Sink: r.sink, RunID: r.runID, Start: r.late, Queue: sp, Wake: sp.Notify(), Log: log}
		s.fwdWG.Add(1)
		go func() {
			defer s.fwdWG.Done()
			defer s.recoverGo("forwarder " + r.sink.Name())
			r.fwd.Run(fctx)
		}()
	}
	return s, nil
}

func (s *session) recoverGo(what string) {
	if p := recover(); p != nil {
		s.log.Error("internal error; the job goes on", "in", what, "panic", p, "stack", string(debug.Stack()))
	}
}

// run starts the sampling loop and the spool writer.
func (s *session) run() {
	s.running = true
	go s.writer()
	go s.loop()
}

func (s *session) loop() {
	defer close(s.doneS)
	defer s.recoverGo("sampling loop")
	fast := s.cfg.FastInterval > 0 && s.cfg.FastInterval < s.cfg.Interval && s.src.cgroup != nil
	for {
		smp := s.sampler.Sample(context.Background())
		s.enqueue(smp)
		next := smp.Time.Add(s.cfg.Interval)
		if fast && s.nearLimit(smp.Points) {
			next = smp.Time.Add(s.cfg.FastInterval)
		}
		// Between samples, a memory-only look every FastInterval (about
		// 0.5 ms, BenchmarkMemoryProbe): a working set that climbs toward the
		// limit gets the fast interval at once, not at the next regular
		// sample. Without a limit there is nothing to near.
		_, limited := smp.Value(summary.MemPercent)
		probe := fast && limited
		for {
			wait := time.Until(next)
			if probe {
				wait = min(wait, s.cfg.FastInterval)
			}
			t := time.NewTimer(max(wait, 0))
			select {
			case <-s.stopS:
				t.Stop()
				return
			case <-t.C:
			}
			if !time.Now().Before(next) {
				break
			}
			if pts, err := s.src.cgroup.MemoryPoints(context.Background()); err == nil && s.nearLimit(pts) {
				break
			}
		}
	}
}

// nearLimit reports whether the working set is above the fast-sampling
// threshold of the limit: near an OOM kill, samples are taken (and, through
// the spool's notification, sent) every FastInterval.
func (s *session) nearLimit(pts []metrics.Point) bool {
	for _, p := range pts {
		if p.Name == summary.MemPercent {
			return p.Value >= s.cfg.FastThreshold
		}
	}
	return false
}

func (s *session) enqueue(smp metrics.Sample) {
	select {
	case s.queue <- smp:
	default:
		// Only a stalled disk fills this queue; sampling must not block on it.
		s.dropped++
		s.log.Warn("spool writer is behind; sample dropped", "seq", smp.Seq, "dropped", s.dropped)
	}
}

// writer owns acc until it returns (doneW); readers wait for that.
func (s *session) writer() {
	defer close(s.doneW)
	defer s.recoverGo("spool writer")
	failed := false
	for smp := range s.queue {
		if err := s.spool.Append(smp); err != nil && !failed {
			failed = true
			s.log.Error("cannot write the spool; samples are sent without durability", "err", err)
		}
		s.acc.Add(smp)
	}
}

// stop ends sampling with one final sample (taken right after the child's
// exit, so OOM counters and the last working set are current), waits for the
// spool writer, then gives the forwarders up to FlushTimeout (or until abort
// is closed) to send what is left.
func (s *session) stop(abort <-chan struct{}) {
	if s.running {
		close(s.stopS)
		<-s.doneS
		s.enqueue(s.sampler.Sample(context.Background()))
		close(s.queue)
		<-s.doneW
	}
	// Forwarders send what is left, then return; the flush timeout (or a
	// second signal) is the hard stop.
	timer := time.AfterFunc(s.cfg.FlushTimeout, s.fwdCancel)
	defer timer.Stop()
	flushed := make(chan struct{})
	go func() {
		select {
		case <-abort: // nil: never
			s.fwdCancel()
		case <-flushed:
		}
	}()
	for _, r := range s.sinks {
		r.fwd.Finish()
	}
	s.fwdWG.Wait()
	close(flushed)
	s.fwdCancel()
	for _, r := range s.sinks {
		if n := s.spool.PendingCount(r.sink.Name(), r.fwd.CurrentRun()); n > 0 {
			s.log.Warn("tracker did not take every sample before bridge exits; they stay in the spool",
				"tracker", r.sink.Name(), "unsent", n, "spool", s.spool.Path(),
				"upload_with", "bridge sync "+s.spool.Path())
		}
	}
	s.sampler.Close()
}

// finish records the end on every sink and in the spool.
func (s *session) finish(end tracker.EndInfo) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, r := range s.sinks {
		func() {
			defer s.recoverGo("finish " + r.sink.Name())
			if st, _, _ := r.fwd.Status(); st == tracker.StateStopped || r.fwd.CurrentRun() == "" {
				return // refused, or never reached: no run to finish
			}
			if err := r.sink.Finish(ctx, end); err != nil {
				s.log.Warn("cannot record the end of the job on the tracker", "tracker", r.sink.Name(), "err", err)
			}
		}()
	}
	code := end.ExitCode
	if err := s.spool.WriteEnd(spool.Record{Time: end.Time.UnixMilli(), ExitCode: &code, Info: end.Tags}); err != nil {
		s.log.Warn("cannot write the end record to the spool", "err", err)
	}
	s.spool.Close()
}

// report writes the end-of-run table: what was measured, the caller's rows
// (exit status, forensics), then where the samples went.
func (s *session) report(w io.Writer, title string, extra ...summary.Row) {
	rows := append(s.acc.Rows(), extra...)
	summary.Write(w, title, append(rows, s.trackerRows()...))
}

// trackerRows says, per tracker, where the samples went.
func (s *session) trackerRows() []summary.Row {
	var rows []summary.Row
	if s.dropped > 0 {
		rows = append(rows, summary.Row{What: "samples dropped", Value: fmt.Sprintf("%d (the spool writer was behind: a stalled disk)", s.dropped)})
	}
	rows = append(rows, s.failedStarts...)
	if len(s.sinks) == 0 && len(s.failedStarts) == 0 {
		rows = append(rows, summary.Row{What: "tracker", Value: "none configured: samples are in " + s.spool.Path()})
	}
	for _, r := range s.sinks {
		st, err, sent := r.fwd.Status()
		run := r.fwd.CurrentRun()
		v := fmt.Sprintf("%s run %s: %d samples sent", st, run, sent)
		if run == "" {
			v = fmt.Sprintf("%s: never reached, no run created", st)
		} else if r.late != nil {
			v += " (run created after the job started)"
		}
		if n := s.spool.PendingCount(r.sink.Name(), run); n > 0 {
			v += fmt.Sprintf(", %d unsent (in %s; bridge sync uploads them)", n, s.spool.Path())
		}
		if err != nil && st != tracker.StateOK {
			v += ": " + err.Error()
		}
		rows = append(rows, summary.Row{What: r.sink.Name(), Value: v})
	}
	return rows
}

// startTags describe the job at start, for the run and the spool.
func startTags(cfg config.Config, src *sources) map[string]string {
	t := map[string]string{
		"bridge.version":  version,
		"bridge.hostname": hostname(),
	}
	if cfg.NodeID != "" {
		t["bridge.node_id"] = cfg.NodeID
	}
	if cfg.NoContainer {
		t["bridge.container_awareness"] = "off"
	}
	if c := src.cgroup; c != nil {
		info := c.Info()
		t["bridge.cgroup.version"] = string(info.Version)
		var paths []string
		for k, v := range info.Paths {
			paths = append(paths, k+"="+v)
		}
		sort.Strings(paths)
		t["bridge.cgroup.path"] = strings.Join(paths, " ")
		if info.MemoryLimitBytes > 0 {
			t["bridge.memory_limit_megabytes"] = strconv.FormatFloat(metrics.MB(float64(info.MemoryLimitBytes)), 'f', 1, 64)
		} else {
			t["bridge.memory_limit_megabytes"] = "no limit"
		}
		t["bridge.memory_limit_set_by"] = info.MemoryLimitSetBy
		if info.CPULimitCores > 0 {
			t["bridge.cpu_limit_cores"] = strconv.FormatFloat(info.CPULimitCores, 'f', 2, 64)
		} else {
			t["bridge.cpu_limit_cores"] = "no limit"
		}
		t["bridge.cpu_limit_set_by"] = info.CPULimitSetBy
	}
	if src.gpu != nil {
		for k, v := range src.gpu.Tags() {
			t[k] = v
		}
	}
	return t
}
