package wandb

import (
	"errors"

	"github.com/bridge-dev/bridge/tracker"
)

// Registration is the W&B tracker as bridge registers it
// (pipeline.Trackers): its variables, its help and its sink. bridge reads
// no W&B run by id (`bridge report` is MLflow's): it has no Store; a job's
// sink is the run store of its shared run (jobstore.go).
func Registration() tracker.Registration {
	return tracker.Registration{
		Name: "wandb", RunIDEnv: "WANDB_RUN_ID", Configured: Configured, Build: build,
		Help: tracker.Help{Title: "W&B", On: "WANDB_API_KEY or WANDB_PROJECT is set", Vars: `
  WANDB_API_KEY               W&B's key (else the server's entry in ~/.netrc, $NETRC)
  WANDB_BASE_URL, WANDB_ENTITY, WANDB_PROJECT, WANDB_RUN_ID
  WANDB_MODE                  offline or disabled turn bridge's W&B sink off too`},
	}
}

// build: W&B turned off by WANDB_MODE, or without an API key under
// "auto", is explained and falls back to the spool.
func build(b tracker.Build) (tracker.Sink, error) {
	wc, err := ConfigFromEnv(b.Getenv, b.Home)
	switch {
	case err != nil:
		return nil, err
	case wc.Mode != ModeOnline:
		b.Log.Info("W&B is off for this job (WANDB_MODE); its samples stay in the spool", "mode", wc.Mode)
		return nil, nil
	case wc.APIKey == "":
		return nil, errors.New("no W&B API key (WANDB_API_KEY, or the server's entry in ~/.netrc): set WANDB_API_KEY, or run `wandb login`")
	}
	wc.Label = b.NodeID
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
			wc.RunID = RunIDFor(j.Key, j.Generation)
		}
		wc.Shared, wc.Label = true, j.Label()
		wc.Primary, wc.PrimaryKnown = j.Primary, j.PrimaryKnown
	}
	return New(wc, b.Log) // New adds tracker=wandb itself
}
