package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// acceptingTracker is a 127.0.0.1 listener that accepts connections and
// never answers; accepted receives once bridge has connected (it is then
// inside its trackers' start).
func acceptingTracker(t *testing.T) (uri string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 1)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String(), ch
}

// A SIGTERM while bridge starts its trackers (a single run's create, a
// multi-node job's election), before the child exists: bridge stops the
// start at once, never starts the child, says so in one line, and exits
// 128+15 as the child would have.
func TestSignalBeforeChildStarted(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"single node", nil},
		{"multi-node election", []string{"BRIDGE_JOB_KEY=test:early-signal", "BRIDGE_NODES=2", "BRIDGE_NODE_ID=node-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uri, accepted := acceptingTracker(t)
			ran := filepath.Join(t.TempDir(), "ran")
			cmd, _, errb := bridgeCmd(t, "--start-timeout=10m", "--flush-timeout=5s", "--trackers=mlflow", "--", "touch", ran)
			cmd.Env = append(append(cmd.Env, "MLFLOW_TRACKING_URI="+uri), tc.env...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-accepted:
			case <-time.After(60 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("bridge never reached the tracker; stderr:\n%s", errb)
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			// Far less than --start-timeout: the start is called off, not waited out.
			err := waitExit(t, cmd, errb, 2*time.Minute)
			if code := exitCode(t, err); code != 143 {
				t.Errorf("exit %d, want 143; stderr:\n%s", code, errb)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Error("the child ran after a SIGTERM that came before it started")
			}
			lines := 0
			for _, l := range strings.Split(errb.String(), "\n") {
				if strings.Contains(l, "SIGTERM") && strings.Contains(l, "the command never ran") {
					lines++
				}
			}
			if lines != 1 {
				t.Errorf("want one line saying the command never ran, got %d; stderr:\n%s", lines, errb)
			}
			if strings.Contains(errb.String(), "context canceled") {
				t.Errorf("the called-off start is reported as tracker errors:\n%s", errb)
			}
		})
	}
}
