package report

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/forensics"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
)

// Tag keys of the job's run that the report writes, and a node's record
// of its figures.
const (
	// TagFirstFailure names the job's first failure:
	// "<node>: <reason> at <UTC time> (<why>)".
	TagFirstFailure = tracker.TagFirstFailure
	// TagReport says where the job's report is, and who wrote it when.
	TagReport = "bridge.job.report"
	// TagReportSummary holds the report's summary where the server does
	// not take artifacts.
	TagReportSummary = tracker.TagReportSummary
	// TagFigures is a node's figures (Figures, JSON), recorded at its end
	// under its scope (bridge.node.<id>.figures): the report reads them
	// instead of the node's series.
	TagFigures = "bridge.figures"
	// TagEndedClock is the clock a node's end time was read from, recorded
	// beside it under its scope (bridge.node.<id>.ended_clock).
	TagEndedClock = "bridge.ended_clock"
)

// record is what one node's tags say of its end.
type record struct {
	status, reason, detail, signal, clock string
	exitCode                              *int
	ended                                 time.Time // zero: not recorded
	figures                               *Figures  // nil: the node recorded none
	peakMB, kernelPeakMB                  *float64
	peakSource                            string
	limitMB, cpuLimit, throttled          *float64
	gpuJoules, cpuJoules                  *float64
}

// readRecord reads a node's end from the run's tags under scope
// ("bridge.node.<id>." for a job's node, "bridge." for a single run). Every
// tag name the report reads from a node is here, named by the bridge.* tag
// a single run records (the constants of the packages that write them,
// where they have one).
func readRecord(tags map[string]string, scope string) record {
	get := func(tag string) string {
		return strings.TrimSpace(tags[scope+strings.TrimPrefix(tag, "bridge.")])
	}
	r := record{
		status: get("bridge.status"), reason: get(forensics.TagExitReason), detail: get(forensics.TagExitReasonDetail),
		signal: get("bridge.exit_signal"), clock: get(TagEndedClock),
		peakSource: get(forensics.TagPeakWorkingSource),
	}
	if c, err := strconv.Atoi(get(forensics.TagExitCode)); err == nil {
		r.exitCode = &c
	}
	if ms, err := strconv.ParseInt(get("bridge.ended"), 10, 64); err == nil && ms > 0 {
		r.ended = time.UnixMilli(ms).UTC()
	}
	if v := get(TagFigures); v != "" {
		var f Figures
		if json.Unmarshal([]byte(v), &f) == nil {
			r.figures = &f
		}
	}
	r.peakMB = parseNum(get(forensics.TagPeakWorkingSet))
	r.limitMB = parseNum(get("bridge.memory_limit_megabytes")) // "no limit": nil
	r.cpuLimit = parseNum(get("bridge.cpu_limit_cores"))
	r.throttled = parseNum(get(forensics.TagThrottledShare))
	r.gpuJoules = parseNum(get(summary.TagEnergyGPUs))
	r.cpuJoules = parseNum(get(summary.TagEnergyNodeCPU))
	// The kernel's high-water mark of usage, for a bridge that predates
	// the peak's source tag (fromTags): the peak-usage tag only where its
	// source says it is the kernel's (it falls back to the samples), else
	// the forensics evidence (always the kernel's), else the share of the
	// limit, which was the kernel's before it had a source tag.
	usageSource := get(forensics.TagPeakUsageSource)
	kernelUsage := strings.HasPrefix(usageSource, summary.SourceKernelPeak)
	if kernelUsage {
		r.kernelPeakMB = parseNum(get(forensics.TagPeakUsage))
	}
	if r.kernelPeakMB == nil {
		r.kernelPeakMB = parseNum(evidence(get(forensics.TagExitEvidence), "peak_usage_megabytes"))
	}
	if share := parseNum(get(forensics.TagPeakUsageShare)); r.kernelPeakMB == nil && share != nil && r.limitMB != nil &&
		(usageSource == "" || kernelUsage) {
		r.kernelPeakMB = num(*share * *r.limitMB / 100)
	}
	return r
}

// evidence is one fact of a bridge.exit_evidence tag ("k=v; k=v").
func evidence(text, key string) string {
	for _, f := range strings.Split(text, "; ") {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// parseNum reads a figure from a tag; anything else ("no limit", "not
// sampled") is no figure.
func parseNum(s string) *float64 {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return nil
	}
	return num(v)
}
