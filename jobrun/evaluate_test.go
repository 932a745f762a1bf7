package jobrun

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
)

// countedSink is an MLflow sink whose reads of runs are counted.
type countedSink struct {
	*mlflow.Sink
	reads *atomic.Int64
}

func (c countedSink) GetRun(ctx context.Context, id string) (tracker.StoredRun, error) {
	c.reads.Add(1)
	return c.Sink.GetRun(ctx, id)
}

// liveJob starts a job of n nodes on srv and returns the job's run and
// each node's tick sink (rank i), their reads of runs counted in reads.
func liveJob(t *testing.T, srv *mlflowtest.Server, n int, reads *atomic.Int64) (string, []*Sink) {
	t.Helper()
	exp, key := unique(t), "test:"+unique(t)
	nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, n, nil)
	startTogether(t, nodes)
	job := oneRun(t, srv, exp, key, nodes)
	sinks := make([]*Sink, n)
	for i, nd := range nodes {
		sinks[i] = rankSink(t, nd, n, i, reads)
	}
	return job, sinks
}

// rankSink is node nd's tick sink as the lead bridge of rank i of n nodes
// (a bridge started again on the node gets a new one).
func rankSink(t *testing.T, nd *node, n, i int, reads *atomic.Int64) *Sink {
	return Wrap(countedSink{nd.raw, reads}, NodeOf(&tracker.Job{Node: nd.id, Nodes: n, Attempt: 0, Rank: i}), quiet(t)).(*Sink)
}

// minuteOf is the start of a minute near now whose index is a multiple
// of k.
func minuteOf(k int64) int64 {
	m := time.Now().UnixMilli() / time.Minute.Milliseconds()
	return m - m%k
}

func at(m int64, d time.Duration) time.Time {
	return time.UnixMilli(m * time.Minute.Milliseconds()).Add(d)
}

// runningLine is a node's line while it runs, written at w, with latest
// values fields ("l_sm=0.5 ...").
func runningLine(node string, w time.Time, fields string) string {
	return fmt.Sprintf("who=%s status=RUNNING attempt=0 at=%d run=%s samples=10 %s", node, w.UnixMilli(), strings.Repeat("a", 32), fields)
}

