package mlflow

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/bridge-dev/bridge/tracker"
)

// Job makes the sink one of the bridges of a multi-node job: every node's
// sink elects the same run for the job's key, with no coordinator and
// MLflow's REST API only (docs/multinode.md, "Finding the one run").
type Job struct {
	Key     string // the job's key (package jobkey)
	KeyFrom string // where the key came from, recorded on the run
	// Generation tells apart jobs that share a key over time (Slurm's job
	// start time): a first attempt joins only runs of its own generation; a
	// restarted one the newest elected run of an earlier one.
	Generation string
	Attempt    int           // the launcher's restart count; -1 unknown
	Nodes      int           // nodes the launcher started; 0 unknown
	Settle     time.Duration // T: see elect
	// Task is "" for the node's lead bridge (the one that records the node's
	// end); for another bridge of the same job on the node, its task name:
	// its tags and series are scoped to it.
	Task string
}

// Tags and params of the election. A param is written once in MLflow's
// store (a second value is refused): the election uses it as the one
// compare-and-set a tracker offers.
const (
	TagJobKey      = "bridge.job_key"
	TagJobKeyFrom  = "bridge.job_key_from"
	TagGeneration  = "bridge.job_generation"
	TagNodes       = "bridge.nodes"
	TagElected     = "bridge.elected"
	TagCandidateOf = "bridge.candidate_of"
	ParamElection  = "bridge.election"
	ParamFinished  = "bridge.finished_by"

	eligible = "eligible"
	void     = "void"
)

// DefaultSettle is the election's settle time T when Job.Settle is unset.
const DefaultSettle = time.Second

// election is the sink's state between calls of Start: a Start cut short by
// its deadline resumes where it stopped (the forwarder starts the sink
// again in the background).
type election struct {
	expID    string
	searched time.Time // when the search that found no run was sent (s)
	own      string    // this node's candidate run, "" when none
	created  time.Time // when runs/create answered (c)
	eligible int       // 0 not asked yet, 1 eligible, -1 not
	waiting  time.Time // a latecomer: when it first saw candidates and no elected run
}

// settle is T; settleWait the wait from c to the final search: T with room
// for the rate at which two nodes' monotonic clocks may drift apart (NTP
// slews by at most 0.05%; 1% is kept).
func (j *Job) settle() time.Duration {
	if j.Settle <= 0 {
		return DefaultSettle
	}
	return j.Settle
}

func (j *Job) settleWait() time.Duration { return j.settle() + j.settle()/100 + 20*time.Millisecond }

// stallAfter is how long a latecomer waits for an elected run before it
// voids and deletes candidates that will never win (their creator died).
func (j *Job) stallAfter() time.Duration { return 4*j.settle() + 2*time.Second }

func (j *Job) pollGap() time.Duration {
	return min(max(j.settle()/2, 100*time.Millisecond), 500*time.Millisecond)
}

