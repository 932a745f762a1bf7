package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/metrics"
)

// BenchmarkSample measures one sample of every collector on this machine:
// the cost bridge adds per interval (default 10 s) beside the training job.
//
//	go test -run '^$' -bench Sample -benchmem ./cmd/bridge
func BenchmarkSample(b *testing.B) {
	cfg := config.Config{Scopes: config.AllScopes, CollectTimeout: 5 * time.Second}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	src, err := buildSources(cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	src.childPID.Store(1) // a real process tree to walk
	smp := metrics.NewSampler(src.collectors, cfg.CollectTimeout, log)
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
