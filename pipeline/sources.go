package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/summary"
)

// Sources are the collectors a job runs (built from the registrations,
// Collectors), and what the rest of bridge asks of them, through the
// interfaces they offer (metrics/offer.go): the memory probe, the start
// tags and the memory high-water mark before the job, the series they
// never add here, the GPU errors for forensics, the scrape failures, and
// the child's pid.
type Sources struct {
	// Collectors are what the sampler runs, in order.
	Collectors []metrics.Collector
	// Notes say why a collector is off, for `bridge sample`.
	Notes map[string]any

	log      *slog.Logger
	roots    metrics.Roots
	childPID atomic.Int64      // the process collector's root
	adopter  atomic.Int64      // bridge's pid while it supervises the child: orphans it adopts count too
	series   []*metrics.Desc   // what the built collectors may add, in the scopes that are on
	offTags  map[string]string // the run tags of the collectors that are off (metrics.Off)

	// What the built collectors offer, in their order.
	taggers  []metrics.Tagger
	starters []metrics.StartTagger
	peak     metrics.PeakKeeper // the first collector's that keeps the memory high-water mark; nil: none
	memory   MemoryProbe        // the first collector's that offers one; nil: none
	partial  []partial
	xids     []metrics.XidReporter
	procs    metrics.ProcessLister // the first collector's that walks the child's tree; nil: none
	failures []metrics.FailureCounter
	// peakStart is the memory high-water mark before the job (StartTags);
	// nil: not read.
	peakStart *summary.PeakStart
}

// partial is a collector that never adds some of its series here, and the
// scopes it serves that are on, which name its row of the end-of-run table.
type partial struct {
	metrics.Partial
	scopes []string
}

// BuildSources creates the collectors of Collectors the configuration asks
// for (BuildSourcesOf).
func BuildSources(cfg config.Config, log *slog.Logger) (*Sources, error) {
	return BuildSourcesOf(Collectors(), cfg, log)
}

// BuildSourcesOf creates the collectors of regs the configuration asks for
// (cfg loaded with ChoicesOf(regs, ...)), in order. One that is off here is left
// out with a note; an error is a usage error that names its flag (a
// malformed --gpus entry, a --proc-root the GPU collector's process finder
// cannot read). Each Build runs under the collect timeout (build): one
// that has not answered by then is left out with one WARN, and the job
// goes on without it.
func BuildSourcesOf(regs []metrics.Registration, cfg config.Config, log *slog.Logger) (*Sources, error) {
	s := &Sources{Notes: map[string]any{}, log: log, offTags: map[string]string{},
		roots: metrics.Roots{Proc: cfg.ProcRoot, Cgroup: cfg.CgroupRoot, Sys: cfg.SysRoot, Rootfs: cfg.Rootfs}}
	// The cgroup layout and the child's process tree, made once for the
	// collectors that share them.
	shared := &metrics.Shared{}
	// With every scope on, nothing is left to filter out.
	all := len(cfg.Scopes) >= len(ScopesOf(regs))
	var built []metrics.Collector
	for _, reg := range regs {
		var on []metrics.Scope
		for _, sc := range reg.Scopes {
			if cfg.HasScope(string(sc)) {
				on = append(on, sc)
			}
		}
		if len(reg.Scopes) > 0 && len(on) == 0 {
			continue
		}
		c, err := build(reg, metrics.Env{
			Roots: s.roots, CollectTimeout: cfg.CollectTimeout, Scopes: on, Options: cfg.Options,
			LookupEnv: os.LookupEnv, Job: job{s}, Shared: shared, Built: slices.Clone(built), Log: log.With("collector", reg.Name),
		}, buildTimeout(cfg))
		var off *metrics.Off
		switch {
		case errors.Is(err, kfile.ErrNoAnswer):
			log.Warn("collector's setup did not answer within the collect timeout (a read that hangs: a wedged driver, a hung mount); the job runs without it",
				"collector", reg.Name, "timeout", buildTimeout(cfg))
			s.Notes[reg.Name] = fmt.Sprintf("off: its setup did not answer within the collect timeout (%s)", buildTimeout(cfg))
			continue
		case errors.As(err, &off):
			log.Log(context.Background(), off.Level, "collector is off", "collector", reg.Name, "why", off.Why)
			s.Notes[reg.Name] = off.Why
			maps.Copy(s.offTags, off.Tags)
			continue
		case err != nil:
			return nil, err
		case c == nil:
			continue
		}
		built = append(built, c)
		s.offers(c, on)
		if len(reg.Scopes) > 0 && !all {
			c = scopeFilter{Collector: c, keep: cfg.HasScope}
		}
		s.Collectors = append(s.Collectors, c)
		for _, d := range reg.Series {
			if len(reg.Scopes) == 0 || cfg.HasScope(string(d.Scope)) {
				s.series = append(s.series, d)
			}
		}
	}
	return s, nil
}

