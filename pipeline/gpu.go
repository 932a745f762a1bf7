package pipeline

import (
	"log/slog"
	"os"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/gpu"
)

// newGPUSource builds the GPU collector (off by itself without NVML, and a
// stub in CGO_ENABLED=0 builds). Only a malformed --gpus entry is an error.
func newGPUSource(cfg config.Config, tree func() ([]int, error), log *slog.Logger) (*gpu.Collector, error) {
	return gpu.New(gpu.Options{
		Select:             cfg.GPUs,
		MatchCUDAVisible:   cfg.GPUMatchCUDA,
		CUDAVisibleDevices: os.Getenv("CUDA_VISIBLE_DEVICES"), // what the child inherits
		ProcessTree:        tree,
		ProcRoot:           cfg.ProcRoot,
		CallTimeout:        min(2*time.Second, cfg.CollectTimeout/2),
		Log:                log.With("collector", "gpu"),
	})
}

var _ metrics.Collector = (*gpu.Collector)(nil)