// One evaluation on a real server, by rank 0 of a 5-node job at its
// minute: the job's series are the min, median and max of the fresh
// running lines' latest values (its own line's included; an ended node's
// and a stale node's left out, an old line without the fields counted as
// reporting), written once at the minute's start with step m; nodes
// reporting and differing counted; the stale node named as stopped
// reporting in bridge.job.differs, and an open span of it in
// bridge.job.differed, closed on a later evaluation once its line moves
// again; the report shows the spans (JSON and Markdown). One read an
// evaluation, and the minute evaluated recorded by the node.
func TestLiveEvaluationSeries(t *testing.T) {
	srv := mlflowtest.Shared(t)
	var reads atomic.Int64
	job, sinks := liveJob(t, srv, 5, &reads)
	ctx := context.Background()
	m := minuteOf(3)
	now := at(m, 5*time.Second)
	set := func(tags map[string]string) {
		if err := sinks[1].store.SetTags(ctx, job, tags); err != nil {
			t.Fatal(err)
		}
	}
	set(map[string]string{
		tracker.StateTag("node-1", ""): runningLine("node-1", now.Add(-30*time.Second), "l_sm=0.2 l_gw=300 l_cpu=50"),
		tracker.StateTag("node-2", ""): runningLine("node-2", now.Add(-2*time.Minute), "l_sm=0.8 l_gw=500"),
		tracker.StateTag("node-3", ""): runningLine("node-3", now.Add(-10*time.Minute), "l_sm=0.9 l_gw=100 l_cpu=99"),
		tracker.StateTag("node-4", ""): "who=node-4 status=FINISHED exit=0 reason=success attempt=0 ended=1 run=" + strings.Repeat("b", 32) + " l_sm=0.01",
	})
	live := Live{At: now, Every: time.Minute, Latest: report.Latest{}}
	for f, v := range map[string]float64{"l_sm": 0.5, "l_gw": 400} {
		live.Latest[f] = mustFloat(t, v)
	}
	reads.Store(0)
	if _, err := sinks[0].Tick(ctx, "own", live); err != nil {
		t.Fatal(err)
	}
	if r := reads.Load(); r != 1 {
		t.Errorf("an evaluation read runs %d times, want 1", r)
	}
	pts := func(key string) []tracker.Point {
		p, err := sinks[0].store.(tracker.RunOwner).History(ctx, job, key)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	want := map[string]float64{
		"system/job_gpu_sm_active_ratio_min": 0.2, "system/job_gpu_sm_active_ratio_median": 0.5, "system/job_gpu_sm_active_ratio_max": 0.8,
		"system/job_gpu_power_usage_watts_min": 300, "system/job_gpu_power_usage_watts_median": 400, "system/job_gpu_power_usage_watts_max": 500,
		"system/job_cpu_utilization_percentage_min": 50, "system/job_cpu_utilization_percentage_median": 50,
		KeyReporting: 3, KeyDiffering: 1,
	}
	for key, w := range want {
		if p := pts(key); len(p) != 1 || p[0].Value != w || !p[0].Time.Equal(at(m, 0)) {
			t.Errorf("%s: %v, want one point %v at the minute's start %v", key, p, w, at(m, 0))
		}
	}
	run := srv.GetRun(t, job)
	if _, ok := run.Latest["system/job_gpu_utilization_percentage_min"]; ok {
		t.Error("a series of a signal no line has")
	}
	if step := run.Latest[KeyReporting].Step; step != m {
		t.Errorf("the series' step %d, want the minute %d", step, m)
	}
	if e := run.Tags[TagEvaluated]; e != strconv.FormatInt(m, 10)+" by=node-0" {
		t.Errorf("%s = %q", TagEvaluated, e)
	}
	if d := run.Tags[TagDiffers]; !strings.HasPrefix(d, "node-3: stopped reporting at ") || strings.Contains(d, ";") {
		t.Errorf("%s = %q, want node-3 stopped reporting only", TagDiffers, d)
	}
	hhmm := now.UTC().Format("15:04")
	if d := run.Tags[report.TagDiffered]; d != "node-3 from "+hhmm {
		t.Errorf("%s = %q, want node-3's span open from %s", report.TagDiffered, d, hhmm)
	}

	later := at(m+3, 5*time.Second)
	set(map[string]string{tracker.StateTag("node-3", ""): runningLine("node-3", later, "l_sm=0.5"),
		tracker.StateTag("node-1", ""): runningLine("node-1", later, "l_sm=0.5"), tracker.StateTag("node-2", ""): runningLine("node-2", later, "l_sm=0.5")})
	if _, err := sinks[0].Tick(ctx, "own", Live{At: later, Every: time.Minute}); err != nil {
		t.Fatal(err)
	}
	run = srv.GetRun(t, job)
	span := "node-3 from " + hhmm + " to " + later.UTC().Format("15:04")
	if d := run.Tags[report.TagDiffered]; d != span {
		t.Errorf("%s = %q, want %q", report.TagDiffered, d, span)
	}
	if d := run.Tags[TagDiffers]; d != "none" {
		t.Errorf("%s = %q, want none", TagDiffers, d)
	}
	rep, err := report.Build(ctx, reportRun(tracker.StoredRun{ID: job, Tags: run.Tags}), nil)
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	if err := rep.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if len(rep.Differed) != 1 || rep.Differed[0].Node != "node-3" || !strings.Contains(string(rep.JSON()), `"differed"`) ||
		!strings.Contains(md.String(), "**Differed from the job** (UTC): "+span) {
		t.Errorf("the report's spans %+v; Markdown:\n%s", rep.Differed, md.String())
	}
}

func mustFloat(t *testing.T, v float64) metrics.Float {
	t.Helper()
	f, ok := metrics.Finite(v)
	if !ok {
		t.Fatalf("%v is not finite", v)
	}
	return f
}

// The rotation on a real server, three candidates of a 4-node job ticking
// once a minute each, in virtual minutes: one read of the job's run a
// minute, each candidate at its own minutes. When rank 1 dies, its first
// minute goes unevaluated (no read), and from the next one on rank 2
// evaluates rank 1's minutes too: one read a minute again. When rank 1's
// bridge starts again it evaluates its minutes, and its adopter leaves
// them to it within one rotation.
func TestLiveEvaluationRotation(t *testing.T) {
	srv := mlflowtest.Shared(t)
	var reads atomic.Int64
	job, sinks := liveJob(t, srv, 4, &reads)
	sinks = sinks[:3] // node-3: not a candidate; its line is written by the test
	ctx := context.Background()
	m0 := minuteOf(3)
	dead := map[int]bool{}
	var missed []int64
	tick := func(m int64) (readsThisMinute int64, by string) {
		t.Helper()
		reads.Store(0)
		for i, s := range sinks {
			if dead[i] {
				continue
			}
			if _, err := s.Tick(ctx, "own", Live{At: at(m, time.Duration(i)*time.Second), Every: time.Minute}); err != nil {
				t.Fatalf("minute %d, rank %d: %v", m, i, err)
			}
		}
		e, by, ok := lastEvaluated(srv.GetRun(t, job).Tags)
		if !ok || e != m {
			missed = append(missed, m)
			by = ""
		}
		return reads.Load(), by
	}
	for m := m0; m < m0+6; m++ {
		r, by := tick(m)
		if r != 1 || by != fmt.Sprintf("node-%d", m%3) {
			t.Errorf("minute %d: %d reads, evaluated by %q; want 1, by node-%d", m, r, by, m%3)
		}
	}
	dead[1] = true
	for m := m0 + 6; m < m0+15; m++ {
		r, by := tick(m)
		switch {
		case m == m0+7: // rank 1's first minute dead
			if r != 0 || by != "" {
				t.Errorf("minute %d (rank 1's, dead): %d reads, evaluated by %q; want none", m, r, by)
			}
		case r != 1 || by == "" || by == "node-1":
			t.Errorf("minute %d: %d reads, evaluated by %q; want 1 read and an evaluation by a live node", m, r, by)
		case m%3 == 1 && by != "node-2":
			t.Errorf("minute %d (rank 1's): evaluated by %s, want its adopter node-2", m, by)
		}
	}
	if len(missed) != 1 || missed[0] != m0+7 {
		t.Errorf("minutes not evaluated: %v, want only %d (rank 1 dead)", missed, m0+7)
	}
	dead[1] = false
	sinks[1] = rankSink(t, &node{id: "node-1", raw: sinks[1].Sink.(countedSink).Sink}, 4, 1, &reads) // started again
	m := m0 + 15                                                                                     // rank 0's
	for end := m + 6; m < end; m++ {
		r, by := tick(m)
		if by != fmt.Sprintf("node-%d", m%3) || (m > m0+16 && r != 1) {
			t.Errorf("minute %d after rank 1 came back: %d reads, evaluated by %q; want by node-%d (and 1 read after its first minute)", m, r, by, m%3)
		}
	}
}

// rotation ticks a job's first three ranks (of a 4-node job on srv,
// their reads counted) minute by minute, the dead ones left out.
type rotation struct {
	t     *testing.T
	srv   *mlflowtest.Server
	job   string
	sinks []*Sink
	reads atomic.Int64
	dead  map[int]bool
}

func newRotation(t *testing.T) *rotation {
	r := &rotation{t: t, srv: mlflowtest.Shared(t), dead: map[int]bool{}}
	r.job, r.sinks = liveJob(t, r.srv, 4, &r.reads)
	r.sinks = r.sinks[:3] // node-3: not a candidate
	return r
}

// tick is minute m's ticks: the job's run's reads, and the node that
// evaluated m ("" none).
func (r *rotation) tick(m int64) (reads int64, by string) {
	r.t.Helper()
	r.reads.Store(0)
	for i, s := range r.sinks {
		if r.dead[i] {
			continue
		}
		if _, err := s.Tick(context.Background(), "own", Live{At: at(m, time.Duration(i)*time.Second), Every: time.Minute}); err != nil {
			r.t.Fatalf("minute %d, rank %d: %v", m, i, err)
		}
	}
	if e, by, ok := lastEvaluated(r.srv.GetRun(r.t, r.job).Tags); ok && e == m {
		return r.reads.Load(), by
	}
	return r.reads.Load(), ""
}

// Two candidates of three die one after the other, the second after it
// adopted the first one's minutes: the third takes every minute, with one
// read a minute, once each slot the dead held lost one minute (rank 1's
// own; rank 2's own and the one it adopted).
func TestLiveEvaluationCascade(t *testing.T) {
	r := newRotation(t)
	m0 := minuteOf(3)
	var missed []int64
	for m := m0; m < m0+24; m++ {
		r.dead[1] = m >= m0+6  // after its minute m0+4
		r.dead[2] = m >= m0+11 // after m0+10, rank 1's minute it adopted
		reads, by := r.tick(m)
		if by == "" {
			missed = append(missed, m)
		}
		if m >= m0+14 && (reads != 1 || by != "node-0") {
			t.Errorf("minute m0+%d, ranks 1 and 2 dead: %d reads, evaluated by %q; want 1 read, by node-0", m-m0, reads, by)
		}
	}
	if want := []int64{m0 + 7, m0 + 11, m0 + 13}; !slices.Equal(missed, want) {
		t.Errorf("minutes not evaluated: %v, want %v (one a slot the dead held)", offsets(missed, m0), offsets(want, m0))
	}
}

// A candidate dead before any evaluation was recorded (killed during the
// election) loses one minute, not two: the first candidate to read the
// run takes the minutes skipped since its own first tick.
func TestLiveEvaluationFirstMinuteAdopted(t *testing.T) {
	r := newRotation(t)
	r.dead[0] = true
	m0 := minuteOf(3) // rank 0's
	var missed []int64
	for m := m0; m < m0+9; m++ {
		reads, by := r.tick(m)
		if by == "" {
			missed = append(missed, m)
		}
		if m > m0 && reads != 1 {
			t.Errorf("minute m0+%d: %d reads, want 1", m-m0, reads)
		}
	}
	if want := []int64{m0}; !slices.Equal(missed, want) {
		t.Errorf("minutes not evaluated: %v, want %v (rank 0 dead from the start)", offsets(missed, m0), offsets(want, m0))
	}
}

// offsets are minutes ms from m0.
func offsets(ms []int64, m0 int64) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, "m0+"+strconv.FormatInt(m-m0, 10))
	}
	return out
}

