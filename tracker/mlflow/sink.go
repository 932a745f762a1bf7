package mlflow

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-resty/resty/v2"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/redact"
	"github.com/bridge-dev/bridge/tracker"
)

// Run statuses (mlflow/protos/service.proto RunStatus).
const (
	StatusRunning  = "RUNNING"
	StatusFinished = tracker.StatusFinished
	StatusFailed   = tracker.StatusFailed
	StatusKilled   = tracker.StatusKilled
)

// DefaultExperimentID is where a run goes when no experiment is named, as in
// the Python client.
const DefaultExperimentID = "0"

// Server limits (mlflow/utils/validation.py).
const (
	maxMetricsPerBatch = 1000
	maxTagsPerBatch    = 100
	maxBodyBytes       = 1_000_000
	maxKeyLength       = 250
)

// keyRe is MLflow's key check (_validate_metric_name); normpath rules are
// checked separately in validKey.
var (
	keyRe    = regexp.MustCompile(`^[\w./\- :]+$`)
	nodeIDRe = regexp.MustCompile(`^[\w.\- :]+$`)
)

// nodeIDRule is what validNodeID checks: a node id is one segment of the
// node's keys (system/<node_id>/...), which MLflow takes only normal.
const nodeIDRule = "MLflow keys allow only letters, digits, '_', '-', '.', ' ' and ':' here (no '/'), and not . or .."

func validNodeID(id string) bool { return nodeIDRe.MatchString(id) && id != "." && id != ".." }

// Sink posts samples to one MLflow run. It implements tracker.Sink; as that
// contract says, its methods are called from one goroutine.
type Sink struct {
	tracker.Reach // whether MLflow ever answered (set by call)

	cfg    Config
	log    *slog.Logger
	client *resty.Client
	url    string // redacted tracking URI for messages

	runID   string
	created bool
	prefix  string // "system/" or "system/<node_id>/"

	// startID tags the run bridge creates, so that a runs/create the server
	// applied but whose answer was lost (a reset, a timeout) is found again
	// instead of creating a second run; creates counts the attempts.
	startID string
	creates int

	// Overridable in tests so that splitting is exercised with small inputs.
	maxMetrics int
	maxBody    int

	steady  steady          // which points of steady series to send (steady.go)
	keyOK   map[string]bool // keys checked so far; a bad one is reported once
	dropped int             // points not sent because MLflow would refuse them
	tsLog   bool            // a time MLflow refuses was reported

	// startTags of a run the user gave (MLFLOW_RUN_ID) or the job's run are
	// recorded by the first Send (or Finish), not by Start: the child then
	// waits for fewer requests.
	startTags map[string]string

	expMu    sync.Mutex
	expID    string // the experiment of the run, once known (Place)
	linkName string // the run's name, once known (Link)

	// A multi-node job (Config.Job, jobend.go): the job's run, this
	// bridge's node and task, its name in the job's records, and the
	// prefix of its tags on the node's run ("" for the node's lead,
	// "bridge.task.<task>." for a further bridge of the node). runID is the
	// node's own run.
	el              jobElection // the election, kept across Start calls
	jobRun          string
	node, task, who string
	scope           string
	jobTags         map[string]string // the job's run's start tags (jobStartTags), recorded by the first Send
	reopen          bool              // the node's run ended in an earlier attempt: RUNNING again with the first Send
	nodeStartID     string            // finds the node's run a create whose answer was lost made
	nodeCreates     int
	taskWait        time.Time // when a further bridge first found no node's run

	// nextStep is the step after the last one this node's series hold on
	// a run Start joined (tracker.RunInfo.NextStep); 0 for a run it created.
	nextStep int64

	// Follow (Config.Follow): the run's end as its owner recorded it.
	ended    bool
	endedAt  int64  // the run's end time, ms since the epoch
	endState string // its status then
	afterEnd int    // samples taken after the end, left out
}

var (
	_ tracker.Sink       = (*Sink)(nil)
	_ tracker.RunOwner   = (*Sink)(nil)
	_ tracker.NoteWriter = (*Sink)(nil)
)

