package electsim

import (
	"context"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
)

// The job's live phase (Options.Tick): while its child runs, each node's
// lead bridge ticks once a Tick, at a phase of the period its seed draws,
// by calling the real (*jobrun.Sink).Tick against the model of the job's
// run, as pipeline's tick loop does: Live.At the virtual time (within
// half a second of it: the node's clock), Every the period, its latest
// values and figures so far, within the tick's budget (half the period,
// at most 30 s). Its requests go through the engine like every other
// (lost, dropped, duplicated, refused; the node killed at any step).

// keyReporting is the job's series of the nodes reporting, which the
// live evaluation writes once a minute (Options.Evaluated).
const keyReporting = "system/job_nodes_reporting_count"

// evaluators is how many of the first ranks take turns evaluating the job.
const evaluators = 3

// staleLine is how old a running node's line is, against the newest
// line, when the evaluation names it as stopped reporting (jobrun's).
const staleLine = 3 * time.Minute

// point is one point of a series on the job's run.
type point struct {
	at    time.Time
	step  int64
	value float64
}

// liveTick is one tick of a node that read the job's run, evaluated it
// and returned without an error: the evaluation whose writes landed.
type liveTick struct {
	node        int
	began, done time.Duration
}

// stamped is a value of the job's run's tag written at a virtual time.
type stamped struct {
	at    time.Duration
	value string
}

// LiveResult is what the live phase did.
type LiveResult struct {
	Ticks       int // ticks of all nodes
	FailedTicks int // ticks that returned an error (a request failed within the budget)
	// MaxReadsMinute is the most reads of the job's run by ticks in one
	// minute of virtual time, for the whole job; ReadMinutes the minutes
	// with a read, TwoReadMinutes those with two.
	MaxReadsMinute              int
	ReadMinutes, TwoReadMinutes int
	// CandidateDeaths are the ends of an evaluator candidate's live phase
	// (ranks 0..2) while the job ran on: killed, or its child ended.
	CandidateDeaths, CandidatesKilled int
	// Handovers are the minutes evaluated by a candidate other than the
	// minute's own (m mod 3): the minutes it adopted (Options.Evaluated).
	Handovers int
	// SeriesMinutes are the minutes the job's series has a point of;
	// MissedMinutes those a live candidate should have evaluated and none
	// did (each excused by a candidate's death: checkSeries).
	SeriesMinutes, MissedMinutes int
	// StoppedChecked are the nodes killed for good while running whose
	// naming as stopped reporting was checked (an evaluation late enough).
	StoppedChecked int
	LineRefreshes  int // a live node's line landing, a tick
	MaxRunBytes    int // the job's run at its largest as a tick read it
}

// simSink is a node's sink on the job's run as jobrun wraps MLflow's: the
// node's requests are the store's.
type simSink struct {
	*node
	job, own string
}

func (s simSink) Name() string { return "electsim" }
func (s simSink) Start(context.Context, tracker.StartInfo) ([]string, error) {
	return nil, nil
}
func (s simSink) Send(context.Context, []metrics.Sample) (int, error) { return 0, nil }
func (s simSink) Run() tracker.RunInfo                                { return tracker.RunInfo{ID: s.own, Job: s.job} }
func (s simSink) Finish(context.Context, tracker.EndInfo) error       { return nil }

// LogPoints implements tracker.SeriesWriter.
func (n *node) LogPoints(ctx context.Context, id string, values map[string]float64, at time.Time, step int64) error {
	n.evaluated = true
	return n.write(ctx, request{kind: "log-points", run: id, points: maps.Clone(values), at: at, step: step, from: n.index}).err
}