// elect returns the job's run: the one every node of the job picks.
//
// The protocol (docs/multinode.md proves it):
//  1. search the runs tagged with the key; an elected run is the job's;
//     runs that are not elected yet mean an election is under way: wait
//     for it (a latecomer);
//  2. no run: create a candidate. s is when the search was sent, c when
//     the create answered (this node's monotonic clock); the run was
//     committed in [s, c]. If c-s > T the candidate may have been
//     committed too late for the others to see: delete it and start over;
//  3. else write the write-once param bridge.election=eligible on it. No
//     other node ever writes "eligible", and a node that finds a candidate
//     without the param writes "void": the first write decides, the same
//     for every reader;
//  4. at c+T search again. Every eligible candidate is in this search
//     (its creator's search, which found no run, came before this node's
//     commit, so it was committed before c+T); the smallest eligible run id
//     wins. Mark it elected; a loser deletes its own candidate.
//
// The smallest eligible run is never deleted (its creator sees nothing
// smaller), so every node picks it; an ineligible run is never picked, so
// deleting it is safe. Every wait is bounded by ctx.
func (s *Sink) elect(ctx context.Context, info tracker.StartInfo) (string, error) {
	el, job := &s.el, s.cfg.Job
	for {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("finding the job's run (key %s) in MLflow at %s: %w", job.Key, s.url, err)
		}
		if el.own != "" {
			id, err := s.decide(ctx)
			if id != "" || err != nil {
				return id, err
			}
			continue // the candidate lost its eligibility: start over
		}
		began := time.Now()
		runs, older, err := s.searchJob(ctx)
		if err != nil {
			return "", err
		}
		if older != "" {
			s.log.Info("restarted job: joining the run of its earlier attempt", "run_id", older, "key", job.Key)
			return older, nil
		}
		if w := electedOf(runs); w != "" {
			return w, nil
		}
		if len(runs) > 0 {
			if err := s.awaitElection(ctx, runs, began); err != nil {
				return "", err
			}
			continue
		}
		el.waiting = time.Time{}
		if err := s.candidate(ctx, info, began); err != nil {
			return "", err
		}
	}
}

// awaitElection is a latecomer's wait: an election is under way (candidates
// and no elected run). After stallAfter it voids and deletes the candidates
// that can no longer win, so that a dead creator cannot block the job.
func (s *Sink) awaitElection(ctx context.Context, runs []Run, began time.Time) error {
	el, job := &s.el, s.cfg.Job
	if el.waiting.IsZero() {
		el.waiting = began
	}
	if time.Since(el.waiting) > job.stallAfter() {
		s.log.Warn("the job's election has not finished; clearing candidates that can no longer win", "key", job.Key, "candidates", len(runs))
		for _, r := range runs {
			if v, err := s.settleParam(ctx, r); err == nil && v == void {
				s.deleteRun(ctx, r.Info.RunID, "a void candidate")
			}
		}
		el.waiting = time.Time{}
	}
	return sleep(ctx, job.pollGap())
}

// candidate creates this node's candidate run and asks for its
// eligibility; a slow create withdraws it.
func (s *Sink) candidate(ctx context.Context, info tracker.StartInfo, searched time.Time) error {
	el, job := &s.el, s.cfg.Job
	id, err := s.createCandidate(ctx, info)
	if err != nil {
		return err
	}
	el.own, el.searched, el.created, el.eligible = id, searched, time.Now(), 0
	if took := el.created.Sub(searched); took > job.settle() {
		// Committed somewhere in [s, c]: maybe after another node's final
		// search. Never eligible (only its creator would make it so).
		s.log.Info("the candidate run took longer than --job-settle to create; withdrawing it", "run_id", id, "took", took, "settle", job.settle())
		s.deleteRun(ctx, id, "a withdrawn candidate")
		el.own = ""
	}
	return nil
}

