package supervisor

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// waitFile polls for path (the child writes it once its trap is set).
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("child never wrote %s", path)
}

// A child that ignores SIGTERM gets SIGKILL KillAfter after the forwarded
// signal; the exit says bridge killed it.
func TestKillAfter(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	c, err := Start(Options{
		Argv:      []string{"sh", "-c", `trap "" TERM; touch "$0"; while :; do sleep 0.2; done`, ready},
		Env:       os.Environ(),
		KillAfter: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFile(t, ready)
	// Bridge's own process gets the signal, as from `docker stop`.
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the child that ignores SIGTERM was not killed")
	}
	exit := c.Wait()
	if exit.Code != 137 || exit.Signal != syscall.SIGKILL {
		t.Errorf("exit = %+v, want 137 by SIGKILL", exit)
	}
	if exit.KilledAfter != 300*time.Millisecond {
		t.Errorf("KilledAfter = %v, want the grace 300ms", exit.KilledAfter)
	}
	if len(exit.Forwarded) == 0 || exit.Forwarded[0].Signal != syscall.SIGTERM {
		t.Errorf("forwarded = %+v, want SIGTERM first", exit.Forwarded)
	}
}

// A child that does exit on SIGTERM is not recorded as killed, even with
// --kill-after set.
func TestKillAfterNotNeeded(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	c, err := Start(Options{
		Argv:      []string{"sh", "-c", `trap "exit 7" TERM; touch "$0"; while :; do sleep 0.2; done`, ready},
		Env:       os.Environ(),
		KillAfter: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFile(t, ready)
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exit := c.Wait()
	if exit.Code != 7 || exit.KilledAfter != 0 {
		t.Errorf("exit = %+v, want code 7, not killed", exit)
	}
}

// A signal that arrives after the child was reaped is not lost: Late
// delivers it (the cue to cut the final flush short).
func TestLateSignal(t *testing.T) {
	c, err := Start(Options{Argv: []string{"true"}, Env: os.Environ()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if exit := c.Wait(); exit.Code != 0 {
		t.Fatalf("exit %+v", exit)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-c.Late():
		if s != syscall.SIGTERM {
			t.Errorf("late signal %v, want SIGTERM", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the signal after the child's exit never reached Late")
	}
}
