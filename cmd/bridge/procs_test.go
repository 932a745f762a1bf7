package main

import (
	"runtime"
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
