package pipeline

import (
	"slices"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/config/option"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/amdgpu"
	"github.com/bridge-dev/bridge/metrics/cgroup"
	"github.com/bridge-dev/bridge/metrics/gpu"
	"github.com/bridge-dev/bridge/metrics/infiniband"
	"github.com/bridge-dev/bridge/metrics/node"
	"github.com/bridge-dev/bridge/metrics/process"
	"github.com/bridge-dev/bridge/metrics/rapl"
	"github.com/bridge-dev/bridge/metrics/scrape"
)

// Collectors are bridge's collectors, each its package's registration, in
// the order the sampler runs them: within a sample an earlier one's value
// of a series wins, and a later one's Build may use an earlier one (--scrape
// keys dcgm-exporter's GPUs by the NVML collector's indexes). Adding a
// collector is its package plus one line here: --scopes, its flags,
// `bridge sample`, /metrics and docs/metrics.md follow from its
// registration. A new list on every call: nothing can change bridge's.
func Collectors() []metrics.Registration {
	return []metrics.Registration{
		cgroup.Registration,
		node.Registration,
		rapl.Registration,
		infiniband.Registration,
		process.Registration,
		gpu.Registration,
		amdgpu.Registration,
		scrape.Registration,
	}
}

// ScopesOf are the scopes regs serve, in order.
func ScopesOf(regs []metrics.Registration) []string {
	var out []string
	for _, c := range regs {
		for _, sc := range c.Scopes {
			if !slices.Contains(out, string(sc)) {
				out = append(out, string(sc))
			}
		}
	}
	return out
}

// Choices are what --scopes and --trackers take, and the collectors' own
// options, from the registrations (config.Load checks them without knowing
// the collectors or trackers).
func Choices() config.Choices { return ChoicesOf(Collectors(), Trackers()) }

// ChoicesOf are Choices with regs for the collectors and ts for the
// trackers.
func ChoicesOf(regs []metrics.Registration, ts TrackerList) config.Choices {
	var opts []option.Option
	for _, r := range regs {
		opts = append(opts, r.Options...)
	}
	return config.Choices{Scopes: ScopesOf(regs), Trackers: ts.TrackerNames(), Options: opts}
}
