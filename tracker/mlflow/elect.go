package mlflow

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"

	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow/election"
)

// Tags and params of the election. A param is written once in MLflow's
// store (a second value is refused): the election uses it as the one
// compare-and-set a tracker offers.
const (
	TagJobKey      = tracker.TagJobKey
	TagJobKeyFrom  = "bridge.job_key_from"
	TagGeneration  = "bridge.job_generation"
	TagNodes       = tracker.TagNodes
	TagElected     = "bridge.elected"
	TagCandidateOf = "bridge.candidate_of"
	ParamElection  = "bridge.election"
)

// jobElection is the sink's part in a job's election, kept between calls of
// Start: a Start cut short by its deadline resumes where it stopped (the
// forwarder starts the sink again in the background).
type jobElection struct {
	expID string
	run   *election.Election
	info  tracker.StartInfo // the candidate run's tags come from it
}

// tier is this bridge's place in who creates the job's run: from the
// launcher's node index (election.TierOf); without one, on a job of known
// size, a stable draw from the node id puts about eight nodes in tier 0
// and the rest in tier 1, so that a large job does not send a create from
// every node; with neither, every node is tier 0.
func tier(j *tracker.Job, node string) int {
	task := j.Task != ""
	if j.Rank >= 0 || j.Nodes <= 8 {
		return election.TierOf(j.Rank, task)
	}
	h := fnv.New32a()
	h.Write([]byte(node))
	if h.Sum32()%uint32(j.Nodes) < 8 {
		return election.TierOf(0, task)
	}
	return election.TierOf(1, task)
}

// elect returns the job's run: the one every node picks (package election).
func (s *Sink) elect(ctx context.Context, info tracker.StartInfo) (string, error) {
	if s.el.run == nil {
		job := s.cfg.Job
		s.el.run = election.New(election.Config{Key: job.Key, Settle: job.Settle, Tier: tier(job, s.who), Restarted: job.Attempt > 0, Nodes: job.Nodes, Log: s.log}, jobStore{s})
	}
	s.el.info = info
	id, err := s.el.run.Run(ctx)
	if err != nil {
		return "", fmt.Errorf("MLflow at %s: %w", s.url, err)
	}
	return id, nil
}

// jobStore is the election's view of MLflow: one request a call.
type jobStore struct{ s *Sink }

// Search implements election.Store.
func (j jobStore) Search(ctx context.Context) ([]election.Candidate, string, error) {
	runs, older, err := j.s.searchJob(ctx)
	if err != nil || older != "" {
		return nil, older, err
	}
	out := make([]election.Candidate, 0, len(runs))
	for _, r := range runs {
		tags := r.Data.TagMap()
		c := election.Candidate{ID: r.Info.RunID, StartID: tags[StartIDTag], Elected: tags[TagElected] == "true"}
		for _, p := range r.Data.Params {
			if p.Key == ParamElection {
				c.Param = p.Value
			}
		}
		out = append(out, c)
	}
	return out, "", nil
}

// Create implements election.Store.
func (j jobStore) Create(ctx context.Context, startID string) (string, error) {
	s, job, info := j.s, j.s.cfg.Job, j.s.el.info
	tags := s.sourceTags(info)
	tags[TagJobKey], tags[TagJobKeyFrom], tags[TagCandidateOf] = job.Key, job.KeyFrom, info.NodeID
	if job.Generation != "" {
		tags[TagGeneration] = job.Generation
	}
	if job.Nodes > 0 {
		tags[TagNodes] = strconv.Itoa(job.Nodes)
	}
	s.startID = startID
	return s.createRun(ctx, s.el.expID, s.runName(info), info.Time, tags)
}

// SetParam implements election.Store.
func (j jobStore) SetParam(ctx context.Context, run, value string) (string, error) {
	return j.s.setOnce(ctx, run, ParamElection, value)
}

// MarkElected implements election.Store.
func (j jobStore) MarkElected(ctx context.Context, run string) error {
	req := map[string]string{"run_id": run, "key": TagElected, "value": "true"}
	return j.s.call(ctx, http.MethodPost, "runs/set-tag", nil, req, nil, fmt.Sprintf("marking run %s as the job's run", run))
}

// Delete implements election.Store.
func (j jobStore) Delete(ctx context.Context, run string) error {
	return j.s.call(ctx, http.MethodPost, "runs/delete", nil, map[string]string{"run_id": run}, nil, "deleting the job's candidate run "+run)
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

// setOnce writes a param, which MLflow's store writes once (a second
// value is refused): the election's compare-and-set. It returns the value
// the run holds afterwards, value or the one another writer set first (""
// when the run is gone). MLflow takes the same value again (a retry whose
// first answer was lost), so it is safe to repeat.
func (s *Sink) setOnce(ctx context.Context, run, key, value string) (string, error) {
	req := map[string]string{"run_id": run, "key": key, "value": value}
	err := s.call(ctx, http.MethodPost, "runs/log-parameter", nil, req, nil, fmt.Sprintf("setting %s=%s on run %s", key, value, run))
	if err == nil {
		return value, nil
	}
	if !isCode(err, "INVALID_PARAMETER_VALUE") {
		return "", err
	}
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
