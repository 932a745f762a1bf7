package electsim

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// jobOptions is a job of n nodes, each request lost, never applied or
// refused with probability faults in all (and duplicated with a quarter
// of it; an answer lost is an error after 5 s), a node killed at a step with probability kill and restarted
// half the time, 3% of children failing and 1% killed: its election, its
// run and its end.
func jobOptions(seed uint64, n int, faults, kill float64) Options {
	return Options{
		Seed: seed, Nodes: n, Tiers: true,
		StartSpread: 10 * time.Second, MaxDelay: 50 * time.Millisecond,
		Lose: faults / 4, Drop: faults / 4, Refuse: faults / 2, Dup: faults / 4, Timeout: 5 * time.Second,
		Kill: kill, Restart: 0.5, FaultsUntil: time.Hour,
		End: true, RunFor: 2 * time.Minute, EndSpread: time.Minute,
		Fail: 0.03, Killed: 0.01, MaxPerNodeMinute: 60,
	}
}

// TestJobSimulated: the whole job (election, state lines, the end, the
// first failure, the report) as a deterministic simulation, small jobs
// over many seeds with 20% of requests failing and nodes killed at any
// step. BRIDGE_ELECTSIM_SEED=<seed> replays one; 1,024 nodes are
// bench/jobsim (large N is not CI's).
func TestJobSimulated(t *testing.T) {
	from, seeds := seedRange(t, 40, 10)
	for seed := from; seed < from+uint64(seeds); seed++ {
		n := []int{2, 3, 8, 16, 32}[seed%5]
		o := jobOptions(seed, n, 0.2, []float64{0, 0.002, 0.01}[seed%3])
		res, err := Run(o)
		if err != nil {
			t.Errorf("%d nodes: %v (replay: BRIDGE_ELECTSIM_SEED=%d)", n, err, seed)
			continue
		}
		if res.Job.Ended == 0 {
			t.Errorf("seed %d: no node recorded its end", seed)
		}
	}
}

// TestJobSimulatedCatchesAWrongStatus: the invariants can fail: a job
// whose run is FINISHED though a node's line says FAILED is refused.
func TestJobSimulatedCatchesAWrongStatus(t *testing.T) {
	e := newEngine(jobOptions(1, 2, 0, 0))
	e.res.Elected = []string{"r"}
	j := e.model.job("r")
	j.status = "FINISHED"
	j.tags["bridge.nodes"] = "2"
	j.tags["bridge.state.node-0"] = "status=FAILED exit=1 reason=app_error ended=1"
	j.tags["bridge.failed.node-0"] = "FAILED: exit 1"
	err := e.checkJob(func(f string, a ...any) error { return fmt.Errorf(f, a...) })
	if err == nil {
		t.Error("a FINISHED run with a FAILED line passed")
	}
}

// liveOptions is jobOptions with the live phase: each node's lead ticks
// once a minute over a child that runs 7 to 8 minutes (long enough for a
// killed node's line to go stale and be named), and kills that many
// evaluator candidates (ranks 0..2) at a tick of their live phase.
func liveOptions(seed uint64, n int, faults, kill float64, kills int) Options {
	o := jobOptions(seed, n, faults, kill)
	o.Tick, o.RunFor, o.KillCandidates = time.Minute, 7*time.Minute, kills
	return o
}

// TestLiveSimulated: the job's live phase (the real jobrun.Sink.Tick of
// each node's lead once a minute, the evaluators' rotation among ranks
// 0..2), then its end, over many seeds with 20% of requests failing,
// nodes killed at any step and, in two seeds of three, evaluator
// candidates killed at a tick: the live invariants (checkLive) but the
// job's series', and the end's.
func TestLiveSimulated(t *testing.T) { playLive(t, false) }

// TestLiveHandoverSimulated is TestLiveSimulated with the job's series
// checked too (Options.Evaluated): a point for every minute a candidate
// lived through, but the minutes lost with a dead candidate's slots.
func TestLiveHandoverSimulated(t *testing.T) { playLive(t, true) }

