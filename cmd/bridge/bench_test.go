package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/cgroup"
	"github.com/bridge-dev/bridge/pipeline"
)

// BenchmarkSample measures one sample of every collector on this machine:
// the cost bridge adds per interval (default 10 s) beside the training job.
//
//	go test -run '^$' -bench Sample -benchmem ./cmd/bridge
func BenchmarkSample(b *testing.B) {
	cfg := config.Config{Scopes: pipeline.Scopes(), CollectTimeout: 5 * time.Second, ProcRoot: "/proc", CgroupRoot: "/sys/fs/cgroup", Rootfs: "/"}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	src, err := pipeline.BuildSources(cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	src.SetChild(1, 0) // a real process tree to walk
	smp := metrics.NewSampler(src.Collectors, cfg.CollectTimeout, log)
	defer smp.Close()
	ctx := context.Background()
	smp.Sample(ctx)
	b.ResetTimer()
	for b.Loop() {
		if s := smp.Sample(ctx); len(s.Points) == 0 {
			b.Fatal("empty sample")
		}
	}
}

// BenchmarkMemoryProbe measures the memory-only look the sampling loop takes
// every --fast-interval between samples, to notice a climb to the limit.
//
//	go test -run '^$' -bench MemoryProbe -benchmem ./cmd/bridge
func BenchmarkMemoryProbe(b *testing.B) {
	cfg := config.Config{ProcRoot: "/proc", CgroupRoot: "/sys/fs/cgroup"}
	c, err := cgroup.New(pipeline.CgroupOptions(cfg, slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Skipf("no cgroup here: %v", err)
	}
	ctx := context.Background()
	for b.Loop() {
		if _, err := c.MemoryPoints(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
