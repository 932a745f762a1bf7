package main

import (
	"context"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/pipeline"
)

// BenchmarkSample measures one sample of every collector on this machine:
// the cost bridge adds per interval (default 10 s) beside the training job.
//
//	go test -run '^$' -bench Sample -benchmem ./cmd/bridge
func BenchmarkSample(b *testing.B) {
	cfg := config.Config{Scopes: pipeline.ScopesOf(pipeline.Collectors()), CollectTimeout: 5 * time.Second, ProcRoot: "/proc", CgroupRoot: "/sys/fs/cgroup", Rootfs: "/"}
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
	cpu0 := cpuTime(b)
	for b.Loop() {
		if s := smp.Sample(ctx); len(s.Points) == 0 {
			b.Fatal("empty sample")
		}
	}
	// Collectors run side by side: the CPU a sample costs, every thread
	// and the GC included, is not its wall time.
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMemoryProbe measures the memory-only look the sampling loop takes
// every --fast-interval between samples, to notice a climb to the limit.
//
//	go test -run '^$' -bench MemoryProbe -benchmem ./cmd/bridge
func BenchmarkMemoryProbe(b *testing.B) {
	cfg := config.Config{Scopes: []string{"container"}, ProcRoot: "/proc", CgroupRoot: "/sys/fs/cgroup"}
	src, err := pipeline.BuildSources(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	probe := src.Memory()
	if probe == nil {
		b.Skipf("no cgroup here: %v", src.Notes)
	}
	ctx := context.Background()
	for b.Loop() {
		if _, err := probe.MemoryPoints(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