// New checks cfg and builds the sink; it makes no request.
func New(cfg Config, log *slog.Logger) (*Sink, error) {
	cfg.TrackingURI = strings.TrimRight(cfg.TrackingURI, "/")
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("sink", "mlflow")
	client, err := newClient(cfg, log)
	if err != nil {
		return nil, err
	}
	s := &Sink{
		cfg:        cfg,
		log:        log,
		client:     client,
		url:        redact.URI(cfg.TrackingURI),
		maxMetrics: maxMetricsPerBatch,
		maxBody:    maxBodyBytes,
		keyOK:      map[string]bool{},
	}
	s.setPrefix(cfg.NodeID)
	return s, nil
}

func (s *Sink) setPrefix(nodeID string) {
	s.prefix = "system/"
	if nodeID != "" {
		s.prefix = "system/" + nodeID + "/"
	}
}

// Name implements tracker.Sink.
func (s *Sink) Name() string { return "mlflow" }

// Run implements tracker.Sink: the run the sink posts to (no id before
// Start), whether bridge created it (and so owns its terminal status),
// where this node's steps continue, the run's experiment, and the points
// left out.
func (s *Sink) Run() tracker.RunInfo {
	return tracker.RunInfo{ID: s.runID, Created: s.created, NextStep: s.nextStep, Place: s.place(), Dropped: s.dropped, Job: s.jobRun}
}

// Key is the MLflow key a metric name is posted under.
func (s *Sink) Key(name string) string { return s.prefix + name }

// Start implements tracker.Sink. With Config.RunID (MLFLOW_RUN_ID) it checks
// that the run exists and is active; otherwise it finds or creates the
// experiment and creates a run. The returned environment carries
// MLFLOW_RUN_ID (the child's mlflow.start_run() resumes that run) and, when
// bridge created the run, MLFLOW_EXPERIMENT_ID, so that a later start_run()
// in the child lands in the same experiment. Only a
// set_experiment() call in the child naming another experiment still clashes:
// MLflow refuses to resume a run of a different experiment.
//
// info.Tags are recorded on the run. When the server cannot be reached and
// the run id is known (MLFLOW_RUN_ID), the sink keeps it, so Send works once
// the server is back, and Start returns the environment with the error.
func (s *Sink) Start(ctx context.Context, info tracker.StartInfo) ([]string, error) {
	// The caller retries Start (pipeline.StartSinksWith, the Forwarder's
	// late start); the election inside keeps its own pace.
	ctx = tracker.OneAttempt(ctx)
	// bridge's own node id (StartInfo) wins over MLFLOW_SYSTEM_METRICS_NODE_ID.
	if info.NodeID != "" {
		if !validNodeID(info.NodeID) {
			return nil, tracker.Permanent(fmt.Errorf("node id %q: %s", info.NodeID, nodeIDRule))
		}
		s.setPrefix(info.NodeID)
	}
	if s.cfg.RunID != "" {
		return s.attach(ctx, info)
	}
	if s.cfg.Job != nil {
		return s.startJob(ctx, info)
	}
	return s.create(ctx, info)
}

func (s *Sink) attach(ctx context.Context, info tracker.StartInfo) ([]string, error) {
	if err := tracker.ValidID(EnvRunID, s.cfg.RunID); err != nil {
		return nil, tracker.Permanent(err)
	}
	s.runID = s.cfg.RunID
	s.created = s.cfg.OwnsRun
	env := []string{EnvRunID + "=" + s.runID}
	run, err := s.getRun(ctx, s.runID)
	if err != nil {
		if isCode(err, "RESOURCE_DOES_NOT_EXIST") {
			err = fmt.Errorf("%s=%s names no run on this server: %w", EnvRunID, s.runID, err)
		}
		return env, err
	}
	if run.Info.LifecycleStage == "deleted" {
		return env, tracker.Permanent(fmt.Errorf("%s=%s: run is deleted on MLflow at %s: restore it in the UI (or `mlflow runs restore --run-id %s`) or unset %s",
			EnvRunID, s.runID, s.url, s.runID, EnvRunID))
	}
	s.setExperiment(run.Info.ExperimentID)
	s.setRunName(run.Info.RunName)
	s.startTags = maps.Clone(info.Tags)
	s.nextStep = nextStepOf(run.Data.Metrics, s.prefix)
	return env, nil
}

