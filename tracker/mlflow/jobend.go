package mlflow

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow/election"
)

// startJob is Start for a multi-node job: the election finds the job's run;
// the child gets its id and the node id MLflow's own monitor nests under.
// Until the election is over Start fails without a run (RunID is ""), and
// the forwarder starts the sink again in the background: the election
// resumes where it stopped.
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
	s.scope, s.who = tracker.JobScope(node, job.Task)
	if job.Task != "" {
		s.prefix = "system/" + node + "/" + job.Task + "/"
	}
	// The node id goes to the child whatever the election does: MLflow's
	// own monitor in the child nests under it, and the job's scripts read
	// it, also when the run is found only after the child started.
	var nodeEnv []string
	if node != "" {
		nodeEnv = []string{EnvNodeID + "=" + strings.TrimSuffix(strings.TrimPrefix(s.prefix, "system/"), "/")}
	}
	id, known, err := s.knownJobRun(ctx)
	if err != nil {
		return nodeEnv, err
	}
	if id == "" {
		if s.el.expID == "" {
			expID, err := s.experiment(ctx)
			if err != nil {
				return nodeEnv, err
			}
			if err := tracker.ValidID("experiment id", expID); err != nil {
				return nodeEnv, tracker.Permanent(fmt.Errorf("MLflow at %s: %w", s.url, err))
			}
			s.el.expID = expID
		}
		if id, err = s.elect(ctx, info); err != nil {
			return nodeEnv, err
		}
	}
	s.setExperiment(s.el.expID)
	if err := tracker.ValidID("run id", id); err != nil {
		return nodeEnv, tracker.Permanent(fmt.Errorf("MLflow at %s: the job's run: %w", s.url, err))
	}
	// The run may hold this node's series from an earlier attempt (a
	// restart, a requeue): its steps continue after them. One request,
	// before the run is taken: a failure retries the whole start. A first
	// attempt skips it: on a large job it is the heaviest request a node
	// makes (the run's latest value of every node's every series); the
	// read of a run the spool recorded serves, read just before.
	if job.Attempt != 0 {
		if known == nil {
			run, err := s.getRun(ctx, id)
			if err != nil {
				return nodeEnv, err
			}
			known = &run
		}
		s.nextStep = nextStepOf(known.Data.Metrics, s.prefix)
	}
	s.log.Info("joined the job's run", "run_id", id, "key", job.Key, "node", s.who, "next_step", s.nextStep)
	// The job's run is bridge's: it records the job's end (finishJob).
	s.runID, s.created = id, true
	s.startTags = s.scoped(info.Tags)
	if job.Attempt >= 0 {
		s.startTags[s.scope+".attempt"] = strconv.Itoa(job.Attempt)
	}
	s.startTags[s.scope+".started"] = strconv.FormatInt(time.Now().UnixMilli(), 10)
	if lost := info.Tags[tagPreviousAttemptLost]; lost != "" {
		// That attempt's end was never recorded (its bridge died with
		// the child, or the node did): it counts against the job.
		s.startTags["bridge.failed."+s.who] = StatusKilled + ": the previous attempt was lost: " + lost
	}
	if job.Nodes > 0 {
		s.startTags[TagNodes] = strconv.Itoa(job.Nodes)
	}
	return append([]string{EnvRunID + "=" + id, EnvExperimentID + "=" + s.el.expID}, nodeEnv...), nil
}

// knownJobRun is Config.JobRun when it is still the job's run (it exists,
// is not deleted and carries the job's key), with the run as read; "" and
// nil when the job's run must be elected. The caller reuses the run: on a
// large job it is the heaviest request a node makes.
func (s *Sink) knownJobRun(ctx context.Context) (string, *Run, error) {
	job, known := s.cfg.Job, s.cfg.JobRun
	if known == "" {
		return "", nil, nil
	}
	run, err := s.getRun(ctx, known)
	switch {
	case isCode(err, "RESOURCE_DOES_NOT_EXIST"):
	case err != nil:
		return "", nil, err
	case run.Info.LifecycleStage == "deleted" || run.Data.TagMap()[TagJobKey] != job.Key:
	default:
		s.el.expID = run.Info.ExperimentID
		return known, &run, nil
	}
	s.log.Warn("the job's run the spool recorded is gone (deleted, or not the job's); finding the job's run by its key", "run_id", known, "key", job.Key)
	s.cfg.JobRun = ""
	return "", nil, nil
}

// tagPreviousAttemptLost is forensics.TagPreviousAttemptLost, set by the
// caller when this node's previous attempt stopped without recording its
// end.
const tagPreviousAttemptLost = "bridge.previous_attempt_lost"

// scoped moves bridge's own tags (bridge.*) under this node's scope: each
// node's cgroup, limits, exit code... live side by side on the job's run.
func (s *Sink) scoped(tags map[string]string) map[string]string {
	out := make(map[string]string, len(tags))
	for k, v := range tags {
		if rest, ok := strings.CutPrefix(k, "bridge."); ok && k != "bridge.node_id" {
			out[s.scope+"."+rest] = v
		} else if !ok {
			out[k] = v
		}
	}
	return out
}

// finishJob records this node's end on the job's run, under its scope:
// its end tags, its status and end time, and, when it did not end
// cleanly, its failure in bridge.failed.<node> (a record that stays: a
// later clean attempt does not make the job clean). What the job's status,
// first failure and report are, from every node's record, is decided
// above the sink (package jobrun, on the sink as a run store).
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
	tags := s.scoped(end.Tags)
	if !end.KeepStatus {
		status := tracker.TerminalStatus(end)
		tags[s.scope+".status"] = status
		tags[s.scope+".ended"] = strconv.FormatInt(end.Time.UnixMilli(), 10)
		if status != StatusFinished {
			at := ""
			if s.cfg.Job.Attempt >= 0 {
				at = fmt.Sprintf(", attempt %d", s.cfg.Job.Attempt)
			}
			tags["bridge.failed."+s.who] = fmt.Sprintf("%s: exit %d%s", status, end.ExitCode, at)
		}
	}
	if err := s.SetTags(ctx, s.runID, tags); err != nil {
		return errors.Join(append(errs, err)...)
	}
	if err := s.sendFigures(ctx, end); err != nil {
		errs = append(errs, err)
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
	left, err := election.Sweep(ctx, jobStore{s}, s.runID)
	if err != nil {
		s.log.Debug("cannot look for the job's stray candidate runs", "err", err)
		return
	}
	if len(left) > 0 {
		s.log.Warn("stray candidate runs of the job are left beside its run; delete them in the UI or with `mlflow runs delete --run-id`",
			"run_id", s.runID, "stray", strings.Join(left, ","))
	}
}