// bridge.job.differed: a span opens when a node differs, stays open while
// it does, closes when it no longer does and opens again when it differs
// again; past DifferedMax the oldest closed spans are cut first, an open
// one kept.
func TestDifferedSpans(t *testing.T) {
	t1 := time.Date(2026, 12, 7, 12, 3, 0, 0, time.UTC)
	d := func(nodes ...string) []differ {
		var out []differ
		for _, n := range nodes {
			out = append(out, differ{node: n, why: []string{"x"}})
		}
		return out
	}
	s := differedSpans(nil, d("node-17"), t1)
	s = differedSpans(report.ParseSpans(report.FormatSpans(s)), d("node-17", "node-3"), t1.Add(7*time.Minute))
	s = differedSpans(report.ParseSpans(report.FormatSpans(s)), d("node-3"), t1.Add(38*time.Minute))
	if got := report.FormatSpans(s); got != "node-17 from 12:03 to 12:41; node-3 from 12:10" {
		t.Errorf("spans %q", got)
	}
	s = differedSpans(report.ParseSpans(report.FormatSpans(s)), d("node-17"), t1.Add(60*time.Minute))
	if got := report.FormatSpans(s); got != "node-17 from 12:03 to 12:41; node-3 from 12:10 to 13:03; node-17 from 13:03" {
		t.Errorf("spans %q", got)
	}
	var many []report.Span
	many = append(many, report.Span{Node: "node-0", From: "01:00"}) // open, oldest
	for i := range 1000 {
		many = append(many, report.Span{Node: fmt.Sprintf("node-%d", i+1), From: "02:00", To: "03:00"})
	}
	got := report.FormatSpans(many)
	if len(got) > report.DifferedMax || !strings.HasPrefix(got, "node-0 from 01:00; ") || !strings.HasSuffix(got, "node-1000 from 02:00 to 03:00") ||
		strings.Contains(got, "node-1 from") {
		t.Errorf("cut to %d bytes: %.80s ... %.80s", len(got), got, got[max(0, len(got)-80):])
	}
	if back := report.ParseSpans(got); len(back) < 200 || back[0].To != "" {
		t.Errorf("the cut value reads back as %d spans", len(back))
	}
}

// A candidate whose clock is behind another's evaluates its own minute
// but leaves bridge.job.evaluated at the later minute the run holds: the
// last minute evaluated never goes back (else the next candidate would
// see minutes skipped that were not).
func TestEvaluatedNeverGoesBack(t *testing.T) {
	m := minuteOf(3)
	later := strconv.FormatInt(m+4, 10) + " by=node-1"
	st := &storeSink{plainSink: plainSink{run: "own0", job: "job"}, tags: map[string]string{TagEvaluated: later}}
	s := Wrap(st, NodeOf(&tracker.Job{Node: "node-0", Nodes: 3, Attempt: 0, Rank: 0}), nil).(*Sink)
	if _, err := s.Tick(context.Background(), "own0", Live{At: at(m, time.Second), Every: time.Minute}); err != nil || st.reads != 1 {
		t.Fatalf("rank 0's tick at its minute: %v, %d reads; want one", err, st.reads)
	}
	if st.tags[TagEvaluated] != later || st.tags[TagDiffers] != "none" {
		t.Errorf("%s = %q, %s = %q; want the later minute kept, the evaluation written", TagEvaluated, st.tags[TagEvaluated], TagDiffers, st.tags[TagDiffers])
	}
}
