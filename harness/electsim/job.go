package electsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
)

// The job after its election (Options.End): each node, once it joined,
// writes its state line (RUNNING, its attempt; a restarted node's lost
// attempt counted against the job, as the sink's start does), its child
// runs for a while, and its bridge records its end with the real
// jobrun.End against the model of the job's run: the line, its failure,
// one read of the job's run, and the status, first failure and report
// where they change. Every request goes through the engine (lost,
// dropped, duplicated, delayed; the node killed at any step) and is
// retried as the write policy retries (tracker.Writes), in virtual time.

// Ends: a node's child's outcome, drawn per node and attempt.
const (
	exitClean  = 0
	exitFailed = 1
	exitKilled = 137
)

// JobResult is what the job's run holds after the schedule.
type JobResult struct {
	Status       string // the job's run's status ("RUNNING": none set)
	Want         string // the status the nodes' lines call for
	FirstFailure string // report.TagFirstFailure as recorded
	WantFailure  string // the first failure the lines call for
	Report       string // report.TagReport
	ReportRows   int    // rows of the last report written (its JSON)
	Lines        int    // state lines on the job's run
	RunBytes     int    // the job's run as runs/get answers it (its tags' JSON)
	// MaxPerNodeMinute is the most requests one node (all its lives)
	// sent in one minute of virtual time; History the series reads.
	MaxPerNodeMinute int
	History          int
	Ended            int      // nodes whose bridge recorded its end (a life of it)
	EndErrors        []string // ends that failed for good on a live node
	// BudgetSpent are the live nodes whose end gave up: a request failed
	// on every try within the write policy's budget (tracker.Writes, 30
	// s). Their end stays in their spool, for `bridge sync`.
	BudgetSpent []string
	Live        LiveResult // with Options.Tick
}

// jobRun is the job's run in the model: what runs/get returns.
type jobRun struct {
	tags      map[string]string
	series    map[string][]point // LogPoints
	status    string
	end       time.Time
	artifacts map[string][]byte
}

func (m *model) job(id string) *jobRun {
	if m.jobs == nil {
		m.jobs = map[string]*jobRun{}
	}
	j := m.jobs[id]
	if j == nil {
		// Created by the election (its candidate's tags): the job's key.
		j = &jobRun{tags: map[string]string{tracker.TagJobKey: "sim"}, artifacts: map[string][]byte{}, series: map[string][]point{}}
		m.jobs[id] = j
	}
	return j
}

// applyJob applies a request of the job's phase.
func (e *engine) applyJob(r *request) answer {
	if r.run == "" {
		return answer{err: tracker.Permanent(errors.New("electsim: no run id"))}
	}
	j := e.model.job(r.run)
	switch r.kind {
	case "get-run":
		if r.live {
			e.res.Job.Live.MaxRunBytes = max(e.res.Job.Live.MaxRunBytes, j.size())
		}
		st := j.status
		if st == "" {
			st = tracker.StatusRunning
		}
		latest := map[string]float64{}
		for k, p := range j.latestOf() {
			latest[k] = p.value
		}
		return answer{run: tracker.StoredRun{ID: r.run, Status: st, End: j.end, Tags: maps.Clone(j.tags), Latest: latest}}
	case "set-tags":
		maps.Copy(j.tags, r.tags)
		e.applyLive(j, r)
	case "log-points":
		e.applyLive(j, r)
	case "set-status":
		j.status, j.end = r.value, r.at
	case "put-artifact":
		j.artifacts[r.value] = r.body
	case "history":
		return answer{err: tracker.Permanent(errors.New("electsim: the job's end read a series"))}
	default:
		panic("electsim: unknown request " + r.kind)
	}
	return answer{}
}

// jobKinds are the requests of the job's phase.
var jobKinds = map[string]bool{"log-points": true, "get-run": true, "set-tags": true, "set-status": true, "put-artifact": true, "history": true}

