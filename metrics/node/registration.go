package node

import (
	"log/slog"

	"github.com/bridge-dev/bridge/metrics"
)

// Name is the collector's name in `bridge sample` and the registrations.
const Name = "node"

// Registration is the collector's, for pipeline.Collectors. It serves three
// scopes and reads only the sources of those asked for (no statfs without
// rootfs, no net/dev without netns).
var Registration = metrics.Registration{
	Name:   Name,
	Scopes: ServedScopes,
	Series: Series,
	Docs:   docs,
	Build: func(env metrics.Env) (metrics.Collector, error) {
		n, err := New(Options{Context: env.Context, ProcRoot: env.Roots.Proc, SysRoot: env.Roots.Sys, RootfsPath: env.Roots.Rootfs, Scopes: env.Scopes, Log: env.Log})
		if err != nil {
			return nil, &metrics.Off{Why: "off: " + err.Error(), Level: slog.LevelWarn}
		}
		return n, nil
	},
}
