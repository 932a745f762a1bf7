package jobrun

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
)

// The job's live evaluation (docs/multinode.md, "The job's run"): once a
// tick period ("minute") one of the job's first nodes reads the job's run
// (one GetRun) and writes what the nodes' lines say of the job now: which
// nodes differ (TagDiffers), when each did (report.TagDiffered), the
// job's min, median and max of each signal the lines carry
// (report.LiveSignals) and how many nodes report and differ, as series
// (one SeriesWriter.LogPoints), and which minute it evaluated
// (TagEvaluated). Every bit of its state is on the run: whichever
// candidate evaluates next continues from it.
//
// Who evaluates: the lead bridges of the launcher's ranks 0..k-1, k =
// min(maxEvaluators, nodes). Minute m is floor(At / Every); candidate i
// evaluates the minutes with m mod k == i: the job's run is read once a
// minute, by one node. A candidate whose read (on any minute it
// evaluates) shows that the last minute evaluated is older than m-1 (a
// candidate died, or is late; with none recorded, older than its own
// first tick) takes the skipped candidates' minutes too (adopted), until
// it reads a run one of those minutes was evaluated on by another node;
// a candidate always evaluates its own minutes, even one another node
// evaluated already, so that its adopter sees it back. No compare-and-set: two evaluations of
// one minute write the same tags and the same points (at the minute's
// start, step m), MLflow keeping one of two identical points.

// TagEvaluated is the last minute the job's live evaluation evaluated,
// and by which node: "<m> by=<node>", m = floor(unix ms / the tick's
// period in ms).
const TagEvaluated = "bridge.job.evaluated"

// maxEvaluators bounds the candidates of the live evaluation.
const maxEvaluators = 3

// Keys of the job's series on its run: seriesPrefix + <signal> + _min,
// _median, _max, and the counts.
const (
	seriesPrefix = "system/job_"
	KeyReporting = seriesPrefix + "nodes_reporting_count"
	KeyDiffering = seriesPrefix + "nodes_differing_count"
)

// tickPeriodZero is the minute of a tick that gives no Every.
const tickPeriodZero = time.Minute

// turn is where a tick stands in the evaluators' rotation.
type turn struct {
	m     int64 // the tick's minute
	k     int   // candidates
	slot  int   // this node's; -1: not a candidate
	every time.Duration
}

// turnOf is the tick's turn for this node.
func (s *Sink) turnOf(live Live) turn {
	t := turn{k: 1, slot: -1, every: cmp.Or(live.Every, tickPeriodZero)}
	if n := s.node.Nodes; n > 0 {
		t.k = min(maxEvaluators, n)
	}
	if s.node.Task == "" && s.node.Rank >= 0 && s.node.Rank < t.k {
		t.slot = s.node.Rank
	}
	t.m = floorDiv(live.At.UnixMilli(), t.every.Milliseconds())
	return t
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// slotOf is the candidate whose minute m is.
func (t turn) slotOf(m int64) int { return int(((m % int64(t.k)) + int64(t.k)) % int64(t.k)) }

// evaluates reports whether this node reads the job's run on this tick:
// its own minutes and the ones it adopted, once a minute.
func (s *Sink) evaluates(t turn) bool {
	if t.slot < 0 || s.evaluatedAt == t.m && s.evaluatedOnce {
		return false
	}
	return t.slotOf(t.m) == t.slot || s.adopted[t.slotOf(t.m)]
}

// lastEvaluated reads TagEvaluated: the minute, the node; ok false when
// the run holds none.
func lastEvaluated(tags map[string]string) (m int64, by string, ok bool) {
	ms, rest, _ := strings.Cut(tags[TagEvaluated], " ")
	m, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0, "", false
	}
	return m, tracker.ParseLine(rest)["by"], true
}

// adopt updates the minutes this node evaluates for others from the run
// it read on minute t.m: it returns whether to evaluate this minute (an
// adopted minute another node evaluated already is left to it).
func (s *Sink) adopt(t turn, tags map[string]string) bool {
	if s.adopted == nil {
		s.adopted = map[int]bool{}
	}
	e, by, ok := lastEvaluated(tags)
	if ok && by != s.node.Node && s.adopted[t.slotOf(e)] {
		delete(s.adopted, t.slotOf(e)) // its candidate (or another adopter) evaluates it
	}
	// The last minute evaluated; where the run holds none yet, the minute
	// before this node's first tick: a candidate dead before the first
	// evaluation is adopted like one dead later.
	last := e
	if !ok {
		last = s.firstMinute - 1
	}
	// On every minute it evaluates (its own or adopted ones): an adopter
	// that died leaves the slots it held to the next candidate reading.
	own := t.slotOf(t.m) == t.slot
	if last < t.m-1 {
		for m := max(last+1, t.m-int64(t.k)+1); m < t.m; m++ {
			if sl := t.slotOf(m); sl != t.slot && !s.adopted[sl] {
				s.adopted[sl] = true
				s.log.Info("a candidate of the job's live evaluation skipped its minute; this node evaluates its minutes too",
					"skipped_minute", m, "last_evaluated", last, "candidate_rank", sl)
			}
		}
	}
	if !own && ok && e >= t.m && by != s.node.Node {
		delete(s.adopted, t.slotOf(t.m))
		return false
	}
	return true
}

// evaluation is what one evaluation writes: tags beside this node's line,
// and the job's series.
type evaluation struct {
	tags   map[string]string
	series map[string]float64
}