// live is the node's child running until virtual time until, its lead
// ticking once a Tick; false when the node was killed.
func (n *node) live(ctx context.Context, job, own string, until time.Duration) bool {
	e, tick := n.e, n.e.o.Tick
	who := fmt.Sprintf("node-%d", n.index)
	phase := time.Duration(n.rng.Int64N(int64(tick)))
	skew := time.Duration(n.rng.Int64N(int64(time.Second))) - time.Second/2
	killAt := -1 // the tick this candidate is killed at (Options.KillCandidates)
	if n.index < min(e.o.KillCandidates, evaluators) && n.life == 0 {
		killAt = 1 + n.rng.IntN(max(int((until-e.now)/tick)-1, 1))
	}
	node := &jobrun.Node{Node: who, Who: who, Nodes: e.o.Nodes, Attempt: n.life, Rank: n.index, Lead: n.index == 0}
	sink := jobrun.Wrap(simSink{n, job, own}, node, discard).(*jobrun.Sink)
	budget := min(tick/2, 30*time.Second)
	n.living = true
	defer func() { n.living = false }()
	for i := 0; ; i++ {
		next := (e.now-phase)/tick*tick + tick + phase
		if next >= until {
			break
		}
		if n.Sleep(ctx, time.Duration(float64(next-e.now)*n.rate)) != nil {
			return false
		}
		if i == killAt {
			e.kill(n)
			return false
		}
		at := base.Add(e.now + skew)
		n.tickAts = append(n.tickAts, at.UnixMilli())
		n.reads, n.deadline, n.evaluated = 0, e.now+budget, false
		began := e.now
		_, err := sink.Tick(ctx, job, jobrun.Live{At: at, Every: tick, Latest: n.latest(), Tags: n.figures()})
		n.deadline = 0
		if n.dead {
			return false
		}
		e.res.Job.Live.Ticks++
		if err != nil {
			e.res.Job.Live.FailedTicks++
		} else if n.reads > 0 && n.evaluated {
			e.liveTicks = append(e.liveTicks, liveTick{node: n.index, began: began, done: e.now})
		}
	}
	n.liveDone = true
	n.liveEnd = e.now
	if d := until - e.now; d > 0 {
		return n.Sleep(ctx, time.Duration(float64(d)*n.rate)) == nil
	}
	return true
}

// latest is the node's latest values of the live signals: the job's
// usual ones, and for one node in 97 a GPU far below the job's and a CPU
// throttled (a node that differs).
func (n *node) latest() report.Latest {
	v := map[string]float64{"l_sm": 0.78, "l_gu": 97.3, "l_gw": 612, "l_mhz": 1980, "l_gm": 81.2, "l_cpu": 85.7,
		"l_thr": 0.4, "l_ws": 24.1, "l_nrx": 12.3, "l_ntx": 11.9, "l_irx": 18235.4, "l_itx": 18230.1}
	if n.index%97 == 13 {
		v["l_sm"], v["l_gu"], v["l_thr"] = 0.41, 52.5, 85
	}
	out := report.Latest{}
	for k, x := range v {
		x += math.Round(n.rng.Float64()*10) / 1000 * x // within 1% of it
		if f, ok := metrics.Finite(math.Round(x*1000) / 1000); ok {
			out[k] = f
		}
	}
	return out
}

// figures are the tags a node of 8 GPUs records of itself so far.
func (n *node) figures() map[string]string {
	return map[string]string{"bridge.peak_working_set_megabytes": "412611",
		"bridge.memory_limit_megabytes": "1717987", "bridge.cpu_limit_cores": "112", "bridge.throttled_share_percentage": "0.412",
		report.TagFigures: `{"samples":360,"cpu_mean_cores":95.967,"cpu_peak_cores":110.97,"gpu_utilization_percentage":97.312,` +
			`"gpu_sm_active_ratio":0.781,"network_megabytes_per_second":12.345,"infiniband_megabytes_per_second":18235,"gpu_xid_errors":0,"gpu_ecc_uncorrected_errors":0}`}
}

