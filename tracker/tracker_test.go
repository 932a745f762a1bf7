package tracker

import (
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"5", 5 * time.Second, true},
		{" 0 ", 0, true},
		{"Thu, 01 Jan 2026 00:00:30 GMT", 30 * time.Second, true},
		{"Wed, 31 Dec 2025 23:00:00 GMT", 0, true},
		{"", 0, false},
		{"-3", 0, false},
		{"soon", 0, false},
	} {
		got, ok := ParseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %v %v, want %v %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestTerminalStatus(t *testing.T) {
	tests := []struct {
		end  EndInfo
		want string
	}{
		{EndInfo{ExitCode: 0}, StatusFinished},
		{EndInfo{ExitCode: 3}, StatusFailed},
		{EndInfo{ExitCode: 137, Signal: 9}, StatusKilled},
		{EndInfo{ExitCode: 143, Signal: 15}, StatusKilled},
		// bridge sync: a lost attempt, whatever the exit fields say.
		{EndInfo{ExitCode: 0, Status: StatusKilled}, StatusKilled},
		{EndInfo{ExitCode: 3, Status: StatusFinished}, StatusFinished},
		{EndInfo{ExitCode: 3, Status: "RUNNING"}, StatusFailed}, // not terminal: ignored
	}
	for _, tc := range tests {
		if got := TerminalStatus(tc.end); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.end, got, tc.want)
		}
	}
}

func TestSeverity(t *testing.T) {
	order := []string{"RUNNING", StatusFinished, StatusKilled, StatusFailed}
	for i := 1; i < len(order); i++ {
		if Severity(order[i]) <= Severity(order[i-1]) {
			t.Errorf("Severity(%s) = %d, not above Severity(%s) = %d", order[i], Severity(order[i]), order[i-1], Severity(order[i-1]))
		}
	}
	if Severity("") != 0 || Severity("SCHEDULED") != 0 {
		t.Error("a status that is not terminal must rank 0")
	}
}
