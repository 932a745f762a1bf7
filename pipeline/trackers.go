package pipeline

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
	"github.com/bridge-dev/bridge/tracker/wandb"
)

// Tracker is one registration: all bridge must know of a tracker before it
// runs. Adding a tracker is its package plus one entry in Trackers;
// --trackers, "auto", the check of its variables, the spool's records,
// `bridge sync` and `bridge attach` follow from the entry.
type Tracker struct {
	Name     string // as in --trackers and the spool's records
	RunIDEnv string // the variable a job names its run with (attach's default)
	// NodeIDEnv is the variable that names the node in the tracker's keys,
	// when bridge's --node-id does not (attach's lock is taken for it).
	NodeIDEnv string
	Resume    bool // a restarted attempt writes into the run of the lost one
	// AttachRunHint is set for trackers whose run `bridge attach` must be
	// told (it never creates one): where a job finds its run id.
	AttachRunHint string
	// Configured reports whether the job is set up for the tracker (by its
	// own variables): under --trackers=auto only such a one is built.
	Configured func(getenv func(string) string) bool
	// Build returns the sink, or nil, nil when the job itself turns the
	// tracker off (WANDB_MODE=offline; said in the log). An error says
	// that a variable of the tracker's own cannot be used, naming it and
	// what to do: the tracker's variables are not bridge's, so that turns
	// off only that tracker (BuildSinks), never the job.
	Build func(b Build) (tracker.Sink, error)
	// Help is what `bridge --help` and the messages about setting a
	// tracker up say of it.
	Help TrackerHelp
}

// TrackerHelp describes a tracker to its user.
type TrackerHelp struct {
	Title string // its name in prose ("MLflow")
	On    string // what turns it on under --trackers=auto ("MLFLOW_TRACKING_URI is set")
	Vars  string // its variables as its own client reads them: lines of `bridge --help`
}

// TrackerOff is a tracker the job asked for (by its variables, or
// --trackers) that is off because a variable of its own cannot be used.
// The job runs; the tracker's samples stay in the spool, and the end-of-run
// table says why and how to upload them.
type TrackerOff struct {
	Tracker string
	Why     string // the variable, what is wrong and what to do
}

// Build is what a Tracker's Build gets.
type Build struct {
	Config   config.Config
	Explicit bool   // named in --trackers (not just "auto"): must be configured
	RunID    string // an override, or ""
	Owned    bool   // bridge created RunID in an earlier attempt
	// Recorded is Overrides.Recorded: where the attempt's run was recorded.
	Recorded map[string]string
	Follow   bool // Overrides.Follow
	Job      *Job // a multi-node job (nil, or no key: a single-node one)
	Getenv   func(string) string
	Home     string
	Log      *slog.Logger
}

// TrackerList is a list of trackers: what the functions on it know of
// trackers comes from it alone (a test adds a toy to its own list).
type TrackerList []Tracker

// Trackers is the one list of bridge's trackers, in the order they start:
// a new list at each call, so that nothing can change bridge's.
func Trackers() TrackerList {
	return TrackerList{
		{Name: "mlflow", RunIDEnv: mlflow.EnvRunID, NodeIDEnv: mlflow.EnvNodeID, Resume: true, AttachRunHint: "mlflow.active_run().info.run_id",
			Configured: mlflow.Configured, Build: buildMLflow, Help: TrackerHelp{Title: "MLflow", On: "MLFLOW_TRACKING_URI is set", Vars: `
  MLFLOW_TRACKING_URI         the http(s) URL of an ` + "`mlflow server`" + ` (a sqlite:, file:
                              or path store is not one: bridge says how to serve it)
  MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD, MLFLOW_TRACKING_TOKEN
  MLFLOW_RUN_ID, MLFLOW_EXPERIMENT_NAME, MLFLOW_EXPERIMENT_ID,
  MLFLOW_SYSTEM_METRICS_NODE_ID, MLFLOW_HTTP_REQUEST_TIMEOUT, MLFLOW_TRACKING_*_TLS/_CERT_PATH`}},
		{Name: "wandb", RunIDEnv: "WANDB_RUN_ID", Configured: wandb.Configured, Build: buildWandb,
			Help: TrackerHelp{Title: "W&B", On: "WANDB_API_KEY or WANDB_PROJECT is set", Vars: `
  WANDB_API_KEY               W&B's key (else the server's entry in ~/.netrc, $NETRC)
  WANDB_BASE_URL, WANDB_ENTITY, WANDB_PROJECT, WANDB_RUN_ID
  WANDB_MODE                  offline or disabled turn bridge's W&B sink off too`}},
	}
}

