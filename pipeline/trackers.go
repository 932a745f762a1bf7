package pipeline

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
	"github.com/bridge-dev/bridge/tracker/wandb"
)

// Overrides are run ids a subcommand sets over the environment (a resumed
// attempt's run, attach's and sync's --run-id), keyed by tracker name.
type Overrides struct {
	RunIDs map[string]string // tracker name -> run to write to
	Owned  map[string]bool   // tracker name -> bridge created that run in an earlier attempt
	// Follow (`bridge attach`): the trackers that can follow their run's
	// status stop writing into it once its owner ends it.
	Follow bool
}

// SameRun writes every tracker into run id (attach's and sync's --run-id).
func SameRun(id string) Overrides {
	ov := Overrides{RunIDs: map[string]string{}}
	for _, t := range Trackers {
		ov.RunIDs[t.Name] = id
	}
	return ov
}

// Tracker is one registration: all bridge must know of a tracker before it
// runs. Adding a tracker is its package plus one entry in Trackers;
// --trackers, "auto", the check of its variables, the spool's records,
// `bridge sync` and `bridge attach` follow from the entry.
type Tracker struct {
	Name     string // as in --trackers and the spool's records
	RunIDEnv string // the variable a job names its run with (attach's default)
	Resume   bool   // a restarted attempt writes into the run of the lost one
	// AttachRunHint is set for trackers whose run `bridge attach` must be
	// told (it never creates one): where a job finds its run id.
	AttachRunHint string
	// Configured reports whether the job is set up for the tracker (by its
	// own variables): under --trackers=auto only such a one is built.
	Configured func(getenv func(string) string) bool
	// CheckEnv, when set, rejects the tracker's variables when they are
	// malformed (not merely unset, or pointing elsewhere): a usage error
	// naming the variable, before the child starts, whatever --trackers
	// says (CheckTrackerEnv).
	CheckEnv func(getenv func(string) string) error
	// Build returns the sink, or nil when the tracker is off for this job
	// (explained in the log). Its errors are usage errors.
	Build func(b Build) (tracker.Sink, error)
}

// Build is what a Tracker's Build gets.
type Build struct {
	Config   config.Config
	Explicit bool   // named in --trackers (not just "auto"): must be configured
	RunID    string // an override, or ""
	Owned    bool   // bridge created RunID in an earlier attempt
	Follow   bool   // Overrides.Follow
	Job      *Job   // a multi-node job (nil, or no key: a single-node one)
	Getenv   func(string) string
	Home     string
	Log      *slog.Logger
}

// Trackers is the one list of bridge's trackers, in the order they start.
var Trackers = []Tracker{
	{Name: "mlflow", RunIDEnv: "MLFLOW_RUN_ID", Resume: true, AttachRunHint: "mlflow.active_run().info.run_id",
		Configured: mlflow.Configured, CheckEnv: mlflow.CheckEnv, Build: buildMLflow},
	{Name: "wandb", RunIDEnv: "WANDB_RUN_ID", Configured: wandb.Configured, Build: buildWandb},
}

// CheckTrackerEnv runs every registered tracker's CheckEnv: a malformed
// variable is a usage error (config.ErrUsage) naming it.
func CheckTrackerEnv(getenv func(string) string) error {
	for _, t := range Trackers {
		if t.CheckEnv == nil {
			continue
		}
		if err := t.CheckEnv(getenv); err != nil {
			return fmt.Errorf("%w: %w", config.ErrUsage, err)
		}
	}
	return nil
}

// Registered is the registration of the tracker named name.
func Registered(name string) (Tracker, bool) {
	for _, t := range Trackers {
		if t.Name == name {
			return t, true
		}
	}
	return Tracker{}, false
}

