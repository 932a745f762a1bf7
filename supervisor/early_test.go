package supervisor

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// Before the child exists, a terminating signal calls the start off; one
// meant for the child (SIGUSR1, a terminal resized) is dropped; what comes
// after the first terminating one stays in C.
func TestWatchEarly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := WatchEarly(cancel)
	defer e.Release()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("SIGTERM did not call the start off")
	}
	// Signals reach C in the order sent: had SIGUSR1 called the start
	// off, Stop would return it.
	if got := e.Stop(); got != syscall.SIGTERM {
		t.Errorf("Stop = %v, want SIGTERM", got)
	}
	if got := e.Stop(); got != syscall.SIGTERM {
		t.Errorf("a second Stop = %v", got)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// SIGUSR1 and SIGTERM can reach the process on two threads at once and
	// then come to C in either order: a SIGUSR1 that came after SIGTERM
	// stays in C, once, before SIGINT.
	usr1 := 0
	for {
		select {
		case s := <-e.C:
			if s == syscall.SIGUSR1 && usr1 == 0 {
				usr1++
				continue
			}
			if s != syscall.SIGINT {
				t.Errorf("C got %v, want the second signal, SIGINT", s)
			}
			return
		case <-time.After(30 * time.Second):
			t.Fatal("a signal after the first terminating one did not stay in C")
		}
	}
}

// Without a terminating signal, Stop returns 0 and the channel goes on.
func TestWatchEarlyQuiet(t *testing.T) {
	e := WatchEarly(func() { t.Error("cancel called without a signal") })
	defer e.Release()
	if got := e.Stop(); got != 0 {
		t.Errorf("Stop = %v, want 0", got)
	}
}