// Registered is the registration of the tracker named name.
func (ts TrackerList) Registered(name string) (Tracker, bool) {
	for _, t := range ts {
		if t.Name == name {
			return t, true
		}
	}
	return Tracker{}, false
}

// BuildSinks builds the sinks the configuration turns on. With "auto" a
// tracker is on when its own variables say so (its registration's
// Configured); a tracker named explicitly is built whatever they say. A
// tracker whose variables cannot be used is off, with one warning that
// names the variable and says what to do, and is returned in off (for the
// end-of-run table): the job runs without it.
func (ts TrackerList) BuildSinks(cfg config.Config, ov Overrides, job *Job, log *slog.Logger) (sinks []tracker.Sink, off []TrackerOff) {
	if slices.Contains(cfg.Trackers, "none") {
		return nil, nil
	}
	home, _ := os.UserHomeDir()
	getenv := os.Getenv
	auto := slices.Contains(cfg.Trackers, "auto")
	for _, t := range ts {
		explicit := slices.Contains(cfg.Trackers, t.Name)
		if !explicit && (!auto || !t.Configured(getenv)) {
			continue
		}
		if job != nil && !job.Multi() {
			job = nil
		}
		s, err := t.Build(Build{Config: cfg, Explicit: explicit, RunID: ov.RunIDs[t.Name], Owned: ov.Owned[t.Name],
			Recorded: ov.Recorded, Follow: ov.Follow, Job: job, Getenv: getenv, Home: home, Log: log})
		switch {
		case err != nil:
			log.Warn(t.Name+" is off for this job; the job runs, and its samples stay in the spool (the end-of-run table says how to upload them)",
				"tracker", t.Name, "why", err.Error())
			off = append(off, TrackerOff{Tracker: t.Name, Why: err.Error()})
		case s != nil:
			sinks = append(sinks, s)
		}
	}
	return sinks, off
}

// buildMLflow: MLflow's variables as ConfigFromEnv reads them; a value
// bridge can do without is warned about and left out.
func buildMLflow(b Build) (tracker.Sink, error) {
	mc, ignored, err := mlflow.ConfigFromEnv(b.Getenv, b.Home)
	if err != nil {
		return nil, err
	}
	for _, line := range ignored {
		if b.Config.NodeID != "" && strings.HasPrefix(line, mlflow.EnvNodeID+"=") {
			continue // bridge's own node id is used: the variable is not
		}
		b.Log.Warn(line, "tracker", "mlflow")
	}
	if mc.RunID != "" && b.RunID == "" {
		if err := tracker.ValidID(mlflow.EnvRunID, mc.RunID); err != nil {
			return nil, fmt.Errorf("%w: MLflow's client refuses it too; set it to a run's id, or unset it (bridge then creates a run)", err)
		}
	}
	if b.Config.NodeID != "" { // else MLFLOW_SYSTEM_METRICS_NODE_ID, as read by ConfigFromEnv
		mc.NodeID = b.Config.NodeID
	}
	if b.Config.RunName != "" {
		mc.RunName = b.Config.RunName
	}
	recordedExperiment(&mc, b)
	switch j := b.Job; {
	case j != nil && b.RunID != "":
		// The job's run, known (the spool recorded it): joined as the job's,
		// without an election unless it is gone.
		mc.RunID, mc.JobRun = "", b.RunID
	case b.RunID != "":
		mc.RunID, mc.OwnsRun, mc.Follow = b.RunID, b.Owned, b.Follow
	}
	// A given MLFLOW_RUN_ID keeps its meaning: that run, no election.
	if j := b.Job; j != nil && mc.RunID == "" {
		mc.Job = &mlflow.Job{Key: j.Key, KeyFrom: j.KeyFrom, Generation: j.Generation, Attempt: j.Attempt,
			Nodes: j.Nodes, Settle: j.Settle, Task: j.Task, Rank: j.Rank}
	}
	return mlflow.New(mc, b.Log.With("tracker", "mlflow"))
}

