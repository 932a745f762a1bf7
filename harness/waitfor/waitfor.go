// Package waitfor polls a condition in tests. Tests never assert how soon
// something happens, only that it does within a generous deadline (the
// machine may be loaded, the binary built with -race).
package waitfor

import (
	"os"
	"testing"
	"time"
)

// Cond polls cond until it holds, first every millisecond, then less often
// (up to every 50 ms), and fails t if d passes first.
func Cond(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for step := time.Millisecond; !cond(); step = min(2*step, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", what, d)
		}
		time.Sleep(step)
	}
}

// Closed is a condition for Cond: ch is closed (a goroutine has ended).
func Closed(ch <-chan struct{}) func() bool {
	return func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

// File waits for path to exist (a process writes it when it gets somewhere),
// as Cond does, and returns the time it was seen.
func File(t testing.TB, d time.Duration, path string) time.Time {
	t.Helper()
	Cond(t, d, path+" to appear", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
	return time.Now()
}
