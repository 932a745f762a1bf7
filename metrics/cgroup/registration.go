package cgroup

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strconv"

	"github.com/bridge-dev/bridge/config/option"
	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
)

// NoContainer is --no-container: container awareness off, no cgroup
// collector and no container_ series.
var NoContainer = &option.Of[bool]{Key: "no-container",
	Usage: "turn container awareness off: no container_ metrics, as JVM -XX:-UseContainerSupport",
	Doc:   "container awareness off (no `container_` series), as JVM `-XX:-UseContainerSupport`, W&B `x_stats_no_cgroup`"}

// Name is the collector's name in `bridge sample` and the registrations.
const Name = "cgroup"

// Registration is the collector's, for pipeline.Collectors.
var Registration = metrics.Registration{
	Name:    Name,
	Scopes:  []metrics.Scope{metrics.ScopeContainer},
	Series:  Series,
	Options: []option.Option{NoContainer},
	Docs:    docs,
	Build:   build,
}

func build(env metrics.Env) (metrics.Collector, error) {
	if NoContainer.Get(env.Options) {
		return nil, &metrics.Off{Why: "container awareness turned off (--no-container / BRIDGE_NO_CONTAINER)", Level: slog.LevelDebug,
			Tags: map[string]string{"bridge.container_awareness": "off"}}
	}
	l, err := LayoutOf(env)
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, ErrUnavailable) {
			level = slog.LevelInfo
		}
		return nil, &metrics.Off{Why: "off: " + err.Error(), Level: level}
	}
	if at := l.AtRoot(); len(at) > 0 && env.Log != nil {
		env.Log.Info(RootNote(at), "paths", l.Paths())
	}
	return New(l, env.Log), nil
}

// layoutKey is the cgroup layout in metrics.Shared.
type layoutKey struct{}

// LayoutOf is the cgroup layout under env's roots (FindLayout), found once
// a job: the cgroup collector reads it, and the child's process tree is
// looked for in it. Under another proc root than /proc, bridge's own pid
// is that root's "self".
func LayoutOf(env metrics.Env) (*Layout, error) {
	v, err := env.Shared.Once(env.Context, layoutKey{}, func() (any, error) {
		o := Options{Context: env.Context, ProcRoot: env.Roots.Proc, CgroupRoot: env.Roots.Cgroup, Log: env.Log}
		if filepath.Clean(o.ProcRoot) != "/proc" {
			if self, err := kfile.Readlink(env.Context, filepath.Join(o.ProcRoot, "self")); err == nil {
				if pid, err := strconv.Atoi(self); err == nil {
					o.PID = pid
				}
			}
		}
		return FindLayout(o)
	})
	l, _ := v.(*Layout)
	return l, err
}
