package process

import (
	"log/slog"

	"github.com/bridge-dev/bridge/metrics"
)

// Name is the collector's name in `bridge sample` and the registrations.
const Name = "process"

// Registration is the collector's, for pipeline.Collectors: it follows the
// job's child (none in `bridge sample`: no points).
var Registration = metrics.Registration{
	Name:   Name,
	Scopes: []metrics.Scope{metrics.ScopeProcess},
	Series: Series,
	Docs:   docs,
	Build: func(env metrics.Env) (metrics.Collector, error) {
		p, err := New(Options{
			ProcRoot:   env.Roots.Proc,
			CgroupRoot: env.Roots.Cgroup,
			Log:        env.Log,
			RootPID:    env.Job.PID,
			Adopter:    env.Job.Adopter,
		})
		if err != nil {
			return nil, &metrics.Off{Why: "off: " + err.Error(), Level: slog.LevelWarn}
		}
		return p, nil
	},
}
