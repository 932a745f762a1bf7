package runner

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/pipeline"
)

// The command's whole lifecycle (exit status, signals, orphans, forensics)
// is pinned through the real binary by cmd/bridge's tests; these run Run
// in this process where that has no side effect on it: attach, and what
// ends a job before it starts.

// jobConfig is bridge's configuration from args, with no tracker and the
// spool at spool.
func jobConfig(t *testing.T, spool string, args ...string) config.Config {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	config.RegisterFlags(fs, pipeline.Choices())
	args = append([]string{"--trackers", "none", "--interval", "100ms", "--spool", spool, "--scopes", "node,process"}, args...)
	if err := config.Parse(fs, args); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(fs, pipeline.Choices())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Attach samples beside a process until it exits, records the process at
// the start and why it stopped at the end, writes its table, and exits 0.
func TestRunAttachRecordsItsEnd(t *testing.T) {
	proc := exec.Command("sleep", "3600")
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Process.Kill(); proc.Wait() })
	spool := filepath.Join(t.TempDir(), "spool.jsonl")
	var out syncbuf.Buffer
	type ran struct {
		code int
		err  error
	}
	done := make(chan ran, 1)
	go func() {
		code, err := Run(context.Background(), jobConfig(t, spool), Attach(proc.Process.Pid, ""), Options{Version: "test", Stderr: &out, Log: slog.New(slog.DiscardHandler)})
		done <- ran{code, err}
	}()
	waitfor.Cond(t, 60*time.Second, "a sample in the spool", func() bool {
		ss, _, _, err := spooltest.ReadFile(spool)
		return err == nil && len(ss) > 0
	})
	proc.Process.Kill()
	proc.Wait()
	var r ran
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("Run did not return 60 s after the process exited; output:\n%s", out.String())
	}
	if r.code != 0 || r.err != nil {
		t.Errorf("Run = %d, %v; want 0, nil", r.code, r.err)
	}
	_, _, attempts, err := spooltest.ReadFile(spool)
	if err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(proc.Process.Pid)
	if len(attempts) != 1 || attempts[0].Start.Info[tagAttachedPID] != pid || attempts[0].End == nil ||
		attempts[0].End.Info[tagAttachEnd] != "process "+pid+" exited" {
		t.Errorf("spool attempts %+v: want one, started with %s=%s and ended with %s naming the exit", attempts, tagAttachedPID, pid, tagAttachEnd)
	}
	if s := out.String(); !strings.Contains(s, "bridge attach: end") || !strings.Contains(s, "process "+pid+" exited") {
		t.Errorf("output:\n%s\nwant the end-of-run table with why attach ended", s)
	}
}

// What is wrong before the job starts ends it there: a usage error naming
// the flag (exit 2 for the caller), or a command that cannot run (127);
// nothing was started, not even the spool.
func TestRunEndsBeforeStart(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		target Target
		code   int
		err    string // "": none
		out    string
	}{
		{"no pid", Attach(0, ""), 0, "--pid=0: attach needs the process", ""},
		{"no such pid", Attach(dead.Process.Pid, ""), 0, "--pid=" + strconv.Itoa(dead.Process.Pid) + ": no such process", ""},
		{"no such command", Command([]string{"/nonexistent/train"}), 127, "", `bridge: cannot run "/nonexistent/train"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spool := filepath.Join(t.TempDir(), "spool.jsonl")
			var out syncbuf.Buffer
			code, err := Run(context.Background(), jobConfig(t, spool), tc.target, Options{Version: "test", Stderr: &out, Log: slog.New(slog.DiscardHandler)})
			if code != tc.code || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("Run = %d, %v; want %d and an error naming %q", code, err, tc.code, tc.err)
			}
			if !strings.Contains(out.String(), tc.out) {
				t.Errorf("output %q, want %q", out.String(), tc.out)
			}
			if _, err := os.Stat(spool); err == nil {
				t.Error("the spool was opened: the job started")
			}
		})
	}
}

// A terminating signal that arrives while bridge reads its settings (the
// watch its commands begin first, Watch) ends the job before it starts:
// the command never runs, one line says so, and the exit status is
// 128+N; attach samples nothing and exits 0. Nothing was started, not even
// the spool.
func TestRunSignalWhileReadingSettings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target func(ran string) Target
		code   int
		out    string
	}{
		{"command", func(ran string) Target { return Command([]string{"touch", ran}) }, 128 + int(syscall.SIGTERM),
			"bridge: SIGTERM arrived while bridge was reading its settings, before the command started: the command never ran; exit status 143"},
		{"attach", func(string) Target { return Attach(os.Getpid(), "") }, 0,
			"bridge attach: SIGTERM before sampling started: nothing was sampled or written"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			spool, ran := filepath.Join(dir, "spool.jsonl"), filepath.Join(dir, "ran")
			sig := Watch()
			defer sig.Stop()
			// The signal comes to this process, whose watch takes it.
			if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			waitfor.Cond(t, 60*time.Second, "the watch to take the SIGTERM", func() bool { return sig.ctx.Err() != nil })
			var out syncbuf.Buffer
			code, err := Run(context.Background(), jobConfig(t, spool), tc.target(ran), Options{Version: "test", Stderr: &out,
				Log: slog.New(slog.DiscardHandler), Signals: sig})
			if code != tc.code || err != nil {
				t.Errorf("Run = %d, %v; want %d, nil", code, err, tc.code)
			}
			if strings.Count(out.String(), tc.out) != 1 {
				t.Errorf("output %q, want one %q", out.String(), tc.out)
			}
			for _, f := range []string{ran, spool} {
				if _, err := os.Stat(f); err == nil {
					t.Errorf("%s exists: the job started", f)
				}
			}
		})
	}
}