// nextStepOf is the step after the last one among this node's series in
// latest (runs/get's latest metrics, each key's value at its highest
// step): the keys prefix+name with no further '/' (another node's or
// task's series nest deeper). MLflow's own monitor finds where to resume
// the same way, from the same one request, over every system/ key.
func nextStepOf(latest []Metric, prefix string) int64 {
	next := int64(0)
	for _, m := range latest {
		name, ok := strings.CutPrefix(m.Key, prefix)
		if !ok || name == "" || strings.Contains(name, "/") {
			continue
		}
		next = max(next, int64(m.Step)+1)
	}
	return next
}

// flushStartTags records the tags Start left for later (attach's, a
// job's node's on its run and on the job's run) and sets a node's run
// that an earlier attempt ended RUNNING again; after an error what is
// left stays pending for the next call.
func (s *Sink) flushStartTags(ctx context.Context) error {
	if len(s.startTags) > 0 {
		if err := s.SetTags(ctx, s.runID, s.startTags); err != nil {
			return err
		}
		s.startTags = nil
	}
	if s.reopen {
		req := map[string]string{"run_id": s.runID, "status": StatusRunning}
		if err := s.call(ctx, http.MethodPost, "runs/update", nil, req, nil, fmt.Sprintf("setting the node's run %s to RUNNING again", s.runID)); err != nil {
			return err
		}
		s.reopen = false
	}
	if len(s.jobTags) > 0 {
		if err := s.keepEarlierFailure(ctx); err != nil {
			return err
		}
		if err := s.SetTags(ctx, s.jobRun, s.jobTags); err != nil {
			return err
		}
		s.jobTags = nil
	}
	return nil
}

func (s *Sink) create(ctx context.Context, info tracker.StartInfo) ([]string, error) {
	expID, err := s.experiment(ctx)
	if err != nil {
		return nil, err
	}
	// It goes into the child's environment (MLFLOW_EXPERIMENT_ID).
	if err := tracker.ValidID("experiment id", expID); err != nil {
		return nil, tracker.Permanent(fmt.Errorf("MLflow at %s: %w", s.url, err))
	}
	s.setExperiment(expID)
	tags := s.sourceTags(info)
	maps.Copy(tags, info.Tags)
	if s.creates++; s.creates > 1 && s.startID != "" {
		// An earlier attempt may have created the run.
		run, found, err := s.findStarted(ctx, expID)
		if err != nil {
			return nil, err
		}
		if found {
			if err := tracker.ValidID("run id", run.RunID); err != nil {
				return nil, tracker.Permanent(fmt.Errorf("MLflow at %s: %w", s.url, err))
			}
			s.runID, s.created = run.RunID, true
			s.setRunName(run.RunName)
			s.log.Info("found the MLflow run an earlier attempt created (its answer was lost)", "run_id", s.runID, "experiment_id", expID)
			return []string{EnvRunID + "=" + s.runID, EnvExperimentID + "=" + expID}, nil
		}
	}
	name := s.runName(info)
	id, err := s.createRun(ctx, expID, name, info.Time, tags)
	if err != nil {
		return nil, err
	}
	s.runID, s.created = id, true
	s.setRunName(name)
	s.log.Info("created MLflow run", "run_id", s.runID, "experiment_id", expID)
	// The experiment id goes along even when the user named the experiment
	// (MLFLOW_EXPERIMENT_NAME, which the Python client checks against it, or
	// a bridge flag the child never sees): a second start_run() in the child
	// then lands in the same experiment.
	return []string{EnvRunID + "=" + s.runID, EnvExperimentID + "=" + expID}, nil
}

// Tags of the spool's start record that say where the run is (Place).
const (
	TagExperimentID   = "bridge.mlflow.experiment_id"
	TagExperimentName = "bridge.mlflow.experiment_name"
)

// place is the run's experiment (tracker.RunInfo.Place), as found once
// MLflow answered, else as MLFLOW_EXPERIMENT_ID and MLFLOW_EXPERIMENT_NAME
// name it (none: the Default experiment, id 0).
func (s *Sink) place() map[string]string {
	s.expMu.Lock()
	id := s.expID
	s.expMu.Unlock()
	if id == "" {
		id = s.cfg.ExperimentID
	}
	if id == "" && s.cfg.ExperimentName == "" {
		id = DefaultExperimentID
	}
	p := map[string]string{}
	if id != "" {
		p[TagExperimentID] = id
	}
	if s.cfg.ExperimentName != "" {
		p[TagExperimentName] = s.cfg.ExperimentName
	}
	return p
}

func (s *Sink) setExperiment(id string) {
	s.expMu.Lock()
	s.expID = id
	s.expMu.Unlock()
}

