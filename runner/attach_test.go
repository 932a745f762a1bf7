package runner

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/supervisor"
)

// attach stops on whichever comes first, the process's exit, a signal or
// the end of the run by its owner, and leaves no goroutine behind watching
// the process (blocked in poll on its pidfd, or on a ticker): the watch
// ends before waitForPID returns.
func TestWaitForPIDLeavesNothingBehind(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	sig := func() <-chan os.Signal {
		c := make(chan os.Signal, 1)
		c <- syscall.SIGTERM
		return c
	}
	for _, tc := range []struct {
		name   string
		sigs   func() <-chan os.Signal
		ended  <-chan struct{}
		exit   bool // the process exits
		reason string
	}{
		{"signal", sig, nil, false, "signal terminated"},
		{"run ended", func() <-chan os.Signal { return nil }, closed, false, "the run was ended by its owner"},
		{"process exited", func() <-chan os.Signal { return nil }, nil, true, "exited"},
	} {
		cmd := exec.Command("sleep", "3600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		proc, err := supervisor.Watch("/proc", cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if tc.exit {
			cmd.Process.Kill()
		}
		got := make(chan string, 1)
		go func() { got <- waitForPID(proc, tc.sigs(), tc.ended) }()
		select {
		case r := <-got:
			if !strings.Contains(r, tc.reason) {
				t.Errorf("%s: reason %q, want %q", tc.name, r, tc.reason)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: waitForPID did not return in 30 s", tc.name)
		}
		buf := make([]byte, 1<<20)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			stacks := string(buf[:runtime.Stack(buf, true)])
			if !strings.Contains(stacks, "supervisor.(*Watched)") && !strings.Contains(stacks, "runner.waitForPID") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the watch of the process is left running after waitForPID returned:\n%s", tc.name, stacks)
			}
		}
		if alive := proc.Alive(); alive == tc.exit {
			t.Errorf("%s: the process is alive=%v afterwards, want %v", tc.name, alive, !tc.exit)
		}
	}
}
