package ownproc

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestLimitProcs(t *testing.T) {
	was := runtime.GOMAXPROCS(8)
	defer runtime.GOMAXPROCS(was)
	limitProcs(func(string) string { return "8" })
	if got := runtime.GOMAXPROCS(0); got != 8 {
		t.Fatalf("GOMAXPROCS set by the user: got %d, want 8 (left alone)", got)
	}
	limitProcs(func(string) string { return "" })
	if got := runtime.GOMAXPROCS(0); got != maxProcs {
		t.Fatalf("GOMAXPROCS unset, 8 CPUs: got %d, want %d", got, maxProcs)
	}
}

func TestLeanGC(t *testing.T) {
	was := debug.SetGCPercent(100)
	defer debug.SetGCPercent(was)
	leanGC(func(string) string { return "100" })
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC set by the user: got %d, want 100 (left alone)", got)
	}
	leanGC(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Fatalf("GOGC unset: got %d, want %d", got, gcPercent)
	}
}
