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
