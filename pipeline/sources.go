package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/cgroup"
	"github.com/bridge-dev/bridge/metrics/gpu"
	"github.com/bridge-dev/bridge/metrics/scrape"
	"github.com/bridge-dev/bridge/summary"
)

// Sources are the collectors a job runs (built from the registrations,
// Collectors), and the side channels the rest of bridge needs from them:
// the memory probe, the start tags, the forensics' inputs and the child's
// pid.
type Sources struct {
	// Collectors are what the sampler runs, in order.
	Collectors []metrics.Collector
	// Notes say why a collector is off, for `bridge sample`.
	Notes map[string]any

	log      *slog.Logger
	roots    metrics.Roots
	taggers  []tagger          // the collectors that describe what they found as run tags
	cgroup   *cgroup.Collector // nil when the container scope is off or unavailable
	gpu      *gpu.Collector    // nil when the gpu scope is off
	scrape   *scrape.Collector // nil without --scrape
	childPID atomic.Int64      // the process collector's root
	adopter  atomic.Int64      // bridge's pid while it supervises the child: orphans it adopts count too
	series   []*metrics.Desc   // what the built collectors may add, in the scopes that are on
	// peakStart is the memory high-water mark before the job (StartTags);
	// nil: not read.
	peakStart *summary.PeakStart
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
	s := &Sources{Notes: map[string]any{}, log: log,
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
			continue
		case err != nil:
			return nil, err
		case c == nil:
			continue
		}
		built = append(built, c)
		switch c := c.(type) { // the side channels
		case *cgroup.Collector:
			s.cgroup = c
		case *gpu.Collector:
			s.gpu = c
		case *scrape.Collector:
			s.scrape = c
		}
		if tg, ok := c.(tagger); ok {
			s.taggers = append(s.taggers, tg)
		}
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
// (pressure only where the kernel keeps it per cgroup: v2; none of a root
// cgroup's, which the table names instead), and the file of the kernel's
// memory high-water mark. It reads no file.
func (s *Sources) Summary() summary.Options {
	o := summary.Options{}
	v2 := s.CgroupVersion() == string(cgroup.ModeV2)
	skip := map[string]bool{}
	if !v2 {
		for _, d := range metrics.ContainerPressure.Descs() {
			skip[d.Name] = true
		}
	}
	if s.cgroup != nil {
		for _, d := range s.cgroup.RootSeries() {
			skip[d.Name] = true
		}
		o.PeakFile = s.cgroup.PeakFile()
		o.AtRoot = s.cgroup.AtRoot()
		o.PeakStart = s.peakStart
	}
	for _, d := range s.series {
		if !skip[d.Name] {
			o.Expected = append(o.Expected, d)
		}
	}
	return o
}

// ScrapeFailures are the failed --scrape reads per URL (nil without --scrape).
func (s *Sources) ScrapeFailures() map[string]int {
	if s.scrape == nil {
		return nil
	}
	return s.scrape.Failures()
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

// Memory is the between-samples memory probe: the cgroup's working set and
// limit only. Nil without a cgroup collector.
func (s *Sources) Memory() MemoryProbe {
	if s.cgroup == nil {
		return nil
	}
	return s.cgroup
}

// CgroupVersion is "v1", "v2" or "hybrid", "" without a cgroup collector
// (forensics). It reads no file: at the end of the run, a read that hangs
// must not hold up the child's exit status.
func (s *Sources) CgroupVersion() string {
	if s.cgroup == nil {
		return ""
	}
	return string(s.cgroup.Version())
}

// cgroupInfo is the cgroup collector's Info, and the memory high-water
// mark before the job (cgroup.Collector.StartPeak, kept for Summary), read
// on a goroutine of its own and waited for at most timeout: a limit file
// whose read hangs (a v1 memory.stat stalled in a flush) must not hold up
// the child's start. ok is false when it did not answer in time; the mark
// is then not known, and a descriptor reset later is closed unused (its
// mark would count from after the child's start).
func (s *Sources) cgroupInfo(timeout time.Duration) (info cgroup.Info, ok bool) {
	if s.cgroup == nil {
		return info, true
	}
	type start struct {
		info cgroup.Info
		peak cgroup.PeakStart
	}
	ch, gone := make(chan start), make(chan struct{})
	// The goroutine below is left behind at timeout: its reads run on it
	// (kfile.Bounded), each within what is left of timeout.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("internal error reading the cgroup's limits; the job goes on", "panic", p)
			}
		}()
		st := start{peak: s.cgroup.StartPeak(kfile.Bounded(ctx))}
		st.info = s.cgroup.Info()
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
		s.cgroup.UsePeak(st.peak)
		if st.peak.Known {
			s.peakStart = &summary.PeakStart{MB: metrics.MB(float64(st.peak.Bytes)), Reset: st.peak.Reset}
		}
		s.log.Debug("the memory high-water mark before the job", "file", st.peak.File, "known", st.peak.Known,
			"megabytes", metrics.MB(float64(st.peak.Bytes)), "reset_for_bridge", st.peak.Reset, "why_not", st.peak.Why)
		return st.info, true
	case <-t.C:
		close(gone)
		return cgroup.Info{}, false
	}
}

// XidEvents are the GPU errors seen so far, nil without GPUs (forensics).
func (s *Sources) XidEvents() []gpu.XidEvent {
	if s.gpu == nil {
		return nil
	}
	return s.gpu.XidEvents()
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

// StartTags describe the job at start, for the run and the spool. It also
// reads the memory high-water mark before the job, for Summary: call it
// before the child starts.
func (s *Sources) StartTags(cfg config.Config, version string) map[string]string {
	t := map[string]string{
		"bridge.version":  version,
		"bridge.hostname": hostname(),
	}
	if cfg.NodeID != "" {
		t["bridge.node_id"] = cfg.NodeID
	}
	if cgroup.NoContainer.Get(cfg.Options) {
		t["bridge.container_awareness"] = "off"
	}
	if s.cgroup != nil {
		t["bridge.cgroup.version"] = s.CgroupVersion()
	}
	if info, ok := s.cgroupInfo(cfg.CollectTimeout); !ok {
		s.log.Warn("reading the cgroup's limit files did not answer in time (--collect-timeout); the run's limit tags are left out",
			"waited", cfg.CollectTimeout)
	} else if s.cgroup != nil {
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
		if info.CPUSplit != "" {
			t["bridge.cgroup.cpu_usage_limit_split"] = info.CPUSplit
		}
		if len(info.AtRoot) > 0 {
			t[TagCgroupAtRoot] = cgroup.RootNote(info.AtRoot)
		}
	}
	for _, tg := range s.taggers {
		for k, v := range tg.Tags() {
			t[k] = v
		}
	}
	return t
}

// TagCgroupAtRoot says which controllers' cgroups are the host's root
// cgroups, whose container_ series are not sent (cgroup.RootNote).
const TagCgroupAtRoot = "bridge.cgroup.at_root"

// tagger is a collector that describes what it found as run tags (the
// GPUs, the InfiniBand ports' state and rate). Tags reads only what the
// collector found when it was built.
type tagger interface {
	Tags() map[string]string
}

// scopeFilter drops points of scopes the user turned off (the GPU
// collector adds process_ series too).
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

func (f scopeFilter) Detect(ctx context.Context) map[string]any {
	if d, ok := f.Collector.(metrics.Detector); ok {
		return d.Detect(ctx)
	}
	return nil
}

func (f scopeFilter) Close() error {
	if c, ok := f.Collector.(metrics.Closer); ok {
		return c.Close()
	}
	return nil
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}