func (s *Sink) setRunName(name string) {
	s.expMu.Lock()
	s.linkName = name
	s.expMu.Unlock()
}

// runName is the name of a run bridge creates: --run-name, else the one
// derived from the command line.
func (s *Sink) runName(info tracker.StartInfo) string {
	if s.cfg.RunName != "" {
		return s.cfg.RunName
	}
	return info.RunName
}

// Context tags MLflow's client sets on a run it creates
// (mlflow/utils/mlflow_tags.py; mlflow/tracking/context/default_context.py
// and git_context.py).
const (
	TagUser       = "mlflow.user"
	TagSourceName = "mlflow.source.name"
	TagSourceType = "mlflow.source.type"
	TagGitCommit  = "mlflow.source.git.commit"
	TagGitBranch  = "mlflow.source.git.branch"
	TagGitRepoURL = "mlflow.source.git.repoURL"
)

// sourceTags are the context tags of a run bridge creates, as MLflow's
// client sets them for the script when it creates the run: the user
// (MLFLOW_TRACKING_USERNAME or the credentials file's, else the
// system's), the source (the script as the command line names it, else
// the command) of type LOCAL, and the git commit, branch and repository
// URL, all three only with a commit, each only when known.
func (s *Sink) sourceTags(info tracker.StartInfo) map[string]string {
	tags := map[string]string{}
	if u := cmp.Or(s.cfg.Username, info.Source.User); u != "" {
		tags[TagUser] = u
	}
	if name := cmp.Or(info.Source.Name, strings.Join(info.Command, " ")); name != "" {
		tags[TagSourceName] = name
		tags[TagSourceType] = "LOCAL"
	}
	if src := info.Source; src.Commit != "" {
		for k, v := range map[string]string{TagGitCommit: src.Commit, TagGitBranch: src.Branch, TagGitRepoURL: src.RepoURL} {
			if v != "" {
				tags[k] = v
			}
		}
	}
	return tags
}

// createRun creates a run in experiment expID with tags, started at start
// (the job's start; zero: now), and the start id that finds it again when
// the answer is lost; it returns the run's id.
func (s *Sink) createRun(ctx context.Context, expID, name string, start time.Time, tags map[string]string) (string, error) {
	if s.startID == "" {
		s.startID = rand.Text()
	}
	tags[StartIDTag] = s.startID
	// A mlflow.runName tag that differs from run_name is a 400.
	if name != "" {
		delete(tags, "mlflow.runName")
	}
	req := createRunRequest{
		ExperimentID: expID,
		RunName:      name,
		StartTime:    cmp.Or(start, time.Now()).UnixMilli(),
		Tags:         tagList(tags),
	}
	var out runResponse
	what := "creating a run in experiment " + expID
	if s.cfg.ExperimentName == "" && expID == s.cfg.ExperimentID {
		what += " (" + EnvExperimentID + ")" // the user's value: a refusal names where it came from
	}
	if err := s.call(ctx, http.MethodPost, "runs/create", nil, req, &out, what); err != nil {
		return "", err
	}
	// The run id goes into the child's environment: an invalid one (a NUL
	// byte, 200 KB) would keep the child from starting.
	if err := tracker.ValidID("run id", out.Run.Info.RunID); err != nil {
		return "", tracker.Permanent(fmt.Errorf("creating a run in experiment %s: MLflow at %s answered with an unusable run: %w", expID, s.url, err))
	}
	return out.Run.Info.RunID, nil
}

