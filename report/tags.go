package report

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Tag keys of the job's run that the report writes, and a node's record
// of its figures.
const (
	// TagFirstFailure names the job's first failure:
	// "<node>: <reason> at <UTC time> (<why>)".
	TagFirstFailure = "bridge.job.first_failure"
	// TagReport says where the job's report is, and who wrote it when.
	TagReport = "bridge.job.report"
	// TagReportSummary holds the report's summary where the server does
	// not take artifacts.
	TagReportSummary = "bridge.job.report_summary"
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
// tag name the report reads from a node is here.
func readRecord(tags map[string]string, scope string) record {
	get := func(k string) string { return strings.TrimSpace(tags[scope+k]) }
	r := record{
		status: get("status"), reason: get("exit_reason"), detail: get("exit_reason_detail"),
		signal: get("exit_signal"), clock: get("ended_clock"),
		peakSource: get("peak_working_set_source"),
	}
	if c, err := strconv.Atoi(get("exit_code")); err == nil {
		r.exitCode = &c
	}
	if ms, err := strconv.ParseInt(get("ended"), 10, 64); err == nil && ms > 0 {
		r.ended = time.UnixMilli(ms).UTC()
	}
	if v := get("figures"); v != "" {
		var f Figures
		if json.Unmarshal([]byte(v), &f) == nil {
			r.figures = &f
		}
	}
	r.peakMB = parseNum(get("peak_working_set_megabytes"))
	r.limitMB = parseNum(get("memory_limit_megabytes")) // "no limit": nil
	r.cpuLimit = parseNum(get("cpu_limit_cores"))
	r.throttled = parseNum(get("throttled_share_percentage"))
	r.gpuJoules = parseNum(get("energy_gpus_joules"))
	r.cpuJoules = parseNum(get("energy_node_cpu_joules"))
	// The kernel's high-water mark of usage: its own tag where the node
	// writes one, else the forensics evidence, else its share of the limit.
	r.kernelPeakMB = parseNum(get("peak_usage_megabytes"))
	if r.kernelPeakMB == nil {
		r.kernelPeakMB = parseNum(evidence(get("exit_evidence"), "peak_usage_megabytes"))
	}
	if share := parseNum(get("peak_usage_share_of_limit_percentage")); r.kernelPeakMB == nil && share != nil && r.limitMB != nil {
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