// outcome is node index's child's exit in its life.
func (e *engine) outcome(index, life int) int {
	r := e.o.Seed*0x9e3779b97f4a7c15 + uint64(index)*1000003 + uint64(life)*7919
	r ^= r >> 29
	r *= 0xbf58476d1ce4e5b9
	r ^= r >> 32
	f := float64(r%1_000_000) / 1_000_000
	switch {
	case f < e.o.Fail:
		return exitFailed
	case f < e.o.Fail+e.o.Killed:
		return exitKilled
	}
	return exitClean
}

// runJob is a joined node's job: its line, its child, its end.
func (n *node) runJob(ctx context.Context, job string) {
	e := n.e
	who := fmt.Sprintf("node-%d", n.index)
	own := fmt.Sprintf("own-%d-%d", n.index, n.life) // its node run (not modelled)
	start := map[string]string{tracker.StateTag(who, ""): tracker.FormatLine([]tracker.Field{
		{Name: tracker.LineWho, Value: who}, {Name: tracker.LineStatus, Value: tracker.StatusRunning}, {Name: tracker.LineAttempt, Value: strconv.Itoa(n.life)},
		{Name: tracker.LineStarted, Value: strconv.FormatInt(n.Now().UnixMilli(), 10)}, {Name: tracker.LineRun, Value: own}})}
	if n.life > 0 && !e.recorded[n.index] {
		// As MLflow's sink does: an earlier attempt's failure recorded
		// on the job's run stays (one read first).
		run, err := n.GetRun(ctx, job)
		if err != nil {
			return
		}
		if run.Tags["bridge.failed."+who] == "" {
			start["bridge.failed."+who] = tracker.StatusKilled + ": the previous attempt was lost: electsim"
		}
	}
	start[tracker.TagNodes] = strconv.Itoa(e.o.Nodes)
	if err := n.SetTags(ctx, job, start); err != nil {
		return // killed, or the start failed: the sink retries it with the first samples
	}
	runFor := e.o.RunFor + time.Duration(n.rng.Int64N(int64(e.o.EndSpread)+1))
	if e.o.Tick > 0 {
		if !n.live(ctx, job, own, e.now+runFor) {
			return
		}
	} else if n.Sleep(ctx, runFor) != nil {
		return
	}
	code := e.outcome(n.index, n.life)
	// The tags a node of 8 GPUs records at its end, so that its line is
	// as long as a real one.
	end := tracker.EndInfo{ExitCode: code, Time: n.Now(), Tags: map[string]string{"bridge.exit_code": strconv.Itoa(code),
		"bridge.ended_clock": "tsc, synchronized (max error 16 ms)", "bridge.peak_working_set_megabytes": "412611",
		"bridge.memory_limit_megabytes": "1717987", "bridge.cpu_limit_cores": "112", "bridge.throttled_share_percentage": "0.412",
		"bridge.energy_gpus_joules": "8623841", "bridge.energy_node_cpu_joules": "1234568",
		report.TagFigures: `{"samples":360,"cpu_mean_cores":95.967,"cpu_peak_cores":110.97,"gpu_utilization_percentage":97.312,` +
			`"gpu_sm_active_ratio":0.781,"network_megabytes_per_second":12.345,"infiniband_megabytes_per_second":18235,"gpu_xid_errors":0,"gpu_ecc_uncorrected_errors":0}`}}
	switch code {
	case exitClean:
		end.Tags["bridge.exit_reason"] = "success"
	case exitFailed:
		end.Tags["bridge.exit_reason"] = "app_error"
	case exitKilled:
		end.Signal = 9
		end.Tags["bridge.exit_reason"] = "killed_by_signal"
	}
	// The end's clock is the wall's, synchronized as the ticks' is (not
	// the election's clock of any offset): report claims are compared
	// across nodes.
	wall := func() time.Time { return base.Add(e.now) }
	node := jobrun.Node{Node: who, Who: who, Nodes: e.o.Nodes, Attempt: n.life, Clock: wall}
	err := jobrun.End(ctx, n, jobrun.Runs{Job: job, Node: own}, node, end, discard)
	switch {
	case errors.Is(err, errKilled) || n.dead:
	case errors.Is(err, errTimeout) || errors.Is(err, errRefused):
		e.res.Job.BudgetSpent = append(e.res.Job.BudgetSpent, fmt.Sprintf("node %d.%d: %v", n.index, n.life, err))
		n.ended, n.spent = true, true
	case err != nil:
		e.res.Job.EndErrors = append(e.res.Job.EndErrors, fmt.Sprintf("node %d.%d: %v", n.index, n.life, err))
		n.ended = true
	default:
		n.ended = true
		e.recorded[n.index] = true
		e.outcomes[n.index] = code
	}
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// write is one request of the job's phase under the write policy: a
// timeout (a lost answer, a dropped request) is tried again after a
// backoff, within its budget, in virtual time.
func (n *node) write(ctx context.Context, r request) answer {
	wait, began := tracker.Writes.Initial, n.e.now
	for {
		try := r
		a := n.block(step{n: n, req: &try})
		if a.err == nil || errors.Is(a.err, errKilled) || errors.Is(a.err, tracker.ErrPermanent) ||
			n.e.now-began+wait > tracker.Writes.MaxElapsed || n.deadline > 0 && n.e.now+wait > n.deadline {
			return a
		}
		if err := n.Sleep(ctx, wait); err != nil {
			return answer{err: err}
		}
		wait = min(2*wait, tracker.Writes.Max)
	}
}

// GetRun implements tracker.RunStore.
func (n *node) GetRun(ctx context.Context, id string) (tracker.StoredRun, error) {
	if n.deadline > 0 { // a tick's read of the job's run
		n.reads++
		n.e.liveReads[int(n.e.now/time.Minute)]++
	}
	a := n.write(ctx, request{kind: "get-run", run: id, live: n.deadline > 0})
	return a.run, a.err
}

// SetTags implements tracker.RunStore.
func (n *node) SetTags(ctx context.Context, id string, tags map[string]string) error {
	return n.write(ctx, request{kind: "set-tags", run: id, tags: maps.Clone(tags)}).err
}

// History implements tracker.RunOwner: the job's end never reads one.
func (n *node) History(ctx context.Context, id, key string) ([]tracker.Point, error) {
	return nil, n.write(ctx, request{kind: "history", run: id, value: key}).err
}

// SetStatus implements tracker.RunOwner.
func (n *node) SetStatus(ctx context.Context, id, status string, end time.Time) error {
	return n.write(ctx, request{kind: "set-status", run: id, value: status, at: end}).err
}

// PutArtifact implements tracker.RunOwner.
func (n *node) PutArtifact(ctx context.Context, run tracker.StoredRun, name, _ string, body []byte) error {
	return n.write(ctx, request{kind: "put-artifact", run: run.ID, value: name, body: body}).err
}

// checkJob is the job's invariants, on the run elected: the status and
// first failure the nodes' lines call for, every live node's end in its
// line, the report written and not a claim left, the run bounded, the
// requests a node a minute bounded, no series read.
func (e *engine) checkJob(fail func(string, ...any) error) error {
	r := &e.res.Job
	if len(e.res.Elected) != 1 {
		return nil // check() said it
	}
	j := e.model.job(e.res.Elected[0])
	r.Status = j.status
	if r.Status == "" {
		r.Status = tracker.StatusRunning
	}
	r.Want = jobrun.Status(j.tags, e.o.Nodes)
	if r.Want == "" {
		r.Want = tracker.StatusRunning
	}
	rr := report.Run{ID: e.res.Elected[0], Status: r.Status, Tags: j.tags}
	r.FirstFailure = j.tags[report.TagFirstFailure]
	if f := report.FirstFailureOf(rr); f != nil {
		r.WantFailure = f.Tag()
	}
	r.Report = j.tags[report.TagReport]
	if js, ok := j.artifacts[jobrun.ReportJSON]; ok {
		var rep report.Report
		if json.Unmarshal(js, &rep) == nil {
			r.ReportRows = len(rep.Nodes)
		}
	}
	for k := range j.tags {
		if strings.HasPrefix(k, tracker.TagStatePrefix) {
			r.Lines++
		}
	}
	r.RunBytes = j.size()
	r.History = e.res.Requests["history"]
	for _, c := range e.perMinute {
		r.MaxPerNodeMinute = max(r.MaxPerNodeMinute, c)
	}
	for _, n := range e.nodes {
		if n.ended && e.recorded[n.index] {
			r.Ended++
		}
	}

	if len(r.EndErrors) > 0 {
		return fail("live nodes' ends failed: %v", r.EndErrors)
	}
	if r.History > 0 {
		return fail("the job's end read %d series", r.History)
	}
	for _, n := range e.nodes {
		if n.killed || !n.joined || n.spent {
			continue
		}
		who := fmt.Sprintf("node-%d", n.index)
		l := tracker.ParseLine(j.tags[tracker.StateTag(who, "")])
		want := tracker.TerminalStatus(tracker.EndInfo{ExitCode: e.outcomes[n.index], Signal: map[bool]int{true: 9}[e.outcomes[n.index] == exitKilled]})
		if !n.ended || l[tracker.LineStatus] != want || l[tracker.LineAttempt] != strconv.Itoa(n.life) {
			return fail("live node %d (life %d, ended %v): its line %v, want %s attempt %d", n.index, n.life, n.ended, l, want, n.life)
		}
	}
	if r.Status != r.Want {
		return fail("the job's run is %s, its lines call for %s", r.Status, r.Want)
	}
	// A failure whose line a restarted attempt replaced stays the first
	// (a record that stays): its failed tag names it.
	// So does one earlier than the lines' first (as the report reads it).
	named, _, _ := strings.Cut(r.FirstFailure, ":")
	rec, want := report.RecordedFailureOf(rr), report.FirstFailureOf(rr)
	kept := r.WantFailure == "" && j.tags["bridge.failed."+named] != "" ||
		rec != nil && want != nil && rec.Tag() == r.FirstFailure && rec.At().Before(want.At())
	if r.FirstFailure != r.WantFailure && !kept {
		return fail("first failure %q, the lines call for %q", r.FirstFailure, r.WantFailure)
	}
	if r.Status != tracker.StatusRunning {
		if !strings.HasPrefix(r.Report, "artifacts ") || r.ReportRows != e.o.Nodes {
			return fail("report %q with %d rows, want the report of %d nodes written", r.Report, r.ReportRows, e.o.Nodes)
		}
	}
	if r.RunBytes >= 1<<20 || r.Live.MaxRunBytes >= 1<<20 {
		return fail("the job's run is %d bytes (%d at most as a tick read it), want under 1 MiB", r.RunBytes, r.Live.MaxRunBytes)
	}
	if e.o.MaxPerNodeMinute > 0 && r.MaxPerNodeMinute > e.o.MaxPerNodeMinute {
		return fail("a node sent %d requests in a minute, the bound is %d", r.MaxPerNodeMinute, e.o.MaxPerNodeMinute)
	}
	if e.o.Tick > 0 {
		return e.checkLive(j, fail)
	}
	return nil
}

// size is the job's run as runs/get answers it: its tags' JSON and its
// series' latest values'.
func (j *jobRun) size() int {
	b, _ := json.Marshal(map[string]any{"tags": tagList(j.tags), "metrics": metricList(j.latestOf())})
	return len(b)
}

// tagList is tags as runs/get lists them, in a stable order.
func tagList(tags map[string]string) []map[string]string {
	out := make([]map[string]string, 0, len(tags))
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		out = append(out, map[string]string{"key": k, "value": tags[k]})
	}
	return out
}
