package mlflow

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow/election"
)

// A multi-node job's runs (docs/multinode.md, "A job at scale"): the job's
// run, which every node elects and the child resumes (MLFLOW_RUN_ID), holds
// the job (its election, status, first failure, report) and one state line
// a bridge (tracker.StateTag); each node's series and tags go to a run of
// its own, a child of the job's run (mlflow.parentRunId), so that the job's
// run stays small however many nodes the job has.

// Tags of a node's run.
const (
	// TagParentRun is MLflow's own tag of a nested run: the UI lists the
	// node's run under the job's.
	TagParentRun = "mlflow.parentRunId"
	// TagNodeID names the node whose run it is.
	TagNodeID = "bridge.node_id"
	// TagJob is the job's key on a node's run: never TagJobKey, by which
	// the election finds the job's run.
	TagJob = "bridge.job"
)

// taskGrace is how long a further bridge of a node (a task) waits for the
// node's lead to create the node's run before it creates it itself: the
// lead creates it as it joins the job, within seconds.
const taskGrace = 30 * time.Second

// startJob is Start for a multi-node job: the election finds the job's run
// (the child gets its id), then the node's own run is found or created,
// and the sink writes there. Until both are had Start fails without a run
// (RunID is ""), and the forwarder starts the sink again in the
// background: it resumes where it stopped.
func (s *Sink) startJob(ctx context.Context, info tracker.StartInfo) ([]string, error) {
	job := s.cfg.Job
	if job.Key == "" || strings.ContainsAny(job.Key, "'`\\\"") {
		// It goes between quotes in the search filter (searchJob).
		return nil, tracker.Permanent(fmt.Errorf("job key %q: a key MLflow's search cannot quote (it is empty, or holds a quote or a backslash)", job.Key))
	}
	node := info.NodeID
	if node == "" {
		node = s.cfg.NodeID
	}
	if node == "" || !validNodeID(node) {
		return nil, tracker.Permanent(fmt.Errorf("node id %q: a node of a multi-node job needs an id: %s", node, nodeIDRule))
	}
	s.node, s.task = node, job.Task
	_, s.who = tracker.JobScope(node, job.Task)
	s.prefix, s.scope = "system/", ""
	if job.Task != "" {
		s.prefix, s.scope = "system/"+job.Task+"/", "bridge.task."+job.Task+"."
	}
	// MLflow's own monitor in the child (when the script turns it on)
	// writes to the job's run: with no node id it writes the same few keys
	// from every node, never a set of keys a node.
	childEnv := []string{EnvNodeID + "="}
	var own *Run
	if s.jobRun == "" {
		id, nodeRun, err := s.knownJobRun(ctx)
		if err != nil {
			return childEnv, err
		}
		if id == "" {
			if s.el.expID == "" {
				expID, err := s.experiment(ctx)
				if err != nil {
					return childEnv, err
				}
				if err := tracker.ValidID("experiment id", expID); err != nil {
					return childEnv, tracker.Permanent(fmt.Errorf("MLflow at %s: %w", s.url, err))
				}
				s.el.expID = expID
			}
			if id, err = s.elect(ctx, info); err != nil {
				return childEnv, err
			}
		}
		if err := tracker.ValidID("run id", id); err != nil {
			return childEnv, tracker.Permanent(fmt.Errorf("MLflow at %s: the job's run: %w", s.url, err))
		}
		s.jobRun, own = id, nodeRun
		s.setExperiment(s.el.expID)
		s.log.Info("joined the job's run", "run_id", id, "key", job.Key, "node", s.who)
	}
	env := append([]string{EnvRunID + "=" + s.jobRun, EnvExperimentID + "=" + s.el.expID}, childEnv...)
	created := false
	if own == nil {
		r, made, err := s.nodeRun(ctx, info)
		if err != nil {
			return env, err
		}
		own, created = r, made
	} else {
		s.reopen = s.task == "" && own.Info.Status != StatusRunning
	}
	if !created {
		// The node's run was there: this attempt's tags go with the
		// first samples.
		s.startTags = s.scoped(info.Tags)
	}
	if err := tracker.ValidID("run id", own.Info.RunID); err != nil {
		return env, tracker.Permanent(fmt.Errorf("MLflow at %s: the node's run: %w", s.url, err))
	}
	// The node's run may hold this node's series from an earlier attempt
	// (a restart, a requeue): its steps continue after them, from the
	// run as found (a run just created holds none).
	s.nextStep = nextStepOf(own.Data.Metrics, s.prefix)
	s.runID, s.created = own.Info.RunID, true
	s.setRunName(own.Info.RunName) // the end table's link names the node's run, not its id
	s.log.Info("writing to the node's run", "run_id", s.runID, "job_run_id", s.jobRun, "node", s.who, "next_step", s.nextStep)
	s.jobTags = s.jobStartTags(info)
	return env, nil
}

