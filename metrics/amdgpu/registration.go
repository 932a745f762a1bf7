package amdgpu

import (
	"errors"
	"log/slog"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/process"
)

// Registration is the collector's, for pipeline.Collectors. Its GPUs are
// numbered after every GPU an earlier collector numbered (NVML's): one
// gpu_N sequence for the node. Off, and costing nothing per sample, without
// an AMD GPU for the job.
var Registration = metrics.Registration{
	Name:   Name,
	Scopes: []metrics.Scope{metrics.ScopeGPU},
	Series: Series,
	Docs:   docs,
	Build: func(env metrics.Env) (metrics.Collector, error) {
		offset := 0
		for _, c := range env.Built {
			if g, ok := c.(metrics.GPUNumbering); ok {
				offset = g.Count()
			}
		}
		o := Options{
			Context:   env.Context,
			SysRoot:   env.Roots.Sys,
			Offset:    offset,
			LookupEnv: env.LookupEnv, // what the child inherits
			Log:       env.Log,
		}
		// The child's tree, shared with the process and NVIDIA collectors;
		// a proc root it cannot be read under is the NVIDIA collector's
		// usage error, built first.
		if tree, err := process.TreeOf(env); err == nil {
			o.ProcessTree = tree
		}
		c, err := New(o)
		if err != nil {
			level := slog.LevelWarn
			switch {
			case errors.Is(err, ErrNoGPU):
				level = slog.LevelDebug
			case errors.Is(err, ErrNoneForJob):
				level = slog.LevelInfo
			}
			return nil, &metrics.Off{Why: "off: " + err.Error(), Level: level}
		}
		return c, nil
	},
}