// decide finishes this node's candidacy: eligibility, the settle, the
// final search. It returns the job's run, or "" with no error when the
// candidate turned out ineligible (start over).
func (s *Sink) decide(ctx context.Context) (string, error) {
	el, job := &s.el, s.cfg.Job
	if el.eligible == 0 {
		v, err := s.setParam(ctx, el.own, ParamElection, eligible)
		if err != nil {
			return "", err
		}
		if v != eligible {
			s.log.Info("another node found the candidate before it was eligible; withdrawing it", "run_id", el.own)
			s.deleteRun(ctx, el.own, "an ineligible candidate")
			el.own = ""
			return "", nil
		}
		el.eligible = 1
	}
	if err := sleep(ctx, time.Until(el.created.Add(job.settleWait()))); err != nil {
		return "", err
	}
	runs, _, err := s.searchJob(ctx)
	if err != nil {
		return "", err
	}
	var ok []string
	var voids []string
	for _, r := range runs {
		v, err := s.settleParam(ctx, r)
		if err != nil {
			return "", err
		}
		switch v {
		case eligible:
			ok = append(ok, r.Info.RunID)
		case void:
			voids = append(voids, r.Info.RunID)
		}
	}
	if !slices.Contains(ok, el.own) {
		// Only this node deletes its eligible candidate: it is missing only
		// when the search was not what MLflow holds. Start over.
		s.log.Warn("this node's candidate is missing from the final search; starting over", "run_id", el.own)
		el.own = ""
		return "", nil
	}
	win := slices.Min(ok)
	if w := electedOf(runs); w != "" && w != win {
		// Every decider computes the same winner; an elected run that
		// differs means a clock ran far outside the bound (settleWait).
		// Joining it keeps the job on one run.
		s.log.Warn("the job's run was elected differently by another node; joining it", "elected", w, "computed", win)
		win = w
	}
	if err := s.setTag(ctx, win, TagElected, "true"); err != nil {
		return "", err
	}
	if win != el.own {
		s.deleteRun(ctx, el.own, "a losing candidate")
	}
	for _, id := range voids {
		s.deleteRun(ctx, id, "a void candidate")
	}
	s.log.Info("elected the job's run", "run_id", win, "own_candidate", el.own, "candidates", len(ok), "key", job.Key)
	el.own = ""
	return win, nil
}

// searchJob returns the active runs of the job's key and generation. For a
// restarted job (Attempt > 0) whose generation has no runs yet, older is
// the newest elected run of an earlier generation: the job's run.
func (s *Sink) searchJob(ctx context.Context) (runs []Run, older string, err error) {
	job := s.cfg.Job
	req := map[string]any{
		"experiment_ids": []string{s.el.expID},
		// ValidKey keeps quotes out of the key.
		"filter":        fmt.Sprintf("tags.`%s` = '%s'", TagJobKey, job.Key),
		"run_view_type": "ACTIVE_ONLY",
		"max_results":   1000,
	}
	var out struct {
		Runs []Run `json:"runs"`
	}
	if err := s.call(ctx, http.MethodPost, "runs/search", nil, req, &out, fmt.Sprintf("looking for the job's run (key %s) in experiment %s", job.Key, s.el.expID)); err != nil {
		return nil, "", err
	}
	if job.Generation == "" {
		return out.Runs, "", nil
	}
	var best Run
	for _, r := range out.Runs {
		g := r.Data.TagMap()[TagGeneration]
		switch {
		case g == job.Generation:
			runs = append(runs, r)
		case job.Attempt > 0 && r.Data.TagMap()[TagElected] == "true" && compareGen(g, job.Generation) < 0 &&
			(best.Info.RunID == "" || compareGen(g, best.Data.TagMap()[TagGeneration]) > 0):
			best = r
		}
	}
	if len(runs) == 0 && best.Info.RunID != "" {
		return nil, best.Info.RunID, nil
	}
	return runs, "", nil
}

// compareGen orders generations: numerically when both are whole numbers
// (Slurm's start times), else as strings.
func compareGen(a, b string) int {
	x, errA := strconv.ParseInt(a, 10, 64)
	y, errB := strconv.ParseInt(b, 10, 64)
	if errA == nil && errB == nil {
		return cmp.Compare(x, y)
	}
	return cmp.Compare(a, b)
}

// electedOf is the elected run among runs, "" when none.
func electedOf(runs []Run) string {
	for _, r := range runs {
		if r.Data.TagMap()[TagElected] == "true" {
			return r.Info.RunID
		}
	}
	return ""
}

