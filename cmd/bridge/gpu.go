package main

import (
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/gpu"
	"github.com/bridge-dev/bridge/metrics/process"
)

// newGPUSource builds the GPU collector (off by itself without NVML, and a
// stub in CGO_ENABLED=0 builds). Only a malformed --gpus entry is an error.
func newGPUSource(cfg config.Config, childPID, adopter *atomic.Int64, log *slog.Logger) (*gpu.Collector, error) {
	pfs, err := procfs.NewFS(cfg.ProcRoot)
	if err != nil {
		return nil, err
	}
	return gpu.New(gpu.Options{
		Select:             cfg.GPUs,
		MatchCUDAVisible:   cfg.GPUMatchCUDA,
		CUDAVisibleDevices: os.Getenv("CUDA_VISIBLE_DEVICES"), // what the child inherits
		ProcessTree: func() ([]int, error) {
			pid := childPID.Load()
			if pid <= 0 {
				return nil, nil
			}
			return process.Tree(pfs, int(pid), int(adopter.Load()))
		},
		ProcRoot:    cfg.ProcRoot,
		CallTimeout: min(2*time.Second, cfg.CollectTimeout/2),
		Log:         log.With("collector", "gpu"),
	})
}

var _ metrics.Collector = (*gpu.Collector)(nil)