// applyLive records what the invariants of the live phase need of a
// request the job's run applies: each running line's at, the values of
// bridge.job.differs, who evaluated which minute.
func (e *engine) applyLive(j *jobRun, r *request) {
	switch r.kind {
	case "set-tags":
		for k, v := range r.tags {
			if k == jobrun.TagDiffers {
				e.differs = append(e.differs, stamped{e.now, v})
			}
			who, ok := strings.CutPrefix(k, tracker.TagStatePrefix)
			if !ok || strings.Contains(who, "/") {
				continue
			}
			l := tracker.ParseLine(v)
			if ms, err := strconv.ParseInt(l[tracker.LineAt], 10, 64); err == nil && l[tracker.LineStatus] == tracker.StatusRunning {
				e.lineAts[who+"#"+l[tracker.LineAttempt]] = append(e.lineAts[who+"#"+l[tracker.LineAttempt]], ms)
			}
		}
	case "log-points":
		if _, ok := r.points[keyReporting]; ok {
			if e.evaluatedBy[r.step] == nil {
				e.evaluatedBy[r.step] = map[int]bool{}
			}
			e.evaluatedBy[r.step][r.from] = true
		}
		for k, v := range r.points {
			j.series[k] = append(j.series[k], point{at: r.at, step: r.step, value: v})
		}
	}
}

// latestOf is each series' latest value as runs/get returns it (MLflow's
// latest_metrics: the largest step, then time, then value).
func (j *jobRun) latestOf() map[string]point {
	out := map[string]point{}
	for k, ps := range j.series {
		best := ps[0]
		for _, p := range ps[1:] {
			if p.step > best.step || p.step == best.step && (p.at.After(best.at) || p.at.Equal(best.at) && p.value > best.value) {
				best = p
			}
		}
		out[k] = best
	}
	return out
}

// metricList is the series' latest values as runs/get lists them.
func metricList(latest map[string]point) []map[string]any {
	out := make([]map[string]any, 0, len(latest))
	for _, k := range slices.Sorted(maps.Keys(latest)) {
		p := latest[k]
		out = append(out, map[string]any{"key": k, "value": p.value, "timestamp": p.at.UnixMilli(), "step": p.step})
	}
	return out
}

var truncated = regexp.MustCompile(`; and \d+ more$`)

// checkLive is the live phase's invariants (Options.Tick), on the job's
// run j:
//   - reads of the job's run by ticks: at most 2 in any minute of virtual
//     time for the whole job (1 a minute, 2 where a handover overlaps);
//   - every live node's line refreshed: of a node life's ticks that ran
//     to its child's end, no two in a row whose line did not land (one
//     tick may fail for good: every try of a request failed within its
//     30 s budget);
//   - a node killed for good while running is named as stopped reporting
//     in bridge.job.differs once an evaluation read the run more than the
//     staleness bound (3 min) after its line's last at, and finished
//     within 3 minutes more;
//   - with Options.Evaluated, the job's series has a point for every
//     minute some candidate (ranks 0..k-1, k = min(3, nodes)) ticked
//     through, but for minutes lost with a candidate's death (killed, or
//     its child ended): at most one a slot it held (its own and those it
//     adopted: k-1 at most), each within the k minutes after it.
func (e *engine) checkLive(j *jobRun, fail func(string, ...any) error) error {
	r := &e.res.Job.Live
	k := int64(min(evaluators, e.o.Nodes))
	for _, c := range e.liveReads {
		r.MaxReadsMinute = max(r.MaxReadsMinute, c)
		r.ReadMinutes++
		if c == 2 {
			r.TwoReadMinutes++
		}
	}
	for _, n := range e.nodes {
		if n.index < int(k) && n.liveEnd > 0 {
			r.CandidateDeaths++
		}
	}
	baseMinute := base.UnixMilli() / e.o.Tick.Milliseconds()
	for step, by := range e.evaluatedBy {
		r.SeriesMinutes++
		for who := range by {
			if int(step%k) != who {
				r.Handovers++
			}
		}
	}
	if r.MaxReadsMinute > 2 {
		return fail("the job's run was read %d times in one minute by ticks, want at most 2", r.MaxReadsMinute)
	}
	for _, n := range e.nodes {
		if !n.liveDone || len(n.tickAts) == 0 {
			continue
		}
		landed := map[int64]bool{}
		for _, at := range e.lineAts[fmt.Sprintf("node-%d#%d", n.index, n.life)] {
			landed[at] = true
		}
		for i, at := range n.tickAts {
			if landed[at] {
				r.LineRefreshes++
			} else if i > 0 && !landed[n.tickAts[i-1]] {
				return fail("node %d.%d's line did not land on two ticks in a row (at %d and %d ms)", n.index, n.life, n.tickAts[i-1], at)
			}
		}
	}
	if err := e.checkStopped(j, fail); err != nil {
		return err
	}
	if e.o.Evaluated {
		return e.checkSeries(j, baseMinute, fail)
	}
	return nil
}

