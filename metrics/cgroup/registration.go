package cgroup

import (
	"errors"
	"log/slog"
	"path/filepath"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/config/option"
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
	Scopes:  []metrics.Scope{Scope},
	Series:  Series,
	Options: []option.Option{NoContainer},
	Docs:    docs,
	Build:   build,
}

func build(env metrics.Env) (metrics.Collector, error) {
	if NoContainer.Get(env.Options) {
		return nil, &metrics.Off{Why: "container awareness turned off (--no-container / BRIDGE_NO_CONTAINER)", Level: slog.LevelDebug}
	}
	c, err := New(OptionsAt(env.Roots.Proc, env.Roots.Cgroup, env.Log))
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, ErrUnavailable) {
			level = slog.LevelInfo
		}
		return nil, &metrics.Off{Why: "off: " + err.Error(), Level: level}
	}
	return c, nil
}

// OptionsAt points the collector at these roots (it finds their layout
// itself). Under another proc root than /proc, bridge's own pid is that
// root's "self".
func OptionsAt(procRoot, cgroupRoot string, log *slog.Logger) Options {
	o := Options{ProcRoot: procRoot, CgroupRoot: cgroupRoot, Log: log}
	if filepath.Clean(procRoot) != "/proc" {
		if fs, err := procfs.NewFS(procRoot); err == nil {
			if self, err := fs.Self(); err == nil {
				o.PID = self.PID
			}
		}
	}
	return o
}
