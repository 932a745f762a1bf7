package gpu

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestGuardReturnsValueAndError(t *testing.T) {
	g := newGuard(time.Minute)
	v, err := call(context.Background(), g, "nvmlA", func() (int, error) { return 3, nil })
	if err != nil || v != 3 {
		t.Fatalf("got %d, %v", v, err)
	}
	boom := errors.New("boom")
	_, err = call(context.Background(), g, "nvmlB", func() (int, error) { return 0, boom })
	if !errors.Is(err, boom) || err.Error() != "nvmlB: boom" {
		t.Fatalf("err = %v, want nvmlB: boom", err)
	}
	_, err = call(context.Background(), g, "nvmlC", func() (int, error) { panic("nil mock func") })
	if err == nil || err.Error() != "nvmlC: panicked: nil mock func" {
		t.Fatalf("err = %v, want the panic as an error", err)
	}
}

// A hung call times out, holds the only slot, and makes later calls fail at
// once without running, until it returns.
func TestGuardHungCall(t *testing.T) {
	g := newGuard(20 * time.Millisecond)
	release := make(chan struct{})
	_, err := call(context.Background(), g, "nvmlHang", func() (int, error) { <-release; return 1, nil })
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	var ran atomic.Int32
	for i := 0; i < 5; i++ {
		_, err = call(context.Background(), g, "nvmlNext", func() (int, error) { ran.Add(1); return 0, nil })
		if !errors.Is(err, ErrStuck) {
			t.Fatalf("call %d: err = %v, want ErrStuck", i, err)
		}
	}
	if ran.Load() != 0 {
		t.Fatalf("%d calls ran while one was hung", ran.Load())
	}
	close(release)
	if err := g.idle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g.isStuck() {
		t.Fatal("still stuck after the hung call returned")
	}
	if _, err := call(context.Background(), g, "nvmlNext", func() (int, error) { ran.Add(1); return 0, nil }); err != nil || ran.Load() != 1 {
		t.Fatalf("after release: err = %v, ran = %d", err, ran.Load())
	}
}

func TestGuardCanceledContext(t *testing.T) {
	g := newGuard(time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	started := make(chan struct{})
	go func() { <-started; cancel() }()
	_, err := call(ctx, g, "nvmlHang", func() (int, error) { close(started); <-release; return 0, nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if !g.isStuck() {
		t.Fatal("a call abandoned by its context must count as stuck while it runs")
	}
	close(release)
	if err := g.idle(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestGuardClosed(t *testing.T) {
	g := newGuard(time.Minute)
	var shut atomic.Int32
	if err := g.last(context.Background(), "nvmlShutdown", func() error { shut.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	_, err := call(context.Background(), g, "nvmlAfter", func() (int, error) { t.Error("a call ran after shutdown"); return 0, nil })
	if !errors.Is(err, ErrClosed) || shut.Load() != 1 {
		t.Fatalf("err = %v, shutdowns = %d", err, shut.Load())
	}
}

// Shutdown is not attempted while a call is hung.
func TestGuardNoShutdownWhileStuck(t *testing.T) {
	g := newGuard(10 * time.Millisecond)
	release := make(chan struct{})
	defer close(release)
	_, _ = call(context.Background(), g, "nvmlHang", func() (int, error) { <-release; return 0, nil })
	err := g.last(context.Background(), "nvmlShutdown", func() error { t.Error("shutdown ran under a hung call"); return nil })
	if !errors.Is(err, ErrStuck) {
		t.Fatalf("err = %v, want ErrStuck", err)
	}
}

// idle (for tests) waits until no call is in flight, or ctx ends.
func (g *guard) idle(ctx context.Context) error {
	select {
	case g.slot <- struct{}{}:
		<-g.slot
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