// experiment returns the id of the experiment to create the run in, creating
// it by name when needed. Two jobs creating the same experiment at once is
// normal (a multi-node job): the loser gets RESOURCE_ALREADY_EXISTS and looks
// the experiment up again.
func (s *Sink) experiment(ctx context.Context) (string, error) {
	name, id := s.cfg.ExperimentName, s.cfg.ExperimentID
	if name == "" {
		if id == "" {
			return DefaultExperimentID, nil
		}
		return id, nil
	}
	exp, err := s.experimentByName(ctx, name)
	if err == nil {
		if exp.LifecycleStage == "deleted" {
			return "", tracker.Permanent(fmt.Errorf("experiment %q (id %s) is deleted on MLflow at %s: restore it (`mlflow experiments restore --experiment-id %s`) or set another %s",
				name, exp.ExperimentID, s.url, exp.ExperimentID, EnvExperimentName))
		}
		if id != "" && id != exp.ExperimentID {
			return "", tracker.Permanent(fmt.Errorf("%s=%s does not match experiment %q, whose id is %s: set only one of %s and %s",
				EnvExperimentID, id, name, exp.ExperimentID, EnvExperimentID, EnvExperimentName))
		}
		return exp.ExperimentID, nil
	}
	if !isCode(err, "RESOURCE_DOES_NOT_EXIST") {
		return "", err
	}
	var out struct {
		ExperimentID string `json:"experiment_id"`
	}
	err = s.call(ctx, http.MethodPost, "experiments/create", nil, map[string]string{"name": name}, &out, fmt.Sprintf("creating experiment %q", name))
	if isCode(err, "RESOURCE_ALREADY_EXISTS") {
		exp, err := s.experimentByName(ctx, name)
		if err != nil {
			return "", err
		}
		return exp.ExperimentID, nil
	}
	if err != nil {
		return "", err
	}
	s.log.Info("created MLflow experiment", "experiment", name, "experiment_id", out.ExperimentID)
	return out.ExperimentID, nil
}

func (s *Sink) experimentByName(ctx context.Context, name string) (experiment, error) {
	var out struct {
		Experiment experiment `json:"experiment"`
	}
	err := s.call(ctx, http.MethodGet, "experiments/get-by-name", map[string]string{"experiment_name": name}, nil, &out,
		fmt.Sprintf("looking up experiment %q", name))
	return out.Experiment, err
}

// StartIDTag is the tag that makes a run bridge created findable again.
const StartIDTag = "bridge.start_id"

// findStarted looks for the run an earlier runs/create of this sink made.
func (s *Sink) findStarted(ctx context.Context, expID string) (RunInfo, bool, error) {
	req := map[string]any{
		"experiment_ids": []string{expID},
		"filter":         fmt.Sprintf("tags.`%s` = '%s'", StartIDTag, s.startID),
		"max_results":    1,
	}
	var out struct {
		Runs []Run `json:"runs"`
	}
	err := s.call(ctx, http.MethodPost, "runs/search", nil, req, &out, fmt.Sprintf("looking for the run created earlier in experiment %s", expID))
	if err != nil || len(out.Runs) == 0 {
		return RunInfo{}, false, err
	}
	return out.Runs[0].Info, true, nil
}

func (s *Sink) getRun(ctx context.Context, id string) (Run, error) {
	var out runResponse
	err := s.call(ctx, http.MethodGet, "runs/get", map[string]string{"run_id": id}, nil, &out, fmt.Sprintf("reading run %s", id))
	return out.Run, err
}

var errNoRun = fmt.Errorf("mlflow sink has no run yet (Start has not succeeded): %w", tracker.ErrNotReady)

