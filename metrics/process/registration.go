package process

import (
	"log/slog"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/cgroup"
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
		t, err := TreeOf(env)
		if err != nil {
			return nil, &metrics.Off{Why: "off: " + err.Error(), Level: slog.LevelWarn}
		}
		return New(t, env.Log), nil
	},
}

// treeKey is the child's tree in metrics.Shared.
type treeKey struct{}

// TreeOf is the child of env's job's process tree, made once a job and
// shared by every collector that follows it (process, NVIDIA and AMD
// GPUs): walked once a sample for all of them. It is looked for in the
// job's cgroup layout (cgroup.LayoutOf); without one, by the children
// links, else a scan.
func TreeOf(env metrics.Env) (*Tree, error) {
	v, err := env.Shared.Once(env.Context, treeKey{}, func() (any, error) {
		l, _ := cgroup.LayoutOf(env)
		return NewTree(TreeOptions{Context: env.Context, ProcRoot: env.Roots.Proc, Cgroups: l, RootPID: env.Job.PID, Adopter: env.Job.Adopter})
	})
	t, _ := v.(*Tree)
	return t, err
}
