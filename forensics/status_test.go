package forensics

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bridge-dev/bridge/harness/stallfs"
	"github.com/bridge-dev/bridge/supervisor"
	"github.com/bridge-dev/bridge/tracker"
)

func TestStatus(t *testing.T) {
	at := time.Unix(100, 0)
	oomRose := Counter{Known: true, First: 0, Last: 1, AtExit: true}
	steady := Counter{Known: true, AtExit: true}
	near := Memory{Known: true, LimitMB: 100, RecentWorkingSetMB: 99, RecentSharePercent: 99, PeakWorkingSetMB: 99}
	cases := []struct {
		name string
		e    Evidence
		want string
	}{
		{"exit 0", Evidence{}, tracker.StatusFinished},
		{"exit 1", Evidence{ExitCode: 1}, tracker.StatusFailed},
		{"cgroup OOM kill", Evidence{ExitCode: 137, Signal: syscall.SIGKILL, OOMKill: oomRose, Memory: near}, tracker.StatusFailed},
		{"a worker OOM-killed, the parent exits 1", Evidence{ExitCode: 1, OOMKill: oomRose, Memory: near}, tracker.StatusFailed},
		{"forwarded SIGTERM", Evidence{ExitCode: 143, Signal: syscall.SIGTERM, ExitTime: at,
			Forwarded: []supervisor.SignalRecord{{Signal: syscall.SIGTERM, Time: at}}}, tracker.StatusKilled},
		{"exit 143 after a forwarded SIGTERM", Evidence{ExitCode: 143, ExitTime: at,
			Forwarded: []supervisor.SignalRecord{{Signal: syscall.SIGTERM, Time: at}}}, tracker.StatusKilled},
		{"kill -9, counter steady", Evidence{ExitCode: 137, Signal: syscall.SIGKILL, OOMKill: steady}, tracker.StatusKilled},
		{"SIGTERM nobody forwarded (Slurm signals the step)", Evidence{ExitCode: 143, Signal: syscall.SIGTERM}, tracker.StatusKilled},
		{"SIGSEGV", Evidence{ExitCode: 139, Signal: syscall.SIGSEGV}, tracker.StatusFailed},
		{"a wrapper's 134 (SIGABRT)", Evidence{ExitCode: 134}, tracker.StatusFailed},
		{"SIGKILL, nothing known", Evidence{ExitCode: 137, Signal: syscall.SIGKILL}, tracker.StatusKilled},
	}
	for _, tc := range cases {
		v := Classify(tc.e)
		if got := v.Status(tc.e); got != tc.want {
			t.Errorf("%s: %s gives %s, want %s", tc.name, v.Reason, got, tc.want)
		}
	}
}

func TestClockText(t *testing.T) {
	cases := []struct {
		source string
		state  int
		status int32
		maxErr int64
		want   string
	}{
		{"tsc", unix.TIME_OK, 0, 16000, "tsc, synchronized (max error 16 ms)"},
		{"kvm-clock", unix.TIME_OK, 0, 500, "kvm-clock, synchronized (max error 500 us)"},
		{"tsc", unix.TIME_ERROR, unix.STA_UNSYNC, 16000000, "tsc, not synchronized"},
		{"tsc", unix.TIME_OK, unix.STA_UNSYNC, 0, "tsc, not synchronized"},
		{"", -1, 0, 0, "clocksource unknown, synchronization unknown"},
	}
	for _, tc := range cases {
		if got := clockText(tc.source, tc.state, tc.status, tc.maxErr); got != tc.want {
			t.Errorf("clockText(%q, %d, %d, %d) = %q, want %q", tc.source, tc.state, tc.status, tc.maxErr, got, tc.want)
		}
	}
	// This machine's clocksource, where the kernel says it, leads the text.
	want := "clocksource unknown, "
	if src, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource"); err == nil && strings.TrimSpace(string(src)) != "" {
		want = strings.TrimSpace(string(src)) + ", "
	}
	if got := ClockSource(context.Background(), "/sys"); !strings.HasPrefix(got, want) {
		t.Errorf("ClockSource on this machine: %q, want it to start with %q", got, want)
	}
	if got := ClockSource(context.Background(), t.TempDir()); !strings.HasPrefix(got, "clocksource unknown, ") {
		t.Errorf("ClockSource without a clocksource file: %q", got)
	}
}

// The clocksource file read at the end of a job is bounded: a FIFO or
// /dev/zero in its place (under the --sys-root given) is "clocksource
// unknown" at once, and one on a disk that does not answer is given up on
// when ctx ends.
func TestClockSourceBounded(t *testing.T) {
	for _, put := range []func(path string) error{
		func(path string) error { return syscall.Mkfifo(path, 0o600) },
		func(path string) error { return os.Symlink("/dev/zero", path) },
	} {
		root := t.TempDir()
		dir := filepath.Join(root, "devices/system/clocksource/clocksource0")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := put(filepath.Join(dir, "current_clocksource")); err != nil {
			t.Fatal(err)
		}
		done := make(chan string, 1)
		go func() { done <- ClockSource(context.Background(), root) }()
		select {
		case got := <-done:
			if !strings.HasPrefix(got, "clocksource unknown, ") {
				t.Errorf("ClockSource over a FIFO or /dev/zero: %q", got)
			}
		case <-time.After(time.Minute):
			t.Fatal("ClockSource over a FIFO or /dev/zero did not answer")
		}
	}

	fs := stallfs.Mount(t)
	dir := filepath.Join(fs.Dir, "devices/system/clocksource/clocksource0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "current_clocksource"), []byte("tsc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs.StallAll()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if got := ClockSource(ctx, fs.Dir); !strings.HasPrefix(got, "clocksource unknown, ") {
		t.Errorf("ClockSource on a stalled disk: %q", got)
	}
	if fs.Waiting() < 1 {
		t.Errorf("no call blocked on the stalled disk: the test did not stall the read")
	}
}
