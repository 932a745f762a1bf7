package forensics

import (
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/bridge-dev/bridge/summary"
)

func TestTags(t *testing.T) {
	e := Evidence{ExitCode: 137, Signal: syscall.SIGKILL, CgroupVersion: "v2",
		OOMKill: counter(1, 3), OOM: counter(0, 2),
		Memory: Memory{Known: true, LimitMB: 209.7, RecentWorkingSetMB: 199.8, RecentSharePercent: 95.3,
			PeakWorkingSetMB: 205.25, PeakUsageMB: Reading{Value: 209.7, Known: true, Expected: true},
			PeakWorkingSet: summary.Figure{Value: 205.25, Known: true, Expected: true, Source: summary.SourceSampled, SharePercent: 97.87, ShareKnown: true},
			PeakUsage: summary.Figure{Value: 209.7, Known: true, Expected: true, Source: "kernel high-water mark memory.peak",
				SharePercent: 100, ShareKnown: true}},
		PeakMemoryPressureSome: Reading{Value: 62.5, Known: true, Expected: true},
		ThrottledShare:         Reading{Value: 12.345, Known: true, Expected: true},
	}
	v := Classify(e)
	got := v.Tags(e)
	want := map[string]string{
		"bridge.exit_reason":                                "cgroup_oom_kill",
		"bridge.exit_reason_detail":                         v.Summary,
		"bridge.exit_code":                                  "137",
		"bridge.peak_working_set_megabytes":                 "205.2",
		"bridge.peak_working_set_share_of_limit_percentage": "97.9",
		"bridge.peak_working_set_source":                    "sampled",
		"bridge.peak_usage_megabytes":                       "209.7",
		"bridge.peak_usage_share_of_limit_percentage":       "100.0",
		"bridge.peak_usage_source":                          "kernel high-water mark memory.peak",
		"bridge.oom_kill_count":                             "2",
		"bridge.peak_memory_pressure_percentage":            "62.5",
		"bridge.throttled_share_percentage":                 "12.3",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %q, want %q", k, got[k], w)
		}
	}
	ev := got["bridge.exit_evidence"]
	for _, s := range []string{"cgroup_version=v2", "oom=0 -> 2", "oom_kill=1 -> 3", "rule=oom_kill_rose+oom_rose", "signal=SIGKILL"} {
		if !strings.Contains(ev, s) {
			t.Errorf("bridge.exit_evidence lacks %q: %s", s, ev)
		}
	}
	if len(got) != len(want)+1 {
		t.Errorf("tags %v: want exactly %d keys", got, len(want)+1)
	}

	// Figures of no collector of the job are left out, not written as 0.
	bare := Evidence{ExitCode: 1}
	tags := Classify(bare).Tags(bare)
	for _, k := range []string{TagPeakWorkingSet, TagPeakWorkingShare, TagPeakWorkingSource, TagPeakUsage, TagPeakUsageShare,
		TagPeakUsageSource, TagOOMKillCount, TagPeakMemPressure, TagThrottledShare} {
		if v, ok := tags[k]; ok {
			t.Errorf("%s = %q without a measurement", k, v)
		}
	}
	if tags[TagExitReason] != ReasonAppError || tags[TagExitCode] != "1" {
		t.Errorf("tags = %v", tags)
	}
}

// Every peak and mean whose series the job's collectors produce, and that
// no sample had, reads "not sampled" (never 0); its share and source are
// left out.
func TestTagsNotSampled(t *testing.T) {
	e := Evidence{ExitCode: 137, Signal: syscall.SIGKILL,
		Memory:                 Memory{PeakWorkingSet: summary.Figure{Expected: true}, PeakUsage: summary.Figure{Expected: true}},
		PeakMemoryPressureSome: Reading{Expected: true},
		ThrottledShare:         Reading{Expected: true},
	}
	tags := Classify(e).Tags(e)
	for _, k := range []string{TagPeakWorkingSet, TagPeakUsage, TagPeakMemPressure, TagThrottledShare} {
		if tags[k] != summary.NotSampled {
			t.Errorf("%s = %q, want %q", k, tags[k], summary.NotSampled)
		}
	}
	for _, k := range []string{TagPeakWorkingShare, TagPeakWorkingSource, TagPeakUsageShare, TagPeakUsageSource} {
		if v, ok := tags[k]; ok {
			t.Errorf("%s = %q for a figure never sampled", k, v)
		}
	}
}

func TestRows(t *testing.T) {
	e := Evidence{ExitCode: 137, Signal: syscall.SIGKILL, OOMKill: Counter{Known: true, First: 0, Last: 1}}
	v := Classify(e)
	rows := v.Rows(e)
	if len(rows) != 2 || rows[0].What != "exit reason" || rows[0].Value != v.Reason+": "+v.Summary ||
		!strings.Contains(rows[1].Value, "not read after the exit") {
		t.Errorf("Rows = %+v", rows)
	}
}

func TestClip(t *testing.T) {
	long := strings.Repeat("é", maxTagValue) // two bytes each
	c := clip(long)
	if len(c) > maxTagValue || !utf8.ValidString(c) || !strings.HasSuffix(c, "...") {
		t.Errorf("clip: %d bytes, valid %v", len(c), utf8.ValidString(c))
	}
	if clip("short") != "short" {
		t.Error("clip changed a short string")
	}
}
