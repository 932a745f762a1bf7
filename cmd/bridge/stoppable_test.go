package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/metrics"
)

// stoppable is a started job whose child runs until a file "stop" appears
// in its directory: waited for on a goroutine, and at the test's end
// stopped, then killed if it has not exited within a minute.
type stoppable struct {
	dir    string
	exited chan struct{}
	err    error // job.Wait's; read once exited is closed
}

// startStoppable starts job; before (nil: none) runs at the test's end
// ahead of the stop.
func startStoppable(t *testing.T, job *exec.Cmd, dir string, before func()) *stoppable {
	t.Helper()
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	s := &stoppable{dir: dir, exited: make(chan struct{})}
	go func() { s.err = job.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		if before != nil {
			before()
		}
		s.stop()
		select {
		case <-s.exited:
		case <-time.After(time.Minute):
			job.Process.Kill()
			<-s.exited
		}
	})
	return s
}

func (s *stoppable) stop() { os.WriteFile(filepath.Join(s.dir, "stop"), nil, 0o644) }

// spoolSamples reads the samples of the spool at path so far; a spool not
// yet written is none.
func spoolSamples(t *testing.T, path string) []metrics.Sample {
	ss, _, _, err := spooltest.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Logf("reading the spool: %v", err)
	}
	return ss
}