func playLive(t *testing.T, evaluated bool) {
	from, seeds := seedRange(t, 24, 6)
	var deaths, checked, handovers int
	for seed := from; seed < from+uint64(seeds); seed++ {
		n := []int{2, 3, 8, 16, 32, 64}[seed%6]
		o := liveOptions(seed, n, 0.2, []float64{0, 0.002, 0.01}[seed%3], []int{0, 1, 3}[seed%3])
		o.Evaluated = evaluated
		res, err := Run(o)
		l := res.Job.Live
		t.Logf("seed %d, %d nodes: %+v", seed, n, l)
		if err != nil {
			t.Errorf("%d nodes: %v (replay: BRIDGE_ELECTSIM_SEED=%d go test -run %s)", n, err, seed, t.Name())
			continue
		}
		if l.Ticks == 0 || l.ReadMinutes == 0 || l.LineRefreshes == 0 || l.SeriesMinutes == 0 {
			t.Errorf("seed %d: the live phase did not run: %+v", seed, l)
		}
		deaths += l.CandidatesKilled
		checked += l.StoppedChecked
		handovers += l.Handovers
	}
	if seeds > 1 && (deaths == 0 || checked == 0 || handovers == 0) {
		t.Errorf("over %d seeds: %d candidates killed, %d minutes handed over, %d stopped nodes checked: the schedule misses the handover",
			seeds, deaths, handovers, checked)
	}
}

