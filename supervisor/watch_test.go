package supervisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/waitfor"
)

// sleeper starts a process to watch; it is killed and reaped at the end.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "3600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// watched is pid watched through the pidfd (ownNS) or by looking at /proc.
func watched(t *testing.T, pid int, ownNS bool) *Watched {
	t.Helper()
	w, err := Watch("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	w.ownNS = ownNS
	return w
}

// noWatchLeft fails unless every goroutine of Wait (and of its pidfd's
// wake-up) is gone within a generous deadline.
func noWatchLeft(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "supervisor.(*Watched)") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a goroutine of Wait is left:\n%s", stacks)
		}
	}
}

// waiting waits until a goroutine of Wait is blocked where a context's end
// must reach it: in poll on the pidfd (ownNS), else in the ticker's select.
func waiting(t *testing.T, ownNS bool) {
	t.Helper()
	where, in := "supervisor.(*Watched).Wait(", " [select"
	if ownNS {
		where, in = "supervisor.(*Watched).waitPidfd(", "unix.Poll("
	}
	buf := make([]byte, 1<<20)
	waitfor.Cond(t, 30*time.Second, "Wait blocking", func() bool {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, where) && strings.Contains(g, in) {
				return true
			}
		}
		return false
	})
}

// Wait returns once the process exits, through the pidfd (own namespace)
// and through /proc (another --proc-root), and not before.
func TestWaitReturnsAtExit(t *testing.T) {
	for _, ownNS := range []bool{true, false} {
		cmd := sleeper(t)
		w := watched(t, cmd.Process.Pid, ownNS)
		done := make(chan error, 1)
		go func() { done <- w.Wait(context.Background()) }()
		select {
		case err := <-done:
			t.Fatalf("ownNS=%v: Wait returned %v while the process runs", ownNS, err)
		case <-time.After(200 * time.Millisecond):
		}
		cmd.Process.Kill() // a zombie until reaped: exited all the same
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("ownNS=%v: Wait = %v after the exit, want nil", ownNS, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("ownNS=%v: Wait did not return 30 s after the process was killed", ownNS)
		}
		if w.Alive() {
			t.Errorf("ownNS=%v: Alive after the exit", ownNS)
		}
		noWatchLeft(t)
	}
}

// Wait returns when its context ends while the process still runs (a
// signal ended `bridge attach`), and leaves no goroutine behind, in poll
// or in a ticker's wait.
func TestWaitEndsWithContext(t *testing.T) {
	for _, ownNS := range []bool{true, false} {
		cmd := sleeper(t)
		w := watched(t, cmd.Process.Pid, ownNS)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Wait(ctx) }()
		waiting(t, ownNS)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("ownNS=%v: Wait = %v, want context.Canceled", ownNS, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("ownNS=%v: Wait did not return 30 s after its context ended", ownNS)
		}
		noWatchLeft(t)
		if !w.Alive() {
			t.Fatalf("ownNS=%v: the watched process is gone", ownNS)
		}
	}
}

// Watch says when there is no process to watch: a pid that exited (a
// zombie included) or a root that is not a proc filesystem.
func TestWatchNoProcess(t *testing.T) {
	cmd := sleeper(t)
	cmd.Process.Kill()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, err := Watch("/proc", cmd.Process.Pid)
		if errors.Is(err, ErrNoProcess) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Watch of a killed process = %v, want ErrNoProcess", err)
		}
	}
	if _, err := Watch(t.TempDir()+"/none", 1); err == nil || errors.Is(err, ErrNoProcess) {
		t.Errorf("Watch of a missing root = %v, want the root's error", err)
	}
}

// parseStat counts the fields from the last ')', so a command name with
// spaces and parentheses does not shift them; a line cut short is an error.
func TestParseStat(t *testing.T) {
	line := "4242 (python (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 4 0 987654 123456 789 18446744073709551615\n"
	st, err := parseStat(line)
	if err != nil || st.state != "S" || st.start != 987654 {
		t.Errorf("parseStat: %+v, %v; want state S, starttime 987654", st, err)
	}
	for _, bad := range []string{"4242 python S 1", "4242 (python) S 1 2 3", "4242 (python) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 4 0 x"} {
		if _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
}

// The stat file is read through the bounded reader: /dev/zero in its
// place (under a --proc-root) says the process is not alive, at once.
func TestWatchStatBounded(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "77"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(root, "77", "stat")); err != nil {
		t.Fatal(err)
	}
	if _, err := Watch(root, 77); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Watch over /dev/zero: %v; want no such process", err)
	}
}
