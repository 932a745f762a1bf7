package report

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/advice"
	"github.com/bridge-dev/bridge/forensics"
	"github.com/bridge-dev/bridge/internal/printable"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
)

// A bridge's state line on a multi-node job's run (tracker.FormatLine)
// once it ended: what the job's end, its first failure and the report read
// of it, in one line, in this order. Each field is the value of the tag a
// single run records (lineTags), or one of the node's figures
// (lineFigures); a figure the node does not have is left out.
//
//	status=FINISHED exit=0 reason=success attempt=0 ended=1796656418450 clock="tsc, synchronized (max error 16 ms)" run=<its run> samples=360 ws_peak_mb=412611 ...
var (
	// lineTags: a field, and the tag a single run records it in. Those
	// that are also figures (ws_peak_mb, ...) are written from the tag
	// where it holds a number, else from the figure, and read back as the
	// tag (fromTags puts it over the figure).
	lineTags = []struct{ field, tag string }{
		{tracker.LineStatus, "bridge.status"},
		{"exit", forensics.TagExitCode},
		{"signal", "bridge.exit_signal"},
		{"reason", forensics.TagExitReason},
		{"ended", "bridge.ended"},
		{"clock", TagEndedClock},
		{"ws_peak_mb", forensics.TagPeakWorkingSet},
		{"ws_src", forensics.TagPeakWorkingSource},
		{"mem_limit_mb", "bridge.memory_limit_megabytes"},
		{"cpu_limit", "bridge.cpu_limit_cores"},
		{"throttled_pct", forensics.TagThrottledShare},
		{"gpu_j", summary.TagEnergyGPUs},
		{"cpu_j", summary.TagEnergyNodeCPU},
		{"dur_s", forensics.TagCommandDuration},
		{"tree_rss_mb", forensics.TagPeakProcessRSS},
		{"sug_mem_mb", advice.TagSuggestedMemory},
		{"sug_cpu", advice.TagSuggestedCPU},
		{"cost", advice.TagCost},
		{"why", forensics.TagExitReasonDetail},
	}
	// lineFigures: the figures that have no tag of their own.
	lineFigures = []struct {
		field string
		fig   func(*Figures) **metrics.Float
	}{
		{"cpu_mean", func(f *Figures) **metrics.Float { return &f.CPUMeanCores }},
		{"cpu_peak", func(f *Figures) **metrics.Float { return &f.CPUPeakCores }},
		{"gpu_util_pct", func(f *Figures) **metrics.Float { return &f.GPUUtilizationPercent }},
		{"sm_active", func(f *Figures) **metrics.Float { return &f.GPUSMActiveRatio }},
		{"net_mbps", func(f *Figures) **metrics.Float { return &f.NetworkMBps }},
		{"ib_mbps", func(f *Figures) **metrics.Float { return &f.InfinibandMBps }},
		{"xid", func(f *Figures) **metrics.Float { return &f.GPUXidErrors }},
		{"ecc_unc", func(f *Figures) **metrics.Float { return &f.GPUECCUncorrected }},
	}
	// tagFigures: the figure a tag of lineTags stands for, where the tag
	// holds no number.
	tagFigures = map[string]func(*Figures) **metrics.Float{
		forensics.TagPeakWorkingSet:     func(f *Figures) **metrics.Float { return &f.PeakWorkingSetMB },
		"bridge.memory_limit_megabytes": func(f *Figures) **metrics.Float { return &f.MemoryLimitMB },
		"bridge.cpu_limit_cores":        func(f *Figures) **metrics.Float { return &f.CPULimitCores },
		forensics.TagThrottledShare:     func(f *Figures) **metrics.Float { return &f.ThrottledSharePercent },
		summary.TagEnergyGPUs:           func(f *Figures) **metrics.Float { return &f.GPUEnergyJoules },
		summary.TagEnergyNodeCPU:        func(f *Figures) **metrics.Float { return &f.NodeCPUEnergyJoules },
	}
)

// Fields of the line that are not tags of a single run, and the samples
// figure, which is a count.
const (
	lineSamples = "samples"
	// whyMax bounds the reason's sentence in a line (the node's own run
	// holds it whole); a clean end writes none.
	whyMax = 200
)

// Ending is what a bridge's end line says beside its end tags: its
// status, when it ended, its attempt (-1: unknown) and its own run.
type Ending struct {
	Who     string // the bridge, first in the line (tracker.LineWho)
	Status  string
	Ended   time.Time
	Attempt int
	Run     string
	// At is when a running bridge wrote its line (tracker.LineAt): the
	// job's tick names a node whose line stops moving.
	At time.Time
	// Latest are a running bridge's latest values (LiveSignals), after its
	// figures.
	Latest Latest
}