// evaluate is the live evaluation of run (read on live's tick, this
// node's line over it) for minute t.m.
func (s *Sink) evaluate(run tracker.StoredRun, rep *report.Report, live Live, t turn) evaluation {
	differing := differingNow(rep, run.Tags, live.At)
	ev := evaluation{tags: map[string]string{TagEvaluated: strconv.FormatInt(t.m, 10) + " by=" + s.node.Node}, series: map[string]float64{}}
	if e, _, ok := lastEvaluated(run.Tags); ok && e > t.m {
		delete(ev.tags, TagEvaluated) // a later minute's, by a node whose clock is ahead: the last stays the last
	}
	if d := formatDiffers(differing); d != run.Tags[TagDiffers] {
		ev.tags[TagDiffers] = d
	}
	if d := report.FormatSpans(differedSpans(report.ParseSpans(run.Tags[report.TagDiffered]), differing, live.At)); d != run.Tags[report.TagDiffered] {
		ev.tags[report.TagDiffered] = d
	}
	values := map[string][]float64{}
	reporting := 0
	for _, l := range freshLines(run.Tags, live.At) {
		reporting++
		for name, v := range report.LiveValues(l) {
			values[name] = append(values[name], v)
		}
	}
	for name, vs := range values {
		sort.Float64s(vs)
		ev.series[seriesPrefix+name+"_min"] = vs[0]
		ev.series[seriesPrefix+name+"_median"] = medianOf(vs)
		ev.series[seriesPrefix+name+"_max"] = vs[len(vs)-1]
	}
	ev.series[KeyReporting] = float64(reporting)
	ev.series[KeyDiffering] = float64(len(differing))
	return ev
}

// write writes ev on the job's run id: the tags with this node's line
// (one SetTags), the series at the minute's start, step t.m (one
// LogPoints, where the store takes series).
func (s *Sink) write(ctx context.Context, id string, ev evaluation, t turn) error {
	err := s.store.SetTags(ctx, id, ev.tags)
	if sw, ok := s.store.(tracker.SeriesWriter); ok && len(ev.series) > 0 {
		err = errors.Join(err, sw.LogPoints(ctx, id, ev.series, time.UnixMilli(t.m*t.every.Milliseconds()), t.m))
	}
	return err
}

func medianOf(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// freshLines are the fields of the job's nodes' lines that are RUNNING and
// were written within staleLine of at (or after it: another node's clock).
func freshLines(tags map[string]string, at time.Time) []map[string]string {
	var out []map[string]string
	for k, v := range tags {
		node, ok := strings.CutPrefix(k, tracker.TagStatePrefix)
		if !ok || strings.Contains(node, "/") {
			continue
		}
		l := tracker.ParseLine(v)
		ms, err := strconv.ParseInt(l[tracker.LineAt], 10, 64)
		if err != nil || l[tracker.LineStatus] != tracker.StatusRunning || at.UnixMilli()-ms > staleLine.Milliseconds() {
			continue
		}
		out = append(out, l)
	}
	return out
}

// differ is one node that differs from the job now, and why.
type differ struct {
	node string
	why  []string
}

// differingNow are the nodes that differ from the job now, by node: the
// report's rows' Differs, and the RUNNING lines older than staleLine
// against at (stopped reporting).
func differingNow(rep *report.Report, tags map[string]string, at time.Time) []differ {
	by := map[string][]string{}
	for _, n := range rep.Nodes {
		if len(n.Differs) > 0 {
			by[n.Node] = append(by[n.Node], n.Differs...)
		}
	}
	for k, v := range tags {
		node, ok := strings.CutPrefix(k, tracker.TagStatePrefix)
		if !ok || strings.Contains(node, "/") {
			continue
		}
		l := tracker.ParseLine(v)
		ms, err := strconv.ParseInt(l[tracker.LineAt], 10, 64)
		if err != nil || l[tracker.LineStatus] != tracker.StatusRunning {
			continue
		}
		if at.UnixMilli()-ms > staleLine.Milliseconds() {
			by[node] = append(by[node], "stopped reporting at "+time.UnixMilli(ms).UTC().Format("15:04:05"))
		}
	}
	out := make([]differ, 0, len(by))
	for _, node := range slices.Sorted(maps.Keys(by)) {
		out = append(out, differ{node, by[node]})
	}
	return out
}

// formatDiffers is TagDiffers' value: "none", or each node and why, within
// differsMax.
func formatDiffers(ds []differ) string {
	if len(ds) == 0 {
		return "none"
	}
	out := ""
	for i, d := range ds {
		next := out
		if i > 0 {
			next += "; "
		}
		next += d.node + ": " + strings.Join(d.why, ", ")
		if len(next) > differsMax {
			return out + fmt.Sprintf("; and %d more", len(ds)-i)
		}
		out = next
	}
	return out
}

// differedSpans is spans (TagDiffered's, read) updated at at: the open
// span of a node that no longer differs closed, one opened for a node
// that differs and has none open.
func differedSpans(spans []report.Span, now []differ, at time.Time) []report.Span {
	hhmm := at.UTC().Format(report.SpanLayout)
	differs := map[string]bool{}
	for _, d := range now {
		differs[d.node] = true
	}
	open := map[string]bool{}
	out := slices.Clone(spans)
	for i := range out {
		if out[i].To != "" {
			continue
		}
		if differs[out[i].Node] && !open[out[i].Node] {
			open[out[i].Node] = true
			continue
		}
		out[i].To = hhmm // it differs no longer (or an open span twice)
	}
	for _, d := range now {
		if !open[d.node] {
			out = append(out, report.Span{Node: d.node, From: hhmm})
		}
	}
	return out
}
