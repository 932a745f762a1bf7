package infiniband

import "github.com/bridge-dev/bridge/metrics"

// Registration is the collector's, for pipeline.Collectors: off, and
// costing nothing per sample, on a node without InfiniBand or RoCE ports.
var Registration = metrics.Registration{
	Name:   Name,
	Scopes: []metrics.Scope{metrics.ScopeNode},
	Series: Series,
	Docs:   docs,
	Build: func(env metrics.Env) (metrics.Collector, error) {
		c, err := New(Options{Context: env.Context, SysRoot: env.Roots.Sys, Log: env.Log})
		if err != nil {
			return nil, metrics.Absent(err)
		}
		return c, nil
	},
}