// EndLine is a bridge's state line at its end (tracker.StateTag's value),
// from the tags its end records on a single run (exit code, forensics'
// verdict, figures: TagFigures) and e. A value that is no number where a
// number is due ("not sampled", "no limit") is left out, as the report
// leaves it out of a tag.
func EndLine(tags map[string]string, e Ending) string {
	var figs Figures
	if v := tags[TagFigures]; v != "" && json.Unmarshal([]byte(v), &figs) == nil {
		figs.keepValid()
	}
	get := func(tag string) string { return strings.TrimSpace(tags[tag]) }
	var fs []tracker.Field
	add := func(name, value string) {
		if value != "" {
			fs = append(fs, tracker.Field{Name: name, Value: value})
		}
	}
	why := ""
	add(tracker.LineWho, e.Who)
	for _, lt := range lineTags {
		v := get(lt.tag)
		switch lt.field {
		case tracker.LineStatus:
			v = e.Status
		case "ended":
			v = ""
			if !e.Ended.IsZero() {
				v = strconv.FormatInt(e.Ended.UnixMilli(), 10)
			}
		case "ws_src":
			if v == summary.SourceSampled {
				v = "" // the default where a peak is given
			}
		case "why":
			// Last, after the figures; a clean end needs none.
			if e.Status != statusFinished {
				why = printable.Clip(v, whyMax)
			}
			continue
		}
		if fig, ok := tagFigures[lt.tag]; ok {
			if _, isNum := number(v); !isNum || v == "" {
				v = lineNumber(*fig(&figs))
			}
		}
		add(lt.field, v)
		switch lt.field {
		case "reason":
			if e.Attempt >= 0 {
				add(tracker.LineAttempt, strconv.Itoa(e.Attempt))
			}
			if !e.At.IsZero() {
				add(tracker.LineAt, strconv.FormatInt(e.At.UnixMilli(), 10))
			}
		case "clock":
			add(tracker.LineRun, e.Run)
			if figs.Samples > 0 {
				add(lineSamples, strconv.Itoa(figs.Samples))
			}
		}
	}
	for _, lf := range lineFigures {
		add(lf.field, lineNumber(*lf.fig(&figs)))
	}
	fs = append(fs, e.Latest.fields()...)
	add("why", why)
	return tracker.FormatLine(fs)
}

// lineNumber writes a figure in a line: its decimal digits, no exponent
// within the range the report rounds (num).
func lineNumber(v *metrics.Float) string {
	if v == nil {
		return ""
	}
	f := v.Float64()
	if math.Abs(f) >= 1e15 {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// lineRecord reads a bridge's record from its state line, tag being the
// line's tag (to name a value refused). A line of a bridge still running
// has no end: its status is RUNNING.
func lineRecord(tag, line string) (record, map[string]string) {
	fields := tracker.ParseLine(line)
	byTag := make(map[string]string, len(lineTags))
	for _, lt := range lineTags {
		byTag[lt.tag] = lt.field
	}
	get := func(t string) string {
		f, ok := byTag[t]
		if !ok {
			return ""
		}
		return strings.TrimSpace(fields[f])
	}
	name := func(t string) string { return tag + " " + byTag[t] }
	r := recordFrom(get, name)
	if r.status == statusRunning {
		r.status = ""
	}
	if id := fields[tracker.LineRun]; tracker.ValidID("run", id) == nil {
		r.run = id
	}
	var figs Figures
	any := false
	if n, err := strconv.Atoi(fields[lineSamples]); err == nil && n > 0 {
		figs.Samples, any = n, true
	}
	for _, lf := range lineFigures {
		v, ok := number(fields[lf.field])
		if !ok {
			continue
		}
		any = true
		// Checked against its series' range by keepValid, below.
		*lf.fig(&figs) = metrics.FloatOf(v)
		if *lf.fig(&figs) == nil {
			r.refused = append(r.refused, tag+" "+lf.field+"="+fields[lf.field])
		}
	}
	if any {
		for _, x := range figs.keepValid() {
			r.refused = append(r.refused, tag+" "+x)
		}
		r.figures = &figs
	}
	return r, fields
}

// Record is one bridge's end as a job's run records it, for the job's end
// (package jobrun): from its state line, or its scoped tags (the shared
// run's layout: W&B's, and MLflow runs without state lines).
type Record struct {
	Who    string // <node>, or <node>.<task>
	Task   bool   // a further bridge of a node
	Status string // FINISHED, FAILED, KILLED; "" while it runs
	Ended  time.Time
}

// Records is every bridge's record on a job's run: its nodes' (by id),
// then their tasks'.
func Records(run Run) []Record {
	ends := endsOf(run, jobNodes(run))
	out := make([]Record, len(ends))
	for i, e := range ends {
		out[i] = Record{Who: e.who, Task: e.task, Status: e.rec.status, Ended: e.rec.ended}
	}
	return out
}
