package report

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/advice"
	"github.com/bridge-dev/bridge/forensics"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/whyslow"
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
	bottleneck                            string // the verdict's text
	exitCode                              *int
	ended, started                        time.Time // zero: not recorded
	duration, treeRSS                     *metrics.Float
	figures                               *Figures // nil: the node recorded none
	peakMB, kernelPeakMB                  *metrics.Float
	peakSource                            string
	limitMB, cpuLimit, throttled          *metrics.Float
	gpuJoules, cpuJoules                  *metrics.Float
	suggestedMB, suggestedCPU, cost       *metrics.Float // the node's advice and cost (package advice)
	unused, costBasis                     string
	run                                   string // a state line's: the node's own run, where its series are
	// refused are the numbers left out, out of their series' range:
	// "tag=value", "tag name=value" for a figure of TagFigures.
	refused []string
}

// readRecord reads a node's end from the run's tags under scope
// ("bridge.node.<id>." for a job's node in the shared run's layout,
// "bridge." for a single run or a node's own run).
func readRecord(tags map[string]string, scope string) record {
	key := func(tag string) string { return scope + strings.TrimPrefix(tag, "bridge.") }
	r := recordFrom(func(tag string) string { return strings.TrimSpace(tags[key(tag)]) }, key)
	if v := strings.TrimSpace(tags[key(TagFigures)]); v != "" {
		var f Figures
		if json.Unmarshal([]byte(v), &f) == nil {
			for _, x := range f.keepValid() {
				r.refused = append(r.refused, key(TagFigures)+" "+x)
			}
			r.figures = &f
		}
	}
	return r
}

// recordFrom reads a node's end through get, which gives the value of
// each tag a single run records, by that tag's name; name says where a
// value refused came from. Every tag name the report reads from a node is
// here, named by the bridge.* tag a single run records (the constants of
// the packages that write them, where they have one); a state line's
// fields are read by those names too (lineTags).
func recordFrom(get, name func(tag string) string) record {
	r := record{
		status: get("bridge.status"), reason: get(forensics.TagExitReason), detail: get(forensics.TagExitReasonDetail),
		signal: get("bridge.exit_signal"), clock: get(TagEndedClock),
		peakSource: get(forensics.TagPeakWorkingSource), bottleneck: get(whyslow.Tag),
	}
	// figure reads tag as a figure of series d: nil for no number ("no
	// limit", "not sampled"), and for one out of d's range, refused.
	figure := func(tag string, d *metrics.Desc) *metrics.Float {
		v, ok := number(get(tag))
		if !ok {
			return nil
		}
		return r.within(name(tag), v, d)
	}
	if c, err := strconv.Atoi(get(forensics.TagExitCode)); err == nil {
		r.exitCode = &c
	}
	if ms, err := strconv.ParseInt(get("bridge.ended"), 10, 64); err == nil && ms > 0 {
		r.ended = time.UnixMilli(ms).UTC()
	}
	if t, err := time.Parse(time.RFC3339Nano, get(forensics.TagCommandStarted)); err == nil {
		r.started = t.UTC()
	}
	if v, ok := number(get(forensics.TagCommandDuration)); ok {
		r.duration = r.inRange(name(forensics.TagCommandDuration), v, metrics.UnitSeconds.Range())
	}
	r.peakMB = figure(forensics.TagPeakWorkingSet, metrics.ContainerMemoryWorkingSet)
	r.limitMB = figure("bridge.memory_limit_megabytes", metrics.ContainerMemoryLimit) // "no limit": nil
	r.cpuLimit = figure("bridge.cpu_limit_cores", metrics.ContainerCPULimit)
	r.throttled = figure(forensics.TagThrottledShare, metrics.ContainerCPUThrottledPeriods)
	r.treeRSS = figure(forensics.TagPeakProcessRSS, metrics.ProcessMemoryRSS)
	r.gpuJoules = figure(summary.TagEnergyGPUs, metrics.GPUEnergy)
	r.cpuJoules = figure(summary.TagEnergyNodeCPU, metrics.NodeCPUEnergy)
	r.suggestedMB = figure(advice.TagSuggestedMemory, metrics.ContainerMemoryLimit)
	r.suggestedCPU = figure(advice.TagSuggestedCPU, metrics.ContainerCPULimit)
	r.cost = figure(advice.TagCost, costDesc)
	r.unused, r.costBasis = get(advice.TagUnused), get(advice.TagCostBasis)
	// The kernel's high-water mark of usage, for a bridge that predates
	// the peak's source tag (fromTags): the peak-usage tag only where its
	// source says it is the kernel's (it falls back to the samples), else
	// the forensics evidence (always the kernel's), else the share of the
	// limit, which was the kernel's before it had a source tag.
	usageSource := get(forensics.TagPeakUsageSource)
	kernelUsage := strings.HasPrefix(usageSource, summary.SourceKernelPeak)
	if kernelUsage {
		r.kernelPeakMB = figure(forensics.TagPeakUsage, metrics.ContainerMemoryPeak)
	}
	if v, ok := number(evidence(get(forensics.TagExitEvidence), "peak_usage_megabytes")); r.kernelPeakMB == nil && ok {
		r.kernelPeakMB = r.within(name(forensics.TagExitEvidence)+" peak_usage_megabytes", v, metrics.ContainerMemoryPeak)
	}
	if share := figure(forensics.TagPeakUsageShare, metrics.ContainerMemoryWorkingSetPercent); r.kernelPeakMB == nil && share != nil && r.limitMB != nil &&
		(usageSource == "" || kernelUsage) {
		r.kernelPeakMB = r.within(name(forensics.TagPeakUsageShare)+" × "+name("bridge.memory_limit_megabytes"),
			share.Float64()*r.limitMB.Float64()/100, metrics.ContainerMemoryPeak)
	}
	return r
}

// within is v, a figure of series d read from what, rounded, when it is
// within d's range (so finite); nil, and what noted as refused, when it is
// not.
func (r *record) within(what string, v float64, d *metrics.Desc) *metrics.Float {
	return r.inRange(what, v, d.Range())
}

// inRange is within for a figure of no series, by its unit's range.
func (r *record) inRange(what string, v float64, rng metrics.Range) *metrics.Float {
	if rng.Holds(v) {
		return num(v)
	}
	r.refused = append(r.refused, what+"="+strconv.FormatFloat(v, 'g', -1, 64))
	return nil
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

// number reads a number from a tag: ok is false for anything else ("no
// limit", "not sampled"); one past a float64's range ("1e999") is an
// infinity, which no range holds.
func number(s string) (float64, bool) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return v, true
}
