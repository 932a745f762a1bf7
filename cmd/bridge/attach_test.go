package main

import (
	"os/exec"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

// watchExit returns once the process exits, through the pidfd (own
// namespace) and through /proc (another --proc-root), and not before.
func TestWatchExit(t *testing.T) {
	procs, err := procfs.NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, ownNS := range []bool{true, false} {
		cmd := exec.Command("sleep", "3600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		reaped := make(chan struct{})
		go func() { cmd.Wait(); close(reaped) }()
		done := make(chan struct{})
		go func() { watchExit(procs, cmd.Process.Pid, ownNS); close(done) }()
		select {
		case <-done:
			t.Fatalf("ownNS=%v: watchExit returned while the process runs", ownNS)
		case <-time.After(200 * time.Millisecond):
		}
		cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("ownNS=%v: watchExit did not return 30 s after the process was killed", ownNS)
		}
		<-reaped
	}
}
