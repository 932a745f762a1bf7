//go:build linux && cgo

package gpu

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"

	"github.com/bridge-dev/bridge/harness/closetest"
	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/harness/waitfor"
)

// Sampler.Close beside an NVML call that hangs (the mock's, as a hung
// driver): Close returns without waiting for it and without shutting NVML
// down under it, Detect beside it returns, and no call starts after Close.
func TestSamplerCloseWhileHung(t *testing.T) {
	s := fakeServer(dgxh100.New(), 1)
	entered, release := make(chan struct{}), make(chan struct{})
	d0 := dev(s, 0)
	d0.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		if len(d0.GetUtilizationRatesCalls()) == 1 {
			close(entered)
			<-release
		}
		return nvml.Utilization{Gpu: 50}, nvml.SUCCESS
	}
	s.ShutdownFunc = func() nvml.Return { t.Error("nvmlShutdown under a hung call"); return nvml.SUCCESS }
	c, _ := newCollector(t, Options{Lib: s, CallTimeout: time.Hour})
	// The call hangs in its own goroutine; Collect gives up at its context.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }()
	if _, err := collecttest.Collect(ctx, c); !errors.Is(err, context.Canceled) {
		t.Fatalf("Collect err = %v, want the context's", err)
	}
	closetest.CloseWhileStuck(t, c, "", func() {
		close(release)
		waitfor.Cond(t, time.Minute, "the hung NVML call returning once released", func() bool { return !c.g.isStuck() })
	})
	if _, err := collecttest.Collect(context.Background(), c); !errors.Is(err, ErrClosed) {
		t.Errorf("Collect after Close: %v, want ErrClosed", err)
	}
}