// recordedExperiment puts the experiment the spool recorded for the
// attempt (its run's, or the one it was to be created in) into mc, over
// MLFLOW_EXPERIMENT_ID and MLFLOW_EXPERIMENT_NAME where `bridge sync` runs:
// the job's run is there. Its id wins over its name (an experiment may be
// renamed); a variable that names another experiment is warned about.
func recordedExperiment(mc *mlflow.Config, b Build) {
	id, name := b.Recorded[mlflow.TagExperimentID], b.Recorded[mlflow.TagExperimentName]
	if id == "" && name == "" {
		return
	}
	if (mc.ExperimentID != "" && mc.ExperimentID != id) || (mc.ExperimentName != "" && mc.ExperimentName != name) {
		b.Log.Warn("MLFLOW_EXPERIMENT_ID or MLFLOW_EXPERIMENT_NAME differs from the experiment the spool recorded for this run; the spool's is used",
			"experiment_id", mc.ExperimentID, "experiment_name", mc.ExperimentName, "recorded_id", id, "recorded_name", name)
	}
	mc.ExperimentID, mc.ExperimentName = id, name
	if id != "" {
		mc.ExperimentName = ""
	}
}

// buildWandb: W&B turned off by WANDB_MODE, or without an API key under
// "auto", is explained and falls back to the spool.
func buildWandb(b Build) (tracker.Sink, error) {
	wc, err := wandb.ConfigFromEnv(b.Getenv, b.Home)
	switch {
	case err != nil:
		return nil, err
	case wc.Mode != wandb.ModeOnline:
		b.Log.Info("W&B is off for this job (WANDB_MODE); its samples stay in the spool", "mode", wc.Mode)
		return nil, nil
	case wc.APIKey == "":
		return nil, errors.New("no W&B API key (WANDB_API_KEY, or the server's entry in ~/.netrc): set WANDB_API_KEY, or run `wandb login`")
	}
	wc.Label = b.Config.NodeID
	if wc.Label == "" && b.Recorded["bridge.version"] != "" {
		// W&B labels series with the host name when there is no node id:
		// for a spool `bridge sync` uploads, the host its bridge ran on.
		wc.Label = b.Recorded["bridge.hostname"]
	}
	if b.RunID != "" {
		wc.RunID = b.RunID
	}
	if j := b.Job; j != nil {
		// One run for the whole job, written by every node in shared mode.
		if wc.RunID == "" {
			wc.RunID = wandb.RunIDFor(j.Key, j.Generation)
		}
		wc.Shared, wc.Label = true, j.Label()
		wc.Primary, wc.PrimaryKnown = j.Primary()
	}
	return wandb.New(wc, b.Log) // New adds tracker=wandb itself
}

// TrackerNames are the names --trackers accepts besides "auto" and "none".
func (ts TrackerList) TrackerNames() []string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	return names
}

// TrackersOn say what turns each tracker on under --trackers=auto, one
// each: "MLflow when MLFLOW_TRACKING_URI is set".
func (ts TrackerList) TrackersOn() []string {
	var on []string
	for _, t := range ts {
		if t.Help.On != "" {
			on = append(on, t.Help.Title+" when "+t.Help.On)
		}
	}
	return on
}

// TrackerVars are the trackers' variables, for `bridge --help`.
func (ts TrackerList) TrackerVars() string {
	var b strings.Builder
	for _, t := range ts {
		b.WriteString(t.Help.Vars)
	}
	return strings.TrimPrefix(b.String(), "\n")
}

// RunIDVars names the variables jobs name their runs with, for a flag's
// help.
func (ts TrackerList) RunIDVars() string {
	vars := make([]string, len(ts))
	for i, t := range ts {
		vars[i] = t.RunIDEnv
	}
	return strings.Join(vars, " / ")
}