// checkStopped: killed nodes named as stopped reporting (checkLive).
func (e *engine) checkStopped(j *jobRun, fail func(string, ...any) error) error {
	r := &e.res.Job.Live
	for _, n := range e.nodes {
		who := fmt.Sprintf("node-%d", n.index)
		l := tracker.ParseLine(j.tags[tracker.StateTag(who, "")])
		last, err := strconv.ParseInt(l[tracker.LineAt], 10, 64)
		if !n.killed || l[tracker.LineStatus] != tracker.StatusRunning || l[tracker.LineAttempt] != strconv.Itoa(n.life) || err != nil {
			continue
		}
		// An evaluation that read the run late enough: its own line's at
		// (within half a second of its start) newer than the bound.
		since := time.UnixMilli(last).Sub(base) + staleLine + time.Second
		i := slices.IndexFunc(e.liveTicks, func(t liveTick) bool { return t.began > since && t.done <= since+3*time.Minute })
		if i < 0 {
			continue
		}
		r.StoppedChecked++
		due := e.liveTicks[i].done
		var value string
		for _, d := range e.differs {
			if d.at <= due {
				value = d.value
			}
		}
		named := regexp.MustCompile(`(^|; )` + who + `: [^;]*stopped reporting`)
		if !named.MatchString(value) && !truncated.MatchString(value) {
			return fail("%s died with its line at %d ms; an evaluation from %v to %v left %s = %q, not naming it",
				who, last, e.liveTicks[i].began, due, jobrun.TagDiffers, value)
		}
	}
	return nil
}

// checkSeries: a point of the job's series for each minute a candidate
// lived through (checkLive).
func (e *engine) checkSeries(j *jobRun, baseMinute int64, fail func(string, ...any) error) error {
	r := &e.res.Job.Live
	tick := e.o.Tick.Milliseconds()
	k := min(evaluators, e.o.Nodes)
	need := map[int64]bool{}
	for _, n := range e.nodes {
		if n.index >= k {
			continue
		}
		for i := 1; i+1 < len(n.tickAts); i++ {
			need[n.tickAts[i]/tick] = true // a tick before it and one after
		}
	}
	var deaths []int64 // the minutes candidates died in, or their live phases ended
	for _, n := range e.nodes {
		if n.index < k && (n.liveEnd > 0 || n.diedAt > 0) {
			deaths = append(deaths, int64(base.Add(max(n.liveEnd, n.diedAt)).UnixMilli()/tick))
		}
	}
	slices.Sort(deaths)
	// A dying candidate holds its own minutes and those it adopted: at
	// most k-1 minutes are lost with it (its slots), each before a live
	// candidate's own minute reads the run: within k minutes.
	left := make([]int, len(deaths))
	for i := range left {
		left[i] = k - 1
	}
	for _, m := range slices.Sorted(maps.Keys(need)) {
		if e.evaluatedBy[m] != nil {
			continue
		}
		r.MissedMinutes++
		d := slices.IndexFunc(deaths, func(d int64) bool { return d >= m-int64(k) && d <= m })
		for d >= 0 && d < len(deaths) && left[d] == 0 {
			d++
			if d < len(deaths) && deaths[d] > m {
				d = -1
			}
		}
		if d < 0 || d >= len(deaths) {
			return fail("the job's series %s has no point for minute %d, when a candidate lived, and no candidate's death excuses it",
				keyReporting, m-baseMinute)
		}
		left[d]--
	}
	return nil
}
