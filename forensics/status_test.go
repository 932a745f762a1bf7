package forensics

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/supervisor"
	"github.com/bridge-dev/bridge/tracker"
	"golang.org/x/sys/unix"
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
	if got := ClockSource("/sys"); !strings.HasPrefix(got, want) {
		t.Errorf("ClockSource on this machine: %q, want it to start with %q", got, want)
	}
	if got := ClockSource(t.TempDir()); !strings.HasPrefix(got, "clocksource unknown, ") {
		t.Errorf("ClockSource without a clocksource file: %q", got)
	}
}
