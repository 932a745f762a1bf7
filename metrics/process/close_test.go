package process

import (
	"context"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/bridge-dev/bridge/harness/closetest"
)

// Close beside a Collect stuck for real opening a process's stat file, a
// FIFO nobody writes: Close does not wait for it, nothing races, and
// nothing stays open once it returns.
func TestCloseWhileReadHangs(t *testing.T) {
	root := t.TempDir()
	procs := []fakeProc{{pid: 100, ppid: 1, comm: "python"}, {pid: 101, ppid: 100, comm: "worker"}}
	writeProcs(t, root, procs...)
	c := newCollector(t, TreeOptions{ProcRoot: root, RootPID: func() int { return 100 }})
	release := closetest.Fifo(t, filepath.Join(root, "101", "stat"), procs[1].statLine())
	closetest.CloseWhileReadHangs(t, c, root, release)
}

// Collect and Close at once on the real /proc, the tree of a real process
// (its stat files and children links kept open): no data race.
func TestCloseRaceReal(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & sleep 30 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	waitForTree(t, cmd.Process.Pid, 3)
	c := newCollector(t, TreeOptions{RootPID: func() int { return cmd.Process.Pid }, Cgroups: realCgroups(t)})
	closetest.Race(t, c)

	// The GPU collectors' use of the tree too: Close does not wait for a
	// walk.
	tr, err := NewTree(TreeOptions{RootPID: func() int { return cmd.Process.Pid }, Cgroups: realCgroups(t)})
	if err != nil {
		t.Fatal(err)
	}
	walked := make(chan struct{})
	go func() {
		defer close(walked)
		for range 50 {
			tr.NSpids(context.Background())
		}
	}()
	for open := true; open; {
		tr.Close()
		select {
		case <-walked:
			open = false
		default:
		}
	}
}