// jobStartTags are what this bridge records on the job's run as it
// starts (with its first samples): its state line, the job's node count,
// and a previous attempt that never recorded its end.
func (s *Sink) jobStartTags(info tracker.StartInfo) map[string]string {
	job := s.cfg.Job
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	line := []tracker.Field{{Name: tracker.LineWho, Value: s.who}, {Name: tracker.LineStatus, Value: StatusRunning}}
	if job.Attempt >= 0 {
		line = append(line, tracker.Field{Name: tracker.LineAttempt, Value: strconv.Itoa(job.Attempt)})
	}
	line = append(line, tracker.Field{Name: tracker.LineStarted, Value: now}, tracker.Field{Name: tracker.LineAt, Value: now},
		tracker.Field{Name: tracker.LineRun, Value: s.runID})
	tags := map[string]string{tracker.StateTag(s.node, s.task): tracker.FormatLine(line)}
	if lost := info.Tags[tagPreviousAttemptLost]; lost != "" {
		// That attempt's end was never recorded (its bridge died with
		// the child, or the node did): it counts against the job.
		tags["bridge.failed."+s.who] = StatusKilled + ": the previous attempt was lost: " + lost
	}
	if job.Nodes > 0 {
		tags[TagNodes] = strconv.Itoa(job.Nodes)
	}
	return tags
}

// keepEarlierFailure leaves out of the job's start tags the record of a
// previous attempt lost where the job's run holds one of this bridge's
// failures already: an earlier attempt's record (FAILED, or KILLED) is as
// bad or worse, and a later attempt never replaces it. One read, only
// after a lost attempt.
func (s *Sink) keepEarlierFailure(ctx context.Context) error {
	key := "bridge.failed." + s.who
	if s.jobTags[key] == "" {
		return nil
	}
	run, err := s.getRun(ctx, s.jobRun)
	if err != nil {
		return err
	}
	if run.Data.TagMap()[key] != "" {
		delete(s.jobTags, key)
	}
	return nil
}

// knownJobRun is the job's run when the spool recorded it (Config.JobRun)
// and it is still the job's: the recorded run is the job's run itself, or
// this node's run of it (whose parent is the job's run; it comes back too,
// as read). "" when the job's run must be elected.
func (s *Sink) knownJobRun(ctx context.Context) (string, *Run, error) {
	job, known := s.cfg.Job, s.cfg.JobRun
	if known == "" {
		return "", nil, nil
	}
	run, err := s.getRun(ctx, known)
	tags := run.Data.TagMap()
	switch {
	case isCode(err, "RESOURCE_DOES_NOT_EXIST"):
	case err != nil:
		return "", nil, err
	case run.Info.LifecycleStage == "deleted":
	case tags[TagJobKey] == job.Key:
		s.el.expID = run.Info.ExperimentID
		return known, nil, nil
	case tags[TagJob] == job.Key && tags[TagNodeID] == s.node && tags[TagParentRun] != "":
		s.el.expID = run.Info.ExperimentID
		return tags[TagParentRun], &run, nil
	}
	s.log.Warn("the job's run the spool recorded is gone (deleted, or not the job's); finding the job's run by its key", "run_id", known, "key", job.Key)
	s.cfg.JobRun = ""
	return "", nil, nil
}

// nodeRun finds this node's run of the job's run, or creates it. A first
// attempt's lead creates it at once (there is none to find: one request);
// a restarted node, one whose earlier create may have been applied, and a
// further bridge of the node look first. A further bridge waits
// taskGrace for the node's lead to create it, then creates it itself.
func (s *Sink) nodeRun(ctx context.Context, info tracker.StartInfo) (run *Run, created bool, err error) {
	if s.cfg.Job.Attempt != 0 || s.nodeCreates > 0 || s.task != "" {
		r, found, err := s.findNodeRun(ctx)
		if err != nil || found {
			return r, false, err
		}
		if s.task != "" {
			if s.taskWait.IsZero() {
				s.taskWait = time.Now()
			}
			if time.Since(s.taskWait) < taskGrace {
				return nil, false, fmt.Errorf("%w: node %s's run of job run %s is not created yet (its lead bridge creates it)", tracker.ErrNotReady, s.node, s.jobRun)
			}
		}
	}
	if s.nodeStartID == "" {
		s.nodeStartID = rand.Text()
	}
	s.nodeCreates++
	tags := s.sourceTags(info)
	maps.Copy(tags, s.scoped(info.Tags))
	tags[TagParentRun], tags[TagNodeID], tags[TagJob], tags[StartIDTag] = s.jobRun, s.node, s.cfg.Job.Key, s.nodeStartID
	req := createRunRequest{ExperimentID: s.el.expID, RunName: s.node, StartTime: time.Now().UnixMilli(), Tags: tagList(tags)}
	var out runResponse
	if err := s.call(ctx, http.MethodPost, "runs/create", nil, req, &out, fmt.Sprintf("creating node %s's run of job run %s", s.node, s.jobRun)); err != nil {
		return nil, false, err
	}
	s.log.Info("created the node's run", "run_id", out.Run.Info.RunID, "job_run_id", s.jobRun, "node", s.node)
	return &out.Run, true, nil
}

