package forensics

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

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
	// TagPeakUsageShare is the kernel's high-water mark of usage (memory.peak,
	// memory.max_usage_in_bytes) against the limit: unlike the sampled
	// working set it cannot miss a spike between samples, but it counts page
	// cache too.
	TagPeakUsageShare  = "bridge.peak_usage_share_of_limit_percentage"
	TagOOMKillCount    = "bridge.oom_kill_count"
	TagPeakMemPressure = "bridge.peak_memory_pressure_percentage"
	TagThrottledShare  = "bridge.throttled_share_percentage"
	maxTagValue        = 5000 // MLflow accepts 8000 characters; keep well under it
)

// Tags are the run tags (MLflow tags, W&B summary) of a verdict. A figure
// that was not measured is left out rather than written as 0.
func (v Verdict) Tags(e Evidence) map[string]string {
	t := map[string]string{
		TagExitReason:       v.Reason,
		TagExitReasonDetail: clip(v.Summary),
		TagExitEvidence:     clip(EvidenceText(v.Evidence)),
		TagExitCode:         strconv.Itoa(e.ExitCode),
	}
	if e.Memory.Known {
		t[TagPeakWorkingSet] = mb(e.Memory.PeakWorkingSetMB)
		if e.Memory.LimitMB > 0 {
			t[TagPeakWorkingShare] = mb(e.Memory.PeakSharePercent)
			if e.Memory.PeakUsageMB.Known {
				t[TagPeakUsageShare] = mb(100 * e.Memory.PeakUsageMB.Value / e.Memory.LimitMB)
			}
		}
	}
	if e.OOMKill.Known {
		t[TagOOMKillCount] = strconv.FormatFloat(e.OOMKill.Delta(), 'f', 0, 64)
	}
	if e.PeakMemoryPressureSome.Known {
		t[TagPeakMemPressure] = mb(e.PeakMemoryPressureSome.Value)
	}
	if e.ThrottledShare.Known {
		t[TagThrottledShare] = mb(e.ThrottledShare.Value)
	}
	return t
}

// Rows are the verdict's lines of the end-of-run table.
func (v Verdict) Rows(e Evidence) []summary.Row {
	rows := []summary.Row{
		{What: "exit reason", Value: v.Reason},
		{What: "why", Value: v.Summary},
	}
	if e.OOMKill.Known && !e.OOMKill.AtExit {
		rows = append(rows, summary.Row{What: "note", Value: "the OOM counters could not be read after the exit"})
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

// clip shortens s to maxTagValue bytes at a rune boundary.
func clip(s string) string {
	if len(s) <= maxTagValue {
		return s
	}
	n := maxTagValue - 3
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
