package whyslow

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/stats"
)

// Tag is the run tag of the node's verdict over the job (Result.Text),
// bridge.node.<id>.bottleneck in a multi-node job.
const Tag = "bridge.bottleneck"

// ShareSeries are each cause's share of the job's time so far, by cause
// (node_bottleneck_<cause>_ratio): a chart of them is the job's profile.
var ShareSeries = func() map[Cause]*metrics.Desc {
	out := make(map[Cause]*metrics.Desc, len(Causes))
	for _, c := range Causes {
		out[c] = &metrics.Desc{Name: "node_bottleneck_" + string(c) + "_ratio", Unit: metrics.UnitRatio, Scope: metrics.ScopeNode,
			Help: "Share of the job's time so far on this node whose bottleneck verdict was " + string(c) + " (docs/metrics.md, The bottleneck)."}
	}
	return out
}()

// Analysis follows one node's job window by window: a verdict each window
// of its samples (a minute), each cause's share of the time, and the
// evidence of each cause over the windows it was the verdict of.
//
// Contract: not safe for concurrent use: Add from the goroutine that takes
// the samples, Result from the same or after it (the session's end).
type Analysis struct {
	window time.Duration

	set     stats.Set // the open window's samples
	start   time.Time // its first sample's
	open    bool
	windows int // closed

	total time.Duration
	spans map[Cause]time.Duration
	// evidence is, per cause, the windows it was the verdict of, as a
	// running mean (each its own facts weighted by span).
	evidence map[Cause]*running
	last     Verdict
}

// Verdict is one window's.
type Verdict struct {
	Cause Cause
	Why   string
	End   time.Time // the window's last sample
	Span  time.Duration
}

// New follows a job with windows of window.
func New(window time.Duration) *Analysis {
	return &Analysis{window: window, spans: map[Cause]time.Duration{}, evidence: map[Cause]*running{}}
}

// Add takes the job's next sample. When it closes a window (it is window
// after the window's first, or last is set: the job's last sample), the
// window's verdict counts, and b gets each cause's share so far, to go
// with the sample. A window is analysed with the sample that closed it
// as its first, so that a counter's growth between two windows is not
// lost.
func (a *Analysis) Add(smp metrics.Sample, b *metrics.Batch, last bool) {
	if !a.open {
		a.set, a.start, a.open = stats.Set{}, smp.Time, true
		a.set.Add(smp)
		return
	}
	a.set.Add(smp)
	span := smp.Time.Sub(a.start)
	if span < a.window && !last {
		return
	}
	// The job's last window counts when it is long enough to say
	// something: a quarter of a window, or the whole job when that is
	// shorter than one window.
	if span >= a.window || span >= a.window/4 || (a.windows == 0 && span >= stats.MinRateWindow) {
		a.close(smp.Time, span, b)
	}
	a.set, a.start = stats.Set{}, smp.Time
	a.set.Add(smp)
}

// close decides the open window and adds the shares to b.
func (a *Analysis) close(end time.Time, span time.Duration, b *metrics.Batch) {
	w := WindowOf(&a.set, span)
	c, ok := Decide(w)
	if !ok {
		return
	}
	a.windows++
	a.total += span
	a.spans[c] += span
	if a.evidence[c] == nil {
		a.evidence[c] = &running{}
	}
	a.evidence[c].add(w)
	a.last = Verdict{Cause: c, Why: Why(c, w), End: end, Span: span}
	for _, c := range Causes {
		b.Add(ShareSeries[c], float64(a.spans[c])/float64(a.total), "bottleneck verdicts")
	}
}

// Result is the job's verdict so far: the cause of the most of its time,
// why over the windows it was the verdict of, and every cause's share.
type Result struct {
	Cause   Cause
	Why     string
	Shares  map[Cause]float64 // of Span, every cause with some
	Span    time.Duration     // the time analysed
	Windows int
	Last    Verdict // the latest window's
}

// Result is the job's verdict so far; ok is false before a window closed.
func (a *Analysis) Result() (r Result, ok bool) {
	if a.windows == 0 || a.total <= 0 {
		return Result{}, false
	}
	r = Result{Shares: map[Cause]float64{}, Span: a.total, Windows: a.windows, Last: a.last}
	for _, c := range Causes {
		if s := a.spans[c]; s > 0 {
			r.Shares[c] = float64(s) / float64(a.total)
			if r.Cause == "" || s > a.spans[r.Cause] {
				r.Cause = c
			}
		}
	}
	r.Why = Why(r.Cause, a.evidence[r.Cause].mean())
	return r, true
}

// Text is the verdict as the tag and the end-of-run table say it: the
// cause, then why, then its share of the time analysed:
// "input: the 6 data-loading workers used 3.9 of the 4.0 cores allowed
// while the GPU was idle 61% of the time; the cause for 72% of 45 min".
func (r Result) Text() string {
	return fmt.Sprintf("%s: %s; the cause for %s of %s", r.Cause, r.Why, pct(r.Shares[r.Cause]), minutes(r.Span))
}

// SharesText lists every cause with a share, the largest first:
// "input 72%, gpu_compute 28%".
func (r Result) SharesText() string {
	cs := make([]Cause, 0, len(r.Shares))
	for c := range r.Shares {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool {
		if r.Shares[cs[i]] != r.Shares[cs[j]] {
			return r.Shares[cs[i]] > r.Shares[cs[j]]
		}
		return cs[i] < cs[j]
	})
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = string(c) + " " + pct(r.Shares[c])
	}
	return strings.Join(parts, ", ")
}

// minutes is a span as a user reads it: "45 min", "1.5 min", "20 s".
func minutes(d time.Duration) string {
	switch m := d.Minutes(); {
	case m >= 10:
		return fmt.Sprintf("%.0f min", m)
	case m >= 1:
		return fmt.Sprintf("%.1f min", m)
	}
	return fmt.Sprintf("%.0f s", d.Seconds())
}

// running is a running mean of windows, each fact weighted by span over
// the windows that have it (mean, kept as sums).
type running struct {
	sum    Window
	weight [numFacts]float64
}

func (r *running) add(w Window) {
	wt := max(w.Span.Seconds(), 1e-9)
	r.sum.Span += w.Span
	for f := range numFacts {
		if w.ok[f] {
			r.sum.v[f] += wt * w.v[f]
			r.weight[f] += wt
			r.sum.ok[f] = true
		}
	}
	for _, s := range []struct {
		dst *string
		v   string
	}{
		{&r.sum.GPUBusyFrom, w.GPUBusyFrom}, {&r.sum.SlowdownReason, w.SlowdownReason},
		{&r.sum.CPULimitFrom, w.CPULimitFrom}, {&r.sum.IOFrom, w.IOFrom}, {&r.sum.Link, w.Link},
	} {
		if s.v != "" {
			*s.dst = s.v
		}
	}
}

func (r *running) mean() Window {
	out := r.sum
	for f := range numFacts {
		if r.weight[f] > 0 {
			out.v[f] /= r.weight[f]
		}
	}
	return out
}