// offers keeps what collector c offers the rest of bridge; on are the
// scopes of its registration that are on.
func (s *Sources) offers(c metrics.Collector, on []metrics.Scope) {
	if t, ok := c.(metrics.Tagger); ok {
		s.taggers = append(s.taggers, t)
	}
	if t, ok := c.(metrics.StartTagger); ok {
		s.starters = append(s.starters, t)
	}
	if p, ok := c.(metrics.PeakKeeper); ok && s.peak == nil {
		s.peak = p
	}
	if m, ok := c.(MemoryProbe); ok && s.memory == nil {
		s.memory = m
	}
	if p, ok := c.(metrics.Partial); ok {
		var scopes []string
		for _, sc := range on {
			scopes = append(scopes, string(sc))
		}
		s.partial = append(s.partial, partial{p, scopes})
	}
	if x, ok := c.(metrics.XidReporter); ok {
		s.xids = append(s.xids, x)
	}
	if p, ok := c.(metrics.ProcessLister); ok && s.procs == nil {
		s.procs = p
	}
	if f, ok := c.(metrics.FailureCounter); ok {
		s.failures = append(s.failures, f)
	}
}

// build runs reg.Build on a goroutine of its own under timeout: a file
// it reads may hang in the kernel, where nothing can interrupt it. When
// the timeout passes first, build returns an error wrapping
// kfile.ErrNoAnswer at once, and the Build is left behind: its Context
// has ended (its later reads fail at once), values it shares are made
// safely beside the next Builds (metrics.Shared), and a collector it
// returns later is closed. A panic in Build leaves its collector out.
func build(reg metrics.Registration, env metrics.Env, timeout time.Duration) (metrics.Collector, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	env.Context = kfile.Bounded(ctx)
	log := env.Log
	return kfile.Call(ctx, func() (c metrics.Collector, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("internal error in the collector's setup; the job runs without it", "panic", p, "stack", string(debug.Stack()))
				c, err = nil, &metrics.Off{Why: fmt.Sprintf("off: internal error in its setup: %v", p), Level: slog.LevelDebug}
			}
		}()
		return reg.Build(env)
	}, func(c metrics.Collector) {
		if cl, ok := c.(metrics.Closer); ok {
			cl.Close()
		}
		log.Debug("collector's setup answered after the job went on without it; closed")
	})
}

// buildTimeout is a Build's deadline: the collect timeout.
func buildTimeout(cfg config.Config) time.Duration {
	if cfg.CollectTimeout > 0 {
		return cfg.CollectTimeout
	}
	return kfile.DefaultWait
}

// Summary is what the end-of-run table must know of the collectors: the
// series they produce, so that a peak no sample had reads "not sampled"
// (none they never add here: metrics.Partial), why they never add some,
// the file of the kernel's memory high-water mark, and the mark before the
// job (StartTags). It reads no file.
func (s *Sources) Summary() summary.Options {
	o := summary.Options{PeakStart: s.peakStart}
	skip := map[string]bool{}
	for _, p := range s.partial {
		series, why := p.Unproduced()
		for _, d := range series {
			skip[d.Name] = true
		}
		if why != "" {
			o.Notes = append(o.Notes, summary.Row{What: strings.Join(p.scopes, ", ") + " scope", Value: why})
		}
	}
	if s.peak != nil {
		o.PeakFile = s.peak.PeakFile()
	}
	for _, d := range s.series {
		if !skip[d.Name] {
			o.Expected = append(o.Expected, d)
		}
	}
	return o
}

// ScrapeFailures are the failed reads per source (a --scrape URL) of the
// collectors that count them; nil without one.
func (s *Sources) ScrapeFailures() map[string]int {
	var out map[string]int
	for _, f := range s.failures {
		for k, n := range f.Failures() {
			if out == nil {
				out = map[string]int{}
			}
			out[k] += n
		}
	}
	return out
}

// SetChild names the process tree the process_ and GPU collectors follow:
// the child's pid (0: none) and the pid that adopts its orphans (bridge as
// subreaper; 0: none). Safe to call while sampling runs.
func (s *Sources) SetChild(pid, adopter int) {
	s.childPID.Store(int64(pid))
	s.adopter.Store(int64(adopter))
}

// job is the child as the collectors see it (metrics.Job).
type job struct{ s *Sources }

func (j job) PID() int     { return int(j.s.childPID.Load()) }
func (j job) Adopter() int { return int(j.s.adopter.Load()) }

// Memory is the between-samples memory probe: the first collector's that
// offers one (the cgroup's working set and limit). Nil without one.
func (s *Sources) Memory() MemoryProbe { return s.memory }

// CgroupVersion is "v1", "v2" or "hybrid", "" without a cgroup collector
// (forensics): its tag, metrics.TagCgroupVersion. It reads no file: at the
// end of the run, a read that hangs must not hold up the child's exit
// status.
func (s *Sources) CgroupVersion() string { return s.tags()[metrics.TagCgroupVersion] }