// createCandidate creates a candidate run. An answer lost after the server
// applied the create (a reset, a timeout) is found again by the start id;
// its commit then lies before the time it was found, which is what the
// withdrawal rule needs.
func (s *Sink) createCandidate(ctx context.Context, info tracker.StartInfo) (string, error) {
	job := s.cfg.Job
	tags := sourceTags(info)
	tags[TagJobKey], tags[TagJobKeyFrom], tags[TagCandidateOf] = job.Key, job.KeyFrom, info.NodeID
	if job.Generation != "" {
		tags[TagGeneration] = job.Generation
	}
	if job.Nodes > 0 {
		tags[TagNodes] = strconv.Itoa(job.Nodes)
	}
	id, err := s.createRun(ctx, s.el.expID, s.runName(info), tags)
	if err == nil || errors.Is(err, tracker.ErrPermanent) {
		return id, err
	}
	run, found, ferr := s.findStarted(ctx, s.el.expID)
	s.startID = "" // a create still in flight must not be taken for the next one
	if ferr != nil || !found {
		return "", err
	}
	if verr := tracker.ValidID("run id", run.RunID); verr != nil {
		return "", tracker.Permanent(fmt.Errorf("MLflow at %s: %w", s.url, verr))
	}
	return run.RunID, nil
}

// settleParam returns a candidate's election param, writing "void" first
// when it has none: the write-once param makes the answer final.
func (s *Sink) settleParam(ctx context.Context, r Run) (string, error) {
	for _, p := range r.Data.Params {
		if p.Key == ParamElection {
			return p.Value, nil
		}
	}
	return s.setParam(ctx, r.Info.RunID, ParamElection, void)
}

// setParam writes a write-once param and returns the value the run holds
// afterwards: value, or the one another writer set first ("" when the run
// is gone). A lost answer is retried: writing the same value twice is
// allowed.
func (s *Sink) setParam(ctx context.Context, run, key, value string) (string, error) {
	req := map[string]string{"run_id": run, "key": key, "value": value}
	for gap := 100 * time.Millisecond; ; gap = min(2*gap, 2*time.Second) {
		err := s.call(ctx, http.MethodPost, "runs/log-parameter", nil, req, nil, fmt.Sprintf("setting %s=%s on run %s", key, value, run))
		if err == nil {
			return value, nil
		}
		if isCode(err, "INVALID_PARAMETER_VALUE") {
			// Another value was first, or the run is deleted: read it.
			r, gerr := s.getRun(ctx, run)
			if gerr != nil {
				if isCode(gerr, "RESOURCE_DOES_NOT_EXIST") {
					return "", nil
				}
				return "", gerr
			}
			if r.Info.LifecycleStage == "deleted" {
				return "", nil
			}
			for _, p := range r.Data.Params {
				if p.Key == key {
					return p.Value, nil
				}
			}
			return "", err
		}
		if errors.Is(err, tracker.ErrPermanent) {
			return "", err
		}
		if serr := sleep(ctx, gap); serr != nil {
			return "", err
		}
	}
}

// setTag sets one tag, retrying a transient error within ctx.
func (s *Sink) setTag(ctx context.Context, run, key, value string) error {
	req := map[string]string{"run_id": run, "key": key, "value": value}
	return s.retry(ctx, "runs/set-tag", req, fmt.Sprintf("setting tag %s on run %s", key, run))
}

// deleteRun marks a candidate deleted, retrying a transient error within
// ctx. One left behind by a failure is reported: a void one is cleared by
// a later election, a losing eligible one stays beside the job's run.
func (s *Sink) deleteRun(ctx context.Context, run, what string) {
	if err := s.retry(ctx, "runs/delete", map[string]string{"run_id": run}, "deleting "+what+" "+run); err != nil {
		s.log.Warn("cannot delete a candidate run of the job; delete it by hand if it stays", "run_id", run, "what", what, "err", err)
	}
}

// retry makes one POST, again after a transient error, until ctx ends.
func (s *Sink) retry(ctx context.Context, endpoint string, req any, op string) error {
	for gap := 100 * time.Millisecond; ; gap = min(2*gap, 2*time.Second) {
		err := s.call(ctx, http.MethodPost, endpoint, nil, req, nil, op)
		if err == nil || errors.Is(err, tracker.ErrPermanent) {
			return err
		}
		if serr := sleep(ctx, gap); serr != nil {
			return err
		}
	}
}

// sleep waits d, or less when ctx ends first (then its error).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
