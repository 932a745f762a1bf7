package mlflow

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/jobkey"
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
	if !jobkey.ValidKey(job.Key) {
		return nil, tracker.Permanent(fmt.Errorf("job key %q: %s", job.Key, jobkey.KeyRule))
	}
	node := info.NodeID
	if node == "" {
		node = s.cfg.NodeID
	}
	s.who = node
	s.scope = "bridge.node." + node
	if job.Task != "" {
		s.who = node + "." + job.Task
		s.scope = "bridge.task." + node + "." + job.Task
		s.prefix = "system/" + node + "/" + job.Task + "/"
	}
	id, known, err := s.knownJobRun(ctx)
	if err != nil {
		return nil, err
	}
	if id == "" {
		if s.el.expID == "" {
			expID, err := s.experiment(ctx)
			if err != nil {
				return nil, err
			}
			if err := tracker.ValidID("experiment id", expID); err != nil {
				return nil, tracker.Permanent(fmt.Errorf("MLflow at %s: %w", s.url, err))
			}
			s.el.expID = expID
		}
		if id, err = s.elect(ctx, info); err != nil {
			return nil, err
		}
	}
	s.setExperiment(s.el.expID)
	if err := tracker.ValidID("run id", id); err != nil {
		return nil, tracker.Permanent(fmt.Errorf("MLflow at %s: the job's run: %w", s.url, err))
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
				return nil, err
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
	env := []string{EnvRunID + "=" + id, EnvExperimentID + "=" + s.el.expID}
	if node != "" {
		// MLflow's own monitor in the child nests the same way.
		env = append(env, EnvNodeID+"="+strings.TrimSuffix(strings.TrimPrefix(s.prefix, "system/"), "/"))
	}
	return env, nil
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

// finishJob records this node's end on the job's run and, from every
// node's record, the run's status: FAILED (or KILLED) as soon as one node's
// child failed (a record that stays), FINISHED once every node the launcher
// started ended cleanly, and with the node count unknown nothing more
// (the child's mlflow.end_run() decides). A status only gets worse.
func (s *Sink) finishJob(ctx context.Context, end tracker.EndInfo) error {
	var errs []error
	if err := s.flushStartTags(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.sendHeld(ctx); err != nil {
		errs = append(errs, err)
	}
	if end.KeepStatus {
		// The tags alone: this node's end (and so the run's status) stays
		// what is recorded.
		return errors.Join(append(errs, s.SetTags(ctx, s.scoped(end.Tags)))...)
	}
	status := tracker.TerminalStatus(end)
	tags := s.scoped(end.Tags)
	tags[s.scope+".status"] = status
	tags[s.scope+".ended"] = strconv.FormatInt(end.Time.UnixMilli(), 10)
	if status != StatusFinished {
		at := ""
		if s.cfg.Job.Attempt >= 0 {
			at = fmt.Sprintf(", attempt %d", s.cfg.Job.Attempt)
		}
		// Never cleared: a later clean attempt does not make the job clean.
		tags["bridge.failed."+s.who] = fmt.Sprintf("%s: exit %d%s", status, end.ExitCode, at)
	}
	if err := s.SetTags(ctx, tags); err != nil {
		return errors.Join(append(errs, err)...)
	}
	run, wrote, err := s.settleJobStatus(ctx, end)
	if err == nil {
		err = s.recordJob(ctx, run, wrote)
	}
	if wrote || s.cfg.Job.tier(s.who) == 0 {
		s.sweep(ctx)
	}
	return errors.Join(append(errs, err)...)
}

// sweep deletes the job's candidate runs that lost, or never became
// eligible (a creator that died, a create applied after the election):
// none is left beside the job's run. The node that writes the job's
// status does it, and node 0 (every node, when the launcher numbers none).
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

// recordedJobEnd is this node's end among the job run's tags, when it was
// recorded at or after since (an earlier attempt's end is not this one's).
func (s *Sink) recordedJobEnd(tags map[string]string, since time.Time) (tracker.EndInfo, bool, error) {
	ended, err := strconv.ParseInt(tags[s.scope+".ended"], 10, 64)
	code, cerr := strconv.Atoi(tags[s.scope+".exit_code"])
	if err != nil || cerr != nil || ended < since.UnixMilli() {
		return tracker.EndInfo{}, false, nil
	}
	return tracker.EndInfo{ExitCode: code, Status: tags[s.scope+".status"], Time: time.UnixMilli(ended)}, true, nil
}

// jobStatus is the status the nodes' records call for ("" for none yet).
func jobStatus(tags map[string]string, nodes int) string {
	worst := ""
	for k, v := range tags {
		if strings.HasPrefix(k, "bridge.failed.") {
			st, _, _ := strings.Cut(v, ":")
			if tracker.Severity(st) > tracker.Severity(worst) {
				worst = st
			}
		}
	}
	if worst != "" || nodes <= 0 {
		return worst
	}
	clean := 0
	for k, v := range tags {
		if strings.HasPrefix(k, "bridge.node.") && strings.HasSuffix(k, ".status") && v == StatusFinished {
			clean++
		}
	}
	if clean >= nodes {
		return StatusFinished
	}
	return ""
}

// settleJobStatus moves the run to the status the records call for, and
// says whether this node wrote one, with the run as it last read it (after
// this node's records). Nodes ending together may each read
// the others' records before they land: the one that writes reads again,
// so the last writer saw every record. One node writes FINISHED: the
// write-once param bridge.finished_by says which.
func (s *Sink) settleJobStatus(ctx context.Context, end tracker.EndInfo) (last Run, wrote bool, err error) {
	for range 3 {
		run, err := s.getRun(ctx, s.runID)
		if err != nil {
			return last, wrote, err
		}
		last = run
		tags := run.Data.TagMap()
		nodes := s.cfg.Job.Nodes
		if nodes <= 0 {
			nodes, _ = strconv.Atoi(tags[TagNodes])
		}
		want := jobStatus(tags, nodes)
		if want == "" || tracker.Severity(want) <= tracker.Severity(run.Info.Status) {
			return last, wrote, nil
		}
		if want == StatusFinished {
			by, err := s.setParamOnce(ctx, s.runID, ParamFinished, s.who)
			if err != nil {
				return last, wrote, err
			}
			if by != s.who {
				return last, wrote, nil // another node ends the run
			}
		}
		req := updateRunRequest{RunID: s.runID, Status: want, EndTime: end.Time.UnixMilli()}
		if err := s.call(ctx, http.MethodPost, "runs/update", nil, req, nil, fmt.Sprintf("setting the job's run %s to %s", s.runID, want)); err != nil {
			return last, wrote, err
		}
		wrote = true
		s.log.Info("set the job's run status", "run_id", s.runID, "status", want, "node", s.who)
	}
	return last, wrote, nil
}