// Send implements tracker.Sink: runs/log-batch requests of at most 1000
// metrics and under 1e6 bytes, samples packed together and split only when
// one sample alone exceeds a request. acked counts the samples, from the
// first, whose every point is in a request that succeeded. Resending is safe:
// MLflow drops a point identical to a stored one.
//
// A point MLflow would refuse (a bad key, reported once per key; a time
// before 1970, reported once) is left out and counted (tracker.RunInfo.Dropped), not sent:
// MLflow refuses a whole batch for one bad point, and one must cost only
// itself.
func (s *Sink) Send(ctx context.Context, samples []metrics.Sample) (int, error) {
	ctx = tracker.OneAttempt(ctx) // the Forwarder retries Send
	if s.runID == "" {
		return 0, errNoRun
	}
	if err := s.follow(ctx); err != nil {
		return 0, err
	}
	if !s.ended {
		if err := s.flushStartTags(ctx); err != nil {
			return 0, err
		}
	}
	b := newBatch(s.runID, s.maxMetrics, s.maxBody)
	acked := 0
	pending := 0 // samples complete once the open batch is posted
	s.steady.begin()
	flush := func() error {
		if b.count == 0 {
			acked = pending
			s.steady.acked(acked)
			return nil
		}
		op := fmt.Sprintf("posting %d metrics to run %s", b.count, s.runID)
		if err := s.call(ctx, http.MethodPost, "runs/log-batch", nil, b.body(), nil, op); err != nil {
			s.steady.failed()
			return err
		}
		acked = pending
		s.steady.acked(acked)
		b.reset()
		return nil
	}
	var pts []point
	for i, sm := range samples {
		ts := sm.Time.UnixMilli()
		if s.ended && ts > s.endedAt {
			s.afterEnd++ // the owner ended the run before it was taken
			pending = i + 1
			continue
		}
		if ts < 0 {
			// MLflow: "Timestamp must be a nonnegative long".
			s.dropped += len(sm.Points)
			if !s.tsLog {
				s.tsLog = true
				s.log.Warn("a sample's time is before 1970, which MLflow refuses; its points are not sent", "step", sm.Seq, "time_ms", ts)
			}
			pending = i + 1
			continue
		}
		for _, p := range sm.Points {
			key := s.prefix + p.Name()
			if !s.checkKey(key) {
				s.dropped++
				continue
			}
			pts = pts[:0]
			if (p.Desc != nil && p.Desc.Steady) || (p.Desc == nil && s.steady.known(key)) {
				pts = s.steady.pick(key, i, p.Value, ts, sm.Seq, pts)
			} else {
				pts = append(pts, point{p.Value, ts, sm.Seq})
			}
			for _, q := range pts {
				m := encodeMetric(key, q.value, q.ts, q.step)
				if !b.fits(m) {
					if err := flush(); err != nil {
						return acked, err
					}
				}
				b.add(m)
			}
		}
		pending = i + 1
	}
	if err := flush(); err != nil {
		return acked, err
	}
	if s.ended {
		taken := fmt.Sprintf("%d samples", s.afterEnd)
		if s.afterEnd == 1 {
			taken = "1 sample"
		}
		return acked, &tracker.RunEnded{LeftOut: s.afterEnd, Msg: fmt.Sprintf("%v: its owner set run %s %s at %s, and bridge left out the %s taken after that",
			tracker.ErrRunEnded, s.runID, s.endState, time.UnixMilli(s.endedAt).UTC().Format("2006-01-02T15:04:05.000Z"), taken)}
	}
	return acked, nil
}

// follow (Config.Follow) reads the run's status, as MLflow's own monitor
// does before each post, until it finds the run ended by its owner. The
// end time is the owner's (mlflow.end_run() stamps it); a status set
// without one ends the run now.
func (s *Sink) follow(ctx context.Context) error {
	if !s.cfg.Follow || s.ended {
		return nil
	}
	run, err := s.getRun(ctx, s.runID)
	if err != nil {
		return err
	}
	if st := run.Info.Status; st == StatusFinished || st == StatusFailed || st == StatusKilled {
		s.ended, s.endState, s.endedAt = true, st, int64(run.Info.EndTime)
		if s.endedAt <= 0 {
			s.endedAt = time.Now().UnixMilli()
		}
	}
	return nil
}

// sendHeld sends, at the run's end, the points of steady series held back
// at the ends of their flat stretches (steady.go), in the order of their
// keys.
func (s *Sink) sendHeld(ctx context.Context) error {
	held := s.steady.held()
	if len(held) == 0 {
		return nil
	}
	b := newBatch(s.runID, s.maxMetrics, s.maxBody)
	post := func() error {
		op := fmt.Sprintf("posting the last %d points of steady series to run %s", b.count, s.runID)
		if err := s.call(ctx, http.MethodPost, "runs/log-batch", nil, b.body(), nil, op); err != nil {
			return err
		}
		b.reset()
		return nil
	}
	for _, key := range slices.Sorted(maps.Keys(held)) {
		p := held[key]
		m := encodeMetric(key, p.value, p.ts, p.step)
		if !b.fits(m) {
			if err := post(); err != nil {
				return err
			}
		}
		b.add(m)
	}
	if err := post(); err != nil {
		return err
	}
	s.steady.sent(held)
	return nil
}

// sendFigures records the job's figures (tracker.EndInfo.Figures) as run
// metrics, one point each under this node's keys, at the end's time and
// step 0: the runs table sorts and charts runs by them. Repeating it is
// safe (MLflow drops an identical point); a figure outside its range, or
// not finite, is not sent.
func (s *Sink) sendFigures(ctx context.Context, end tracker.EndInfo) error {
	if len(end.Figures) == 0 {
		return nil
	}
	ts := cmp.Or(end.Time, time.Now()).UnixMilli()
	b := newBatch(s.runID, s.maxMetrics, s.maxBody)
	for _, p := range end.Figures {
		key := s.prefix + p.Name()
		if p.Desc == nil || !p.Desc.Range().Holds(p.Value) || !s.checkKey(key) {
			continue
		}
		if m := encodeMetric(key, p.Value, ts, 0); b.fits(m) {
			b.add(m)
		}
	}
	if b.count == 0 {
		return nil
	}
	return s.call(ctx, http.MethodPost, "runs/log-batch", nil, b.body(), nil, fmt.Sprintf("recording the job's %d figures on run %s", b.count, s.runID))
}