// tags are the collectors' tags of what they found when built
// (metrics.Tagger).
func (s *Sources) tags() map[string]string {
	t := map[string]string{}
	for _, tg := range s.taggers {
		maps.Copy(t, tg.Tags())
	}
	return t
}

// started is what the collectors read at the job's start.
type started struct {
	tags map[string]string
	peak metrics.PeakStart
}

// readStart reads what the collectors read at the job's start (their start
// tags, the memory high-water mark before the job: metrics.StartTagger,
// metrics.PeakKeeper) on a goroutine of its own, and waits for it at most
// timeout: a limit file whose read hangs (a v1 memory.stat stalled in a
// flush) must not hold up the child's start. ok is false when it did not
// answer in time; the mark is then not known, and a descriptor reset
// later is closed unused (its mark would count from after the child's
// start). A mark read in time is handed to its collector, and kept for
// Summary.
func (s *Sources) readStart(timeout time.Duration) (tags map[string]string, ok bool) {
	if len(s.starters) == 0 && s.peak == nil {
		return nil, true
	}
	ch, gone := make(chan started), make(chan struct{})
	// The goroutine below is left behind at timeout: its reads run on it
	// (kfile.Bounded), each within what is left of timeout.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("internal error reading the collectors' values at the start (the cgroup's limits); the job goes on", "panic", p)
			}
		}()
		st := started{tags: map[string]string{}}
		if s.peak != nil {
			st.peak = s.peak.StartPeak(kfile.Bounded(ctx))
		}
		for _, t := range s.starters {
			maps.Copy(st.tags, t.StartTags(kfile.Bounded(ctx)))
		}
		select {
		case ch <- st:
		case <-gone:
			st.peak.Discard()
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case st := <-ch:
		if s.peak != nil {
			s.peak.UsePeak(st.peak)
		}
		if st.peak.Known {
			s.peakStart = &summary.PeakStart{MB: metrics.MB(float64(st.peak.Bytes)), Reset: st.peak.Reset}
		}
		if s.peak != nil {
			s.log.Debug("the memory high-water mark before the job", "file", st.peak.File, "known", st.peak.Known,
				"megabytes", metrics.MB(float64(st.peak.Bytes)), "reset_for_bridge", st.peak.Reset, "why_not", st.peak.Why)
		}
		return st.tags, true
	case <-t.C:
		close(gone)
		return nil, false
	}
}

// XidEvents are the GPU errors seen so far, nil without a collector that
// hears them (forensics).
func (s *Sources) XidEvents() []metrics.XidEvent {
	var out []metrics.XidEvent
	for _, x := range s.xids {
		out = append(out, x.XidEvents()...)
	}
	return out
}

// Processes are the child's processes in the last sample that found its
// tree (forensics: the process an OOM kill most likely took); empty
// without a collector that walks it.
func (s *Sources) Processes() metrics.ProcessList {
	if s.procs == nil {
		return metrics.ProcessList{}
	}
	return s.procs.LastProcesses()
}

// Detected is what `bridge sample` reports about the machine: each
// collector's findings, and why a missing scope is missing.
func (s *Sources) Detected(ctx context.Context, smp *metrics.Sampler) map[string]any {
	d := smp.Detect(ctx)
	for k, v := range s.Notes {
		if _, ok := d[k]; !ok {
			d[k] = v
		}
	}
	return d
}

// StartTags describe the job at start, for the run and the spool: bridge's,
// and the collectors' (metrics.Tagger, metrics.StartTagger, and those of
// a collector that is off: metrics.Off). It also reads the memory
// high-water mark before the job, for Summary: call it before the child
// starts.
func (s *Sources) StartTags(cfg config.Config, version string) map[string]string {
	t := map[string]string{
		"bridge.version":  version,
		"bridge.hostname": hostname(),
	}
	if cfg.NodeID != "" {
		t["bridge.node_id"] = cfg.NodeID
	}
	maps.Copy(t, s.offTags)
	if start, ok := s.readStart(cfg.CollectTimeout); !ok {
		s.log.Warn("reading the collectors' values at the start (the cgroup's limit files) did not answer in time (--collect-timeout); the run's tags of them are left out",
			"waited", cfg.CollectTimeout)
	} else {
		maps.Copy(t, start)
	}
	maps.Copy(t, s.tags())
	return t
}

// scopeFilter drops points of scopes the user turned off (the GPU
// collector adds process_ series too). It offers what the collector it
// wraps offers (metrics.As: Detect, Close).
type scopeFilter struct {
	metrics.Collector
	keep func(scope string) bool
}

func (f scopeFilter) Collect(ctx context.Context, b *metrics.Batch) error {
	from := len(b.Points)
	err := f.Collector.Collect(ctx, b)
	b.Keep(from, func(d *metrics.Desc) bool { return f.keep(string(d.Scope)) })
	return err
}

// Unwrap is the collector f filters.
func (f scopeFilter) Unwrap() metrics.Collector { return f.Collector }

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}
