package mlflow

import (
	"fmt"

	"github.com/bridge-dev/bridge/tracker"
)

// Registration is the MLflow tracker as bridge registers it
// (pipeline.Trackers): its variables, its help, its sink, and its runs as
// a run store (`bridge report`, the job's end).
func Registration() tracker.Registration {
	return tracker.Registration{
		Name: "mlflow", RunIDEnv: EnvRunID, NodeIDEnv: EnvNodeID, Resume: true, AttachRunHint: "mlflow.active_run().info.run_id",
		Configured: Configured, Build: build, Store: store,
		Help: tracker.Help{Title: "MLflow", On: "MLFLOW_TRACKING_URI is set", Vars: `
  MLFLOW_TRACKING_URI         the http(s) URL of an ` + "`mlflow server`" + ` (a sqlite:, file:
                              or path store is not one: bridge says how to serve it)
  MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD, MLFLOW_TRACKING_TOKEN
  MLFLOW_RUN_ID, MLFLOW_EXPERIMENT_NAME, MLFLOW_EXPERIMENT_ID,
  MLFLOW_SYSTEM_METRICS_NODE_ID, MLFLOW_HTTP_REQUEST_TIMEOUT, MLFLOW_TRACKING_*_TLS/_CERT_PATH`},
	}
}

// build: MLflow's variables as ConfigFromEnv reads them; a value bridge
// can do without is warned about and left out.
func build(b tracker.Build) (tracker.Sink, error) {
	mc, ignored, err := ConfigFromEnv(b.Getenv, b.Home)
	if err != nil {
		return nil, err
	}
	for _, line := range ignored {
		b.Log.Warn(line, "tracker", "mlflow")
	}
	if mc.RunID != "" && b.RunID == "" {
		if err := tracker.ValidID(EnvRunID, mc.RunID); err != nil {
			return nil, fmt.Errorf("%w: MLflow's client refuses it too; set it to a run's id, or unset it (bridge then creates a run)", err)
		}
	}
	mc.NodeID = b.NodeID
	if b.RunName != "" {
		mc.RunName = b.RunName
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
	if b.Job != nil && mc.RunID == "" {
		mc.Job = b.Job
	}
	return New(mc, b.Log.With("tracker", "mlflow"))
}

// recordedExperiment puts the experiment the spool recorded for the
// attempt (its run's, or the one it was to be created in) into mc, over
// MLFLOW_EXPERIMENT_ID and MLFLOW_EXPERIMENT_NAME where `bridge sync` runs:
// the job's run is there. Its id wins over its name (an experiment may be
// renamed); a variable that names another experiment is warned about.
func recordedExperiment(mc *Config, b tracker.Build) {
	id, name := b.Recorded[TagExperimentID], b.Recorded[TagExperimentName]
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

// store opens the server MLflow's variables name as a run store, for
// reading runs by id (`bridge report`): it writes nothing of its own.
func store(b tracker.Build) (tracker.RunOwner, error) {
	cfg, ignored, err := ConfigFromEnv(b.Getenv, b.Home)
	for _, line := range ignored {
		b.Log.Warn(line)
	}
	if err != nil {
		return nil, err
	}
	cfg.RunID = "" // the runs to read are named by the caller
	s, err := New(cfg, b.Log)
	if err != nil {
		return nil, err
	}
	return reader{s}, nil
}