// findNodeRun looks for this node's run of the job's run: the oldest
// active one, where two were made (a lead and a task that waited past
// taskGrace). One that ended (an earlier attempt's) is running again from
// this attempt's first write on (reopen). A further bridge's tags go to
// it under its task's scope.
func (s *Sink) findNodeRun(ctx context.Context) (*Run, bool, error) {
	req := map[string]any{
		"experiment_ids": []string{s.el.expID},
		"filter":         fmt.Sprintf("tags.`%s` = '%s' and tags.`%s` = '%s'", TagParentRun, s.jobRun, TagNodeID, s.node),
		"run_view_type":  "ACTIVE_ONLY",
		"max_results":    2,
		"order_by":       []string{"attributes.start_time ASC"},
	}
	var out struct {
		Runs []Run `json:"runs"`
	}
	if err := s.call(ctx, http.MethodPost, "runs/search", nil, req, &out, fmt.Sprintf("looking for node %s's run of job run %s", s.node, s.jobRun)); err != nil {
		return nil, false, err
	}
	if len(out.Runs) == 0 {
		return nil, false, nil
	}
	r := out.Runs[0]
	s.reopen = s.task == "" && r.Info.Status != StatusRunning
	return &r, true, nil
}

// tagPreviousAttemptLost is forensics.TagPreviousAttemptLost, set by the
// caller when this node's previous attempt stopped without recording its
// end.
const tagPreviousAttemptLost = "bridge.previous_attempt_lost"

// scoped moves bridge's own tags (bridge.*) under this bridge's task's
// scope on the node's run (bridge.task.<task>.): the node's lead records
// the node's tags, unscoped, as a single-node run has them. The job's key
// stays off a node's run: the election finds the job's run, and sweeps
// its stray candidates, by it (TagJob names the job there).
func (s *Sink) scoped(tags map[string]string) map[string]string {
	out := make(map[string]string, len(tags))
	for k, v := range tags {
		if k == TagJobKey {
			continue
		}
		if rest, ok := strings.CutPrefix(k, "bridge."); ok && s.scope != "" {
			out[s.scope+rest] = v
		} else {
			out[k] = v
		}
	}
	return out
}

// finishJob records this bridge's end on the node's run: its end tags
// (and the lead's status and end time, as a single run's), and its
// figures. Its state line on the job's run, and the job's status, first
// failure and report from every node's line, are written above the sink
// (package jobrun, on the sink as a run store).
func (s *Sink) finishJob(ctx context.Context, end tracker.EndInfo) error {
	var errs []error
	if err := s.flushStartTags(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.sendHeld(ctx); err != nil {
		errs = append(errs, err)
	}
	// With KeepStatus, the tags alone: this node's end (and so the run's
	// status) stays what is recorded.
	tags := maps.Clone(end.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	status := tracker.TerminalStatus(end)
	if !end.KeepStatus {
		tags["bridge.status"] = status
		tags["bridge.ended"] = strconv.FormatInt(end.Time.UnixMilli(), 10)
	}
	if err := s.SetTags(ctx, s.runID, s.scoped(tags)); err != nil {
		return errors.Join(append(errs, err)...)
	}
	if err := s.sendFigures(ctx, end); err != nil {
		errs = append(errs, err)
	}
	if !end.KeepStatus && s.task == "" {
		if err := s.update(ctx, s.runID, status, end.Time); err != nil {
			errs = append(errs, err)
		}
	}
	if !end.KeepStatus && tier(s.cfg.Job, s.who) == 0 {
		s.sweep(ctx)
	}
	return errors.Join(errs...)
}

// sweep deletes the job's candidate runs that lost, or never became
// eligible (a creator that died, a create applied after the election):
// none is left beside the job's run. Node 0 does it at its end (every
// node, when the launcher numbers none), and the node that sets the
// job's status (SetStatus).
func (s *Sink) sweep(ctx context.Context) {
	left, err := election.Sweep(ctx, jobStore{s}, s.jobRun)
	if err != nil {
		s.log.Debug("cannot look for the job's stray candidate runs", "err", err)
		return
	}
	if len(left) > 0 {
		s.log.Warn("stray candidate runs of the job are left beside its run; delete them in the UI or with `mlflow runs delete --run-id`",
			"run_id", s.jobRun, "stray", strings.Join(left, ","))
	}
}
