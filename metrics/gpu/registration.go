package gpu

import (
	"errors"
	"fmt"
	"time"

	"github.com/bridge-dev/bridge/config/option"
	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/process"
)

// The collector's options.
var (
	// GPUs is --gpus: the GPUs to collect (Options.Select).
	GPUs = &option.Of[[]string]{Key: "gpus", Default: []string{}, Shown: "all visible",
		Usage: "GPUs to collect, by index or UUID (comma-separated; default all visible)",
		Doc:   "GPUs by index or UUID",
		Valid: func(l []string) ([]string, error) { return option.List(l, nil) }}
	// MatchCUDAVisible is --gpu-match-cuda-visible (Options.MatchCUDAVisible).
	MatchCUDAVisible = &option.Of[bool]{Key: "gpu-match-cuda-visible",
		Usage: "collect only the GPUs named in CUDA_VISIBLE_DEVICES, matched by UUID",
		Doc:   "only the GPUs in `CUDA_VISIBLE_DEVICES`, matched by UUID"}
)

// Registration is the collector's, for pipeline.Collectors. It is off by
// itself without NVML, and a stub in CGO_ENABLED=0 builds.
var Registration = metrics.Registration{
	Name:    Name,
	Scopes:  []metrics.Scope{metrics.ScopeGPU},
	Series:  Series,
	Options: []option.Option{GPUs, MatchCUDAVisible},
	Docs:    docs,
	Build:   build,
}

// build makes the collector, on the child's process tree it shares with
// the process collector (process.TreeOf). Each error names the flag at
// fault: the proc root the tree is read under (not a directory procfs can
// read), or a malformed --gpus.
func build(env metrics.Env) (metrics.Collector, error) {
	if st, err := kfile.Stat(env.Context, env.Roots.Proc); err != nil || !st.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("--proc-root / BRIDGE_PROC_ROOT %q: %w", env.Roots.Proc, err)
	}
	tree, err := process.TreeOf(env)
	if err != nil {
		return nil, fmt.Errorf("--proc-root / BRIDGE_PROC_ROOT %q: %w", env.Roots.Proc, err)
	}
	cuda, _ := env.LookupEnv("CUDA_VISIBLE_DEVICES") // what the child inherits
	g, err := New(Options{
		Select:             GPUs.Get(env.Options),
		MatchCUDAVisible:   MatchCUDAVisible.Get(env.Options),
		CUDAVisibleDevices: cuda,
		ProcessTree:        tree,
		CallTimeout:        min(2*time.Second, env.CollectTimeout/2),
		Log:                env.Log,
	})
	if err != nil {
		return nil, fmt.Errorf("--gpus / BRIDGE_GPUS: %w", err)
	}
	return g, nil
}