// TestLiveCatchesViolations: each invariant of the live phase fails on a
// job's run that breaks it, and passes on the same run without the
// violation (checkLive).
func TestLiveCatchesViolations(t *testing.T) {
	ms := func(d time.Duration) int64 { return base.Add(d).UnixMilli() }
	// A job of 4 nodes that ran minutes 0 to 9: every node ticking at
	// 10 s into each minute, its lines landed, the run read once a
	// minute by rank 0, node 3 killed after its tick of minute 2.
	setup := func(evaluated bool) (*engine, *jobRun) {
		o := liveOptions(1, 4, 0, 0, 0)
		o.Evaluated = evaluated
		e := newEngine(o)
		j := e.model.job("r")
		for i := range 4 {
			n := &node{e: e, index: i, liveDone: i != 3, dead: true, killed: i == 3}
			last := 10
			if i == 3 {
				last, n.liveEnd = 3, 2*time.Minute+20*time.Second
			}
			for m := range last {
				at := ms(time.Duration(m)*time.Minute + 10*time.Second)
				n.tickAts = append(n.tickAts, at)
				e.lineAts[fmt.Sprintf("node-%d#0", i)] = append(e.lineAts[fmt.Sprintf("node-%d#0", i)], at)
			}
			j.tags[fmt.Sprintf("bridge.state.node-%d", i)] = fmt.Sprintf("who=node-%d status=RUNNING attempt=0 at=%d", i, n.tickAts[len(n.tickAts)-1])
			e.nodes = append(e.nodes, n)
		}
		for m := range 10 {
			began := time.Duration(m)*time.Minute + 10*time.Second
			e.liveReads[m] = 1
			e.liveTicks = append(e.liveTicks, liveTick{node: m % 3, began: began, done: began + time.Second})
			e.evaluatedBy[base.UnixMilli()/time.Minute.Milliseconds()+int64(m)] = map[int]bool{m % 3: true}
			if m >= 6 {
				e.differs = append(e.differs, stamped{began + time.Second, "node-3: stopped reporting at 00:02:10"})
			}
		}
		return e, j
	}
	check := func(e *engine, j *jobRun) error {
		return e.checkLive(j, func(f string, a ...any) error { return fmt.Errorf(f, a...) })
	}
	for _, c := range []struct {
		name, want string
		evaluated  bool
		plant      func(e *engine, j *jobRun)
	}{
		{"three reads in a minute", "read 3 times", false, func(e *engine, _ *jobRun) { e.liveReads[4] = 3 }},
		{"a line not refreshed twice", "two ticks in a row", false, func(e *engine, _ *jobRun) {
			e.lineAts["node-1#0"] = slices.Delete(e.lineAts["node-1#0"], 4, 6)
		}},
		{"a dead node not named", "not naming it", false, func(e *engine, _ *jobRun) {
			for i := range e.differs {
				e.differs[i].value = "none"
			}
		}},
		{"a minute without the series", "no point for minute 5", true, func(e *engine, _ *jobRun) {
			delete(e.evaluatedBy, base.UnixMilli()/time.Minute.Milliseconds()+5)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, j := setup(c.evaluated)
			if err := check(e, j); err != nil {
				t.Fatalf("the run without the violation fails: %v", err)
			}
			if e.res.Job.Live.StoppedChecked != 1 {
				t.Fatalf("the dead node was not checked: %+v", e.res.Job.Live)
			}
			e, j = setup(c.evaluated)
			c.plant(e, j)
			err := check(e, j)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// TestLiveExcusesAHandover: minutes without the job's series are allowed
// after a candidate's death, one a slot it may have held (k-1 of k = 3)
// within the k minutes after it; a third, or one later, is refused.
func TestLiveExcusesAHandover(t *testing.T) {
	m0 := base.UnixMilli() / time.Minute.Milliseconds()
	for _, c := range []struct {
		missed []int
		want   string // "": allowed
	}{
		{[]int{4, 5}, ""},
		{[]int{4, 5, 6}, "no point for minute 6"},
		{[]int{4, 8}, "no point for minute 8"},
	} {
		o := liveOptions(1, 3, 0, 0, 0)
		o.Evaluated = true
		e := newEngine(o)
		n := &node{e: e, index: 0, liveDone: true}
		for m := range 10 {
			n.tickAts = append(n.tickAts, base.Add(time.Duration(m)*time.Minute+10*time.Second).UnixMilli())
			if !slices.Contains(c.missed, m) {
				e.evaluatedBy[m0+int64(m)] = map[int]bool{0: true}
			}
		}
		e.lineAts["node-0#0"] = n.tickAts
		dead := &node{e: e, index: 1, dead: true, killed: true, diedAt: 3*time.Minute + 30*time.Second}
		e.nodes = []*node{n, dead}
		err := e.checkLive(e.model.job("r"), func(f string, a ...any) error { return fmt.Errorf(f, a...) })
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("minutes %v missed after a death in minute 3: got %v, want %q", c.missed, err, c.want)
		}
	}
}

// TestJobSimulatedCatchesAHeavyRun: the run's size counts its series'
// latest values as runs/get returns them: a run whose tags are small but
// whose series are many is refused.
func TestJobSimulatedCatchesAHeavyRun(t *testing.T) {
	e := newEngine(jobOptions(1, 2, 0, 0))
	e.res.Elected = []string{"r"}
	j := e.model.job("r")
	check := func() error { return e.checkJob(func(f string, a ...any) error { return fmt.Errorf(f, a...) }) }
	if err := check(); err != nil {
		t.Fatalf("an empty running job's run fails: %v", err)
	}
	for i := range 20000 {
		j.series[fmt.Sprintf("system/job_signal_%05d_median", i)] = []point{{at: base, step: 1, value: 0.5}}
	}
	if err := check(); err == nil || !strings.Contains(err.Error(), "under 1 MiB") {
		t.Errorf("a run of 20,000 series: got %v, want it refused as over 1 MiB", err)
	}
}

// TestModelSeries: the model's job run keeps every point LogPoints sends
// and answers runs/get with each series' latest (largest step), whatever
// order the points land in (a duplicate, a late retry).
func TestModelSeries(t *testing.T) {
	e := newEngine(jobOptions(1, 2, 0, 0))
	for _, s := range []int64{5, 7, 6, 5} {
		e.applyJob(&request{kind: "log-points", run: "r", points: map[string]float64{keyReporting: float64(s)}, at: base.Add(time.Duration(s) * time.Minute), step: s})
	}
	a := e.applyJob(&request{kind: "get-run", run: "r"})
	if a.err != nil || a.run.Latest[keyReporting] != 7 {
		t.Errorf("runs/get: %v, latest %v; want %s = 7", a.err, a.run.Latest, keyReporting)
	}
	if got := len(e.model.job("r").series[keyReporting]); got != 4 {
		t.Errorf("%d points kept, want 4", got)
	}
	if len(e.evaluatedBy) != 3 {
		t.Errorf("minutes evaluated %v, want 5, 6 and 7", e.evaluatedBy)
	}
}

// TestJobSimulatedCatchesAnEndNotRecorded: a node that lived to the end of
// the schedule (stopped with the others, not killed) and whose line is
// still RUNNING is refused: every live node's end recorded.
func TestJobSimulatedCatchesAnEndNotRecorded(t *testing.T) {
	e := newEngine(jobOptions(1, 2, 0, 0))
	e.res.Elected = []string{"r"}
	j := e.model.job("r")
	j.tags["bridge.nodes"] = "2"
	j.tags["bridge.state.node-0"] = "who=node-0 status=RUNNING attempt=0"
	e.nodes = []*node{{e: e, index: 0, joined: true, dead: true}}
	err := e.checkJob(func(f string, a ...any) error { return fmt.Errorf(f, a...) })
	if err == nil || !strings.Contains(err.Error(), "live node 0") {
		t.Errorf("got %v, want the live node whose end is not in its line refused", err)
	}
	e.nodes[0].killed = true
	if err := e.checkJob(func(f string, a ...any) error { return fmt.Errorf(f, a...) }); err != nil {
		t.Errorf("a killed node's line left RUNNING is refused: %v", err)
	}
}

// seedRange is the seeds a simulated test plays: n from 1 (short with
// -short), or the one BRIDGE_ELECTSIM_SEED names.
func seedRange(t *testing.T, n, short int) (from uint64, seeds int) {
	t.Helper()
	if s := os.Getenv("BRIDGE_ELECTSIM_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("BRIDGE_ELECTSIM_SEED=%q: %v", s, err)
		}
		return v, 1
	}
	if testing.Short() {
		return 1, short
	}
	return 1, n
}
