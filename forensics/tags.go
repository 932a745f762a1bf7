package forensics

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/bridge-dev/bridge/internal/printable"
	"github.com/bridge-dev/bridge/summary"
)

// Tag keys written at the end of a run.
const (
	TagExitReason       = "bridge.exit_reason"
	TagExitReasonDetail = "bridge.exit_reason_detail"
	TagExitEvidence     = "bridge.exit_evidence"
	TagExitCode         = "bridge.exit_code"
	TagPeakWorkingSet   = "bridge.peak_working_set_megabytes"
	TagPeakWorkingShare = "bridge.peak_working_set_share_of_limit_percentage"
	// TagPeakWorkingSource says where the peak working set comes from:
	// summary.SourceSampled, or the kernel's high-water mark at an OOM kill
	// in the cgroup (the working set reached the limit then).
	TagPeakWorkingSource = "bridge.peak_working_set_source"
	// TagPeakUsage is the highest usage (page cache included): the kernel's
	// high-water mark (memory.peak, memory.max_usage_in_bytes) where the
	// kernel keeps one, which cannot miss a spike between samples, else the
	// highest sampled; TagPeakUsageSource says which.
	TagPeakUsage       = "bridge.peak_usage_megabytes"
	TagPeakUsageShare  = "bridge.peak_usage_share_of_limit_percentage"
	TagPeakUsageSource = "bridge.peak_usage_source"
	TagOOMKillCount    = "bridge.oom_kill_count"
	TagPeakMemPressure = "bridge.peak_memory_pressure_percentage"
	TagThrottledShare  = "bridge.throttled_share_percentage"
	// TagPeakProcessRSS is the highest RSS of the child's process tree.
	TagPeakProcessRSS = "bridge.peak_process_tree_rss_megabytes"
	// TagCommandStarted is when the command started (RFC 3339, UTC,
	// milliseconds), TagCommandDuration how long it ran, in seconds.
	TagCommandStarted  = "bridge.command_started"
	TagCommandDuration = "bridge.command_duration_seconds"
	maxTagValue        = 5000 // MLflow accepts 8000 characters; keep well under it
)

// Tags are the run tags (MLflow tags, W&B summary) of a verdict. A figure
// that was not measured is never written as 0: it reads
// summary.NotSampled when the job's collectors produce its series (the job
// ended before a reading), and is left out when they do not.
func (v Verdict) Tags(e Evidence) map[string]string {
	t := map[string]string{
		TagExitReason:       v.Reason,
		TagExitReasonDetail: clip(v.Summary),
		TagExitEvidence:     clip(EvidenceText(v.Evidence)),
		TagExitCode:         strconv.Itoa(e.ExitCode),
	}
	figure(t, e.Memory.PeakWorkingSet, TagPeakWorkingSet, TagPeakWorkingShare, TagPeakWorkingSource)
	figure(t, e.Memory.PeakUsage, TagPeakUsage, TagPeakUsageShare, TagPeakUsageSource)
	if e.OOMKill.Known {
		t[TagOOMKillCount] = strconv.FormatFloat(e.OOMKill.Delta(), 'f', 0, 64)
	}
	reading(t, e.PeakMemoryPressureSome, TagPeakMemPressure)
	reading(t, e.ThrottledShare, TagThrottledShare)
	reading(t, e.PeakProcessRSS, TagPeakProcessRSS)
	if !e.Start.IsZero() {
		t[TagCommandStarted] = e.Start.UTC().Format("2006-01-02T15:04:05.000Z07:00")
		if d := e.Duration(); d > 0 {
			t[TagCommandDuration] = strconv.FormatFloat(d.Seconds(), 'f', 1, 64)
		}
	}
	return t
}

// figure writes a memory figure's tags: its value, its share of the limit
// (without a limit, none) and its source; summary.NotSampled when its
// series was expected and never sampled, nothing when it was not expected.
func figure(t map[string]string, f summary.Figure, value, share, source string) {
	switch {
	case f.Known:
		t[value], t[source] = mb(f.Value), f.Source
		if f.ShareKnown {
			t[share] = mb(f.SharePercent)
		}
	case f.Expected:
		t[value] = summary.NotSampled
	}
}

// reading writes one figure's tag, or summary.NotSampled when its series
// was expected and never sampled.
func reading(t map[string]string, r Reading, key string) {
	switch {
	case r.Known:
		t[key] = mb(r.Value)
	case r.Expected:
		t[key] = summary.NotSampled
	}
}

// Rows are the verdict's lines of the end-of-run table: the reason and
// why (docs/forensics.md explains each reason), but for a success with
// nothing to note; where an OOM verdict
// could not read the killed process from the kernel's log, why, and
// where the OOM counters were not read after the exit, what that hides.
func (v Verdict) Rows(e Evidence) []summary.Row {
	var rows []summary.Row
	if v.Summary != plainSuccess { // exit status 0 says it all
		rows = append(rows, summary.Row{What: "exit reason", Value: v.Reason + ": " + v.Summary})
	}
	if v.Evidence["killed_process"] != "" && e.KilledWhy != "" && len(e.Killed) == 0 {
		rows = append(rows, summary.Row{What: "killed process", Value: e.KilledWhy +
			"; bridge names instead the largest of the job's processes in the last sample, which the OOM killer takes first: `dmesg` on the node names the one it killed"})
	}
	if e.OOMKill.Known && !e.OOMKill.AtExit {
		rows = append(rows, summary.Row{What: "OOM counters", Value: "not read after the exit: a kill just before it is not counted, and the reason may miss it"})
	}
	return rows
}

// EvidenceText renders facts as "key=value; ..." in key order.
func EvidenceText(facts map[string]string) string {
	keys := make([]string, 0, len(facts))
	for k := range facts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%s", k, facts[k]))
	}
	return strings.Join(parts, "; ")
}

// clip keeps a tag value within maxTagValue bytes, at a rune boundary.
func clip(s string) string { return printable.Clip(s, maxTagValue) }
