package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/cgroup"
	"github.com/bridge-dev/bridge/metrics/gpu"
	"github.com/bridge-dev/bridge/metrics/node"
	"github.com/bridge-dev/bridge/metrics/process"
)

// sources is the one place that lists bridge's collectors.
type sources struct {
	collectors []metrics.Collector
	cgroup     *cgroup.Collector // nil when the container scope is off or unavailable
	gpu        *gpu.Collector    // nil when the gpu scope is off
	childPID   *atomic.Int64     // the process collector's root
	adopter    *atomic.Int64     // bridge's pid while it supervises the child: orphans it adopts count too
	notes      map[string]any    // why a scope is missing, for `bridge sample`
}

// buildSources creates the collectors the configuration asks for. A source
// that is unavailable here is left out with a note; the only error is a
// malformed --gpus entry, a usage error.
func buildSources(cfg config.Config, log *slog.Logger) (*sources, error) {
	s := &sources{childPID: &atomic.Int64{}, adopter: &atomic.Int64{}, notes: map[string]any{}}
	if cfg.HasScope("container") {
		switch {
		case cfg.NoContainer:
			s.notes["cgroup"] = "container awareness turned off (--no-container / BRIDGE_NO_CONTAINER)"
		default:
			c, err := cgroup.New(cgroupOptions(cfg, log))
			if err != nil {
				level := slog.LevelWarn
				if errors.Is(err, cgroup.ErrUnavailable) {
					level = slog.LevelInfo
				}
				log.Log(context.Background(), level, "container metrics are off", "err", err)
				s.notes["cgroup"] = "off: " + err.Error()
			} else {
				s.cgroup = c
				s.collectors = append(s.collectors, c)
			}
		}
	}
	if cfg.HasScope("node") || cfg.HasScope("rootfs") || cfg.HasScope("netns") {
		n, err := node.New(node.Options{ProcRoot: cfg.ProcRoot, RootfsPath: cfg.Rootfs, Log: log.With("collector", "node")})
		if err != nil {
			log.Warn("node metrics are off", "err", err)
			s.notes["node"] = "off: " + err.Error()
		} else {
			s.collectors = append(s.collectors, n)
		}
	}
	if cfg.HasScope("process") {
		p, err := process.New(process.Options{
			ProcRoot: cfg.ProcRoot,
			Log:      log.With("collector", "process"),
			RootPID:  func() int { return int(s.childPID.Load()) },
			Adopter:  func() int { return int(s.adopter.Load()) },
		})
		if err != nil {
			log.Warn("process metrics are off", "err", err)
			s.notes["process"] = "off: " + err.Error()
		} else {
			s.collectors = append(s.collectors, p)
		}
	}
	if cfg.HasScope("gpu") {
		g, err := newGPUSource(cfg, s.childPID, s.adopter, log)
		if err != nil {
			return nil, fmt.Errorf("--gpus / BRIDGE_GPUS: %w", err)
		}
		s.gpu = g
		s.collectors = append(s.collectors, g)
	}
	s.collectors = filterScopes(s.collectors, cfg)
	return s, nil
}

// cgroupOptions points the cgroup collector at the configured roots. On the
// host's own mounts it asks the kernel for the layout; under other roots it
// reads the layout and bridge's own pid ("self") from the files there.
func cgroupOptions(cfg config.Config, log *slog.Logger) cgroup.Options {
	o := cgroup.Options{ProcRoot: cfg.ProcRoot, CgroupRoot: cfg.CgroupRoot, Log: log.With("collector", "cgroup")}
	if filepath.Clean(cfg.CgroupRoot) != "/sys/fs/cgroup" {
		o.Mode = cgroup.ModeAt(cfg.CgroupRoot)
	}
	if filepath.Clean(cfg.ProcRoot) != "/proc" {
		if fs, err := procfs.NewFS(cfg.ProcRoot); err == nil {
			if self, err := fs.Self(); err == nil {
				o.PID = self.PID
			}
		}
	}
	return o
}

// detected is what `bridge sample` and the run tags report about the machine.
func (s *sources) detected(ctx context.Context, smp *metrics.Sampler) map[string]any {
	d := smp.Detect(ctx)
	for k, v := range s.notes {
		if _, ok := d[k]; !ok {
			d[k] = v
		}
	}
	return d
}

// scopeFilter drops points of scopes the user turned off (the node collector
// serves node, rootfs and netns).
type scopeFilter struct {
	metrics.Collector
	keep map[metrics.Scope]bool
}

func (f scopeFilter) Collect(ctx context.Context) ([]metrics.Point, error) {
	pts, err := f.Collector.Collect(ctx)
	out := pts[:0]
	for _, p := range pts {
		if f.keep[p.Scope] {
			out = append(out, p)
		}
	}
	return out, err
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

func filterScopes(cs []metrics.Collector, cfg config.Config) []metrics.Collector {
	if len(cfg.Scopes) == len(config.AllScopes) {
		return cs
	}
	keep := map[metrics.Scope]bool{}
	for _, s := range cfg.Scopes {
		keep[metrics.Scope(s)] = true
	}
	out := make([]metrics.Collector, len(cs))
	for i, c := range cs {
		out[i] = scopeFilter{Collector: c, keep: keep}
	}
	return out
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}
