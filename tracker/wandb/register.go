package wandb

import (
	"cmp"
	"errors"

	"github.com/bridge-dev/bridge/tracker"
)

// Registration is the W&B tracker as bridge registers it
// (pipeline.Trackers): its variables, its help and its sink. bridge reads
// no W&B run by id (`bridge report` is MLflow's): it has no Store; a job's
// sink is the run store of the job's run (jobstore.go).
func Registration() tracker.Registration {
	return tracker.Registration{
		Name: "wandb", RunIDEnv: "WANDB_RUN_ID", Configured: Configured, Build: build,
		Help: tracker.Help{Title: "W&B", On: "WANDB_API_KEY or WANDB_PROJECT is set", Vars: `
  WANDB_API_KEY               W&B's key (else the server's entry in ~/.netrc, $NETRC)
  WANDB_BASE_URL, WANDB_ENTITY, WANDB_PROJECT, WANDB_RUN_ID
  WANDB_MODE                  offline or disabled turn bridge's W&B sink off too`},
	}
}

// build: W&B turned off by WANDB_MODE (a *tracker.Off), or without an API
// key under "auto", is explained and falls back to the spool.
func build(b tracker.Build) (tracker.Sink, error) {
	wc, err := ConfigFromEnv(b.Getenv, b.Home)
	switch {
	case err != nil:
		return nil, err
	case wc.Mode != ModeOnline:
		return nil, offline(wc, b)
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
		// The job's run, which every node's child writes in shared mode;
		// each node's series go to a run of its own in its group
		// (noderun.go).
		if wc.RunID == "" {
			wc.RunID = RunIDFor(j.Key, j.Generation)
		}
		wc.Shared, wc.Label = true, j.Label()
		wc.Primary, wc.PrimaryKnown = j.Primary, j.PrimaryKnown
	}
	return New(wc, b.Log) // New adds tracker=wandb itself
}

// offline is W&B turned off by WANDB_MODE. Offline, the child's wandb
// writes its run to disk under WANDB_RUN_ID (bridge chooses one when the
// job names none, as online; a job's from its key) for `wandb sync`
// later; `bridge sync` of the spool then writes into the same run.
func offline(wc Config, b tracker.Build) *tracker.Off {
	off := &tracker.Off{Why: "WANDB_MODE=" + wc.Mode, On: "unset WANDB_MODE, or set it to online"}
	if wc.Mode != ModeOffline {
		return off
	}
	off.RunID = cmp.Or(b.RunID, wc.RunID)
	if off.RunID == "" && b.Job != nil {
		off.RunID = RunIDFor(b.Job.Key, b.Job.Generation)
	}
	if off.RunID == "" {
		id, err := randomID(8)
		if err != nil {
			return off
		}
		off.RunID = id
	}
	off.Env, off.Upload = []string{"WANDB_RUN_ID=" + off.RunID}, "wandb sync"
	return off
}