// BuildSinks builds the sinks the configuration turns on. With "auto" a
// tracker is on when its own variables say so (its registration's
// Configured); a tracker named explicitly must be configured, or it is a
// usage error (every error it returns is one).
func BuildSinks(cfg config.Config, ov Overrides, job *Job, log *slog.Logger) ([]tracker.Sink, error) {
	if slices.Contains(cfg.Trackers, "none") {
		return nil, nil
	}
	home, _ := os.UserHomeDir()
	getenv := os.Getenv
	auto := slices.Contains(cfg.Trackers, "auto")
	var sinks []tracker.Sink
	for _, t := range Trackers {
		explicit := slices.Contains(cfg.Trackers, t.Name)
		if !explicit && (!auto || !t.Configured(getenv)) {
			continue
		}
		if job != nil && !job.Multi() {
			job = nil
		}
		s, err := t.Build(Build{Config: cfg, Explicit: explicit, RunID: ov.RunIDs[t.Name], Owned: ov.Owned[t.Name],
			Follow: ov.Follow, Job: job, Getenv: getenv, Home: home, Log: log})
		if err != nil {
			return nil, err
		}
		if s != nil {
			sinks = append(sinks, s)
		}
	}
	return sinks, nil
}

// buildMLflow: a non-HTTP MLflow URI is explained and falls back to the
// spool.
func buildMLflow(b Build) (tracker.Sink, error) {
	mc, err := mlflow.ConfigFromEnv(b.Getenv, b.Home)
	switch {
	case errors.Is(err, mlflow.ErrNotHTTP):
		// Named in --trackers, or MLFLOW_TRACKING_URI names another store.
		b.Log.Warn("MLflow is not reachable over REST from bridge; samples go to the spool", "err", err)
		if b.Explicit {
			return nil, errors.New("--trackers=mlflow needs MLFLOW_TRACKING_URI=http(s)://... of an `mlflow server`")
		}
		return nil, nil
	case err != nil:
		return nil, err
	}
	if b.Config.NodeID != "" { // else MLFLOW_SYSTEM_METRICS_NODE_ID, as read by ConfigFromEnv
		mc.NodeID = b.Config.NodeID
	}
	if b.Config.RunName != "" {
		mc.RunName = b.Config.RunName
	}
	if b.RunID != "" {
		mc.RunID, mc.OwnsRun, mc.Follow = b.RunID, b.Owned, b.Follow
	}
	// A given MLFLOW_RUN_ID keeps its meaning: that run, no election.
	if j := b.Job; j != nil && mc.RunID == "" {
		mc.Job = &mlflow.Job{Key: j.Key, KeyFrom: j.KeyFrom, Generation: j.Generation, Attempt: j.Attempt,
			Nodes: j.Nodes, Settle: j.Settle, Task: j.Task}
	}
	return mlflow.New(mc, b.Log.With("tracker", "mlflow"))
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
	case wc.APIKey == "" && b.Explicit:
		return nil, errors.New("--trackers=wandb needs an API key: set WANDB_API_KEY or add the server to ~/.netrc (as `wandb login` does)")
	case wc.APIKey == "":
		// Under auto a missing key must not stop the job from running.
		b.Log.Warn("WANDB_PROJECT is set but no W&B API key was found (WANDB_API_KEY or ~/.netrc); W&B is off, samples stay in the spool")
		return nil, nil
	}
	wc.Label = b.Config.NodeID
	if b.RunID != "" {
		wc.RunID = b.RunID
	}
	if j := b.Job; j != nil {
		// One run for the whole job, written by every node in shared mode.
		if wc.RunID == "" {
			wc.RunID = wandb.RunIDFor(j.Key)
		}
		wc.Shared, wc.Label = true, j.Label()
		wc.Primary, wc.PrimaryKnown = j.Primary()
	}
	return wandb.New(wc, b.Log) // New adds tracker=wandb itself
}

// TrackerNames are the names --trackers accepts besides "auto" and "none".
func TrackerNames() []string {
	names := make([]string, len(Trackers))
	for i, t := range Trackers {
		names[i] = t.Name
	}
	return names
}