// checkKey applies MLflow's key rules, so that a bad name is dropped here
// instead of failing a whole batch with a 400.
func (s *Sink) checkKey(key string) bool {
	if ok, seen := s.keyOK[key]; seen {
		return ok
	}
	ok := validKey(key)
	s.keyOK[key] = ok
	if !ok {
		s.log.Warn("metric key not accepted by MLflow, not sent", "key", key,
			"rule", "at most 250 characters of letters, digits, _ - . space : /, no // or trailing /")
	}
	return ok
}

func validKey(key string) bool {
	return len(key) <= maxKeyLength && keyRe.MatchString(key) &&
		!strings.Contains(key, "//") && !strings.HasSuffix(key, "/") && !strings.HasPrefix(key, "/") &&
		!slices.ContainsFunc(strings.Split(key, "/"), func(seg string) bool { return seg == "." || seg == ".." })
}

// SetTags implements tracker.RunStore: it records tags on run id (the
// sink's own at Start and Finish), through runs/log-batch (100 tags per
// request). Values are cut to MLflow's 8000 characters. Setting a tag
// again to the same value changes nothing: safe to repeat.
func (s *Sink) SetTags(ctx context.Context, id string, tags map[string]string) error {
	if id == "" {
		return errNoRun
	}
	list := tagList(tags)
	for len(list) > 0 {
		n := min(len(list), maxTagsPerBatch)
		req := logBatchTags{RunID: id, Tags: list[:n]}
		if err := s.call(ctx, http.MethodPost, "runs/log-batch", nil, req, nil, fmt.Sprintf("setting %d tags on run %s", n, id)); err != nil {
			return err
		}
		list = list[n:]
	}
	return nil
}

// Finish implements tracker.Sink: it records end.Tags and end.Figures
// (sendFigures) and, if bridge created
// the run and the run is still RUNNING (the child did not end it, or was
// killed before it could), sets KILLED when the child died of a signal,
// FAILED on a non-zero exit and FINISHED on 0. A status the child set is
// left alone. After an error it is safe to call again.
//
// Each of its requests is retried by the write policy (tracker.Request)
// within ctx: an error that one outlasted it is a *tracker.WriteError.
// runs/update sets the same status and end time again when repeated.
func (s *Sink) Finish(ctx context.Context, end tracker.EndInfo) error {
	if s.runID == "" {
		return errNoRun
	}
	if s.jobRun != "" {
		return s.finishJob(ctx, end)
	}
	if err := s.follow(ctx); err != nil {
		return err
	}
	if s.ended {
		// Its owner ended it: nothing is written after its end (the held
		// points are of samples taken before it).
		s.log.Debug("the run was ended by its owner; its end is left as recorded", "run_id", s.runID, "status", s.endState)
		return s.sendHeld(ctx)
	}
	var errs []error
	if err := s.flushStartTags(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.sendHeld(ctx); err != nil {
		errs = append(errs, err)
	}
	if len(end.Tags) > 0 {
		errs = append(errs, s.SetTags(ctx, s.runID, end.Tags))
	}
	if err := s.sendFigures(ctx, end); err != nil {
		errs = append(errs, err)
	}
	if !s.created || end.KeepStatus {
		return errors.Join(errs...)
	}
	run, err := s.getRun(ctx, s.runID)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if run.Info.Status != StatusRunning {
		s.log.Debug("run already ended by the child, status left as is", "run_id", s.runID, "status", run.Info.Status)
		return errors.Join(errs...)
	}
	status := tracker.TerminalStatus(end)
	endTime := end.Time
	if endTime.IsZero() {
		endTime = time.Now()
	}
	if err := s.update(ctx, s.runID, status, endTime); err != nil {
		errs = append(errs, err)
	} else {
		s.log.Info("set MLflow run status", "run_id", s.runID, "status", status)
	}
	return errors.Join(errs...)
}
