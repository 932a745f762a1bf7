package supervisor

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/waitfor"
)

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
	waitfor.File(t, 30*time.Second, ready)
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
	waitfor.File(t, 30*time.Second, ready)
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
	requireLate(t, c)
}

// A terminal resized (SIGWINCH) or a USR signal after the child's exit is
// not a request to hurry: Late does not deliver it, and a terminating
// signal after it is still delivered.
func TestLateSignalOnlyTerminating(t *testing.T) {
	var logs syncbuf.Buffer
	c, err := Start(Options{Argv: []string{"true"}, Env: os.Environ(),
		Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if exit := c.Wait(); exit.Code != 0 {
		t.Fatalf("exit %+v", exit)
	}
	for i, sig := range []syscall.Signal{syscall.SIGWINCH, syscall.SIGUSR1, syscall.SIGUSR2} {
		if err := syscall.Kill(os.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
		waitfor.Cond(t, 30*time.Second, "bridge taking "+sig.String(), func() bool {
			return strings.Count(logs.String(), "not a request to stop") == i+1
		})
		select {
		case s := <-c.Late():
			t.Fatalf("Late delivered %v, which is not a request to stop", s)
		default:
		}
	}
	requireLate(t, c)
}

// requireLate sends bridge's process SIGTERM and fails t unless Late
// delivers it.
func requireLate(t *testing.T, c *Child) {
	t.Helper()
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

// A signal sent to every process of the job at once (Slurm's SIGTERM to a
// step on scancel or requeue) may kill the child before bridge takes its
// own copy: that copy, arriving after the child is gone, is the request the
// child obeyed, not a second one, and Late does not deliver it; a second
// signal after it does.
func TestLateCopyOfEndingSignal(t *testing.T) {
	var logs syncbuf.Buffer
	ready := filepath.Join(t.TempDir(), "ready")
	c, err := Start(Options{Argv: []string{"sh", "-c", `echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; while :; do sleep 0.1; done`, ready},
		Env: os.Environ(), Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	waitfor.File(t, 30*time.Second, ready)
	// The job's signal reaches the child first, then bridge.
	if err := syscall.Kill(c.PID(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if exit := c.Wait(); exit.Signal != syscall.SIGTERM || len(exit.Forwarded) != 0 {
		t.Fatalf("exit %+v, want killed by SIGTERM, nothing forwarded", exit)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, 30*time.Second, "bridge taking its copy of the child's SIGTERM", func() bool {
		return strings.Contains(logs.String(), "the signal that ended the child reached bridge too")
	})
	select {
	case s := <-c.Late():
		t.Fatalf("Late delivered %v, bridge's copy of the signal that ended the child", s)
	default:
	}
	requireLate(t, c) // a second one is a request to hurry
}

// SIGCHLD alone reaps (there is no poll): an orphan that dies while the
// child runs is reaped (no zombie left) and the child's own exit is seen.
func TestReapOnSIGCHLD(t *testing.T) {
	dir := t.TempDir()
	pidFile, release := filepath.Join(dir, "orphan"), filepath.Join(dir, "release")
	// The subshell starts sleep and exits: sleep is orphaned to us (the
	// subreaper) and dies 0.2 s later.
	c, err := Start(Options{
		Argv: []string{"sh", "-c", `(sleep 0.2 & echo $! > "$0.tmp"; mv "$0.tmp" "$0"); while [ ! -e "$1" ]; do sleep 0.05; done; exit 3`, pidFile, release},
		Env:  os.Environ(),
	})
	if err != nil {
		t.Fatal(err)
	}
	waitfor.File(t, 30*time.Second, pidFile)
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	orphan := strings.TrimSpace(string(b))
	state := ""
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		st, err := os.ReadFile("/proc/" + orphan + "/stat")
		if err != nil {
			state = "" // reaped
			break
		}
		// The state follows the ")" that ends the command name.
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		state = f[0]
	}
	if state != "" {
		t.Fatalf("orphan %s is still there (state %s) 30 s after it was started to live 0.2 s: not reaped on SIGCHLD", orphan, state)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the child's exit was not seen")
	}
	if exit := c.Wait(); exit.Code != 3 {
		t.Errorf("exit = %+v, want code 3", exit)
	}
}
