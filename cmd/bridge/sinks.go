package main

import (
	"errors"
	"log/slog"
	"os"
	"slices"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
	"github.com/bridge-dev/bridge/tracker/wandb"
)

// overrides are values a subcommand sets over the environment (attach's and
// sync's --run-id).
type overrides struct {
	mlflowRunID string
	mlflowOwns  bool // bridge created mlflowRunID in an earlier attempt
	wandbRunID  string
}

// buildSinks is the one place that lists bridge's trackers. With "auto" a
// tracker is on when its own variables say so (MLFLOW_TRACKING_URI, W&B's
// API key or project); a tracker named explicitly must be configured, or it
// is a usage error (every error it returns is one). A non-HTTP MLflow URI is explained and falls back to the
// spool.
func buildSinks(cfg config.Config, ov overrides, log *slog.Logger) ([]tracker.Sink, error) {
	home, _ := os.UserHomeDir()
	auto := slices.Contains(cfg.Trackers, "auto")
	want := func(name string) bool { return slices.Contains(cfg.Trackers, name) }
	if want("none") {
		return nil, nil
	}
	var sinks []tracker.Sink

	if auto || want("mlflow") {
		mc, err := mlflow.ConfigFromEnv(os.Getenv, home)
		switch {
		case errors.Is(err, mlflow.ErrNotHTTP):
			if want("mlflow") || os.Getenv("MLFLOW_TRACKING_URI") != "" {
				log.Warn("MLflow is not reachable over REST from bridge; samples go to the spool", "err", err)
			}
		case err != nil:
			return nil, err
		default:
			if cfg.NodeID != "" { // else MLFLOW_SYSTEM_METRICS_NODE_ID, as read by ConfigFromEnv
				mc.NodeID = cfg.NodeID
			}
			if cfg.RunName != "" {
				mc.RunName = cfg.RunName
			}
			if ov.mlflowRunID != "" {
				mc.RunID, mc.OwnsRun = ov.mlflowRunID, ov.mlflowOwns
			}
			s, err := mlflow.New(mc, log.With("tracker", "mlflow"))
			if err != nil {
				return nil, err
			}
			sinks = append(sinks, s)
		}
		if want("mlflow") && len(sinks) == 0 {
			return nil, errors.New("--trackers=mlflow needs MLFLOW_TRACKING_URI=http(s)://... of an `mlflow server`")
		}
	}

	if auto || want("wandb") {
		wc, err := wandb.ConfigFromEnv(os.Getenv, home)
		// Under "auto" W&B is on only when the job is set up for it (an API
		// key in the environment or a project), not merely because a netrc
		// holds a key.
		configured := os.Getenv("WANDB_API_KEY") != "" || os.Getenv("WANDB_PROJECT") != ""
		switch {
		case !want("wandb") && !configured:
		case err != nil:
			return nil, err
		case wc.Mode != wandb.ModeOnline:
			log.Info("W&B is off for this job (WANDB_MODE); its samples stay in the spool", "mode", wc.Mode)
		case wc.APIKey == "" && want("wandb"):
			return nil, errors.New("--trackers=wandb needs an API key: set WANDB_API_KEY or add the server to ~/.netrc (as `wandb login` does)")
		case wc.APIKey == "":
			// Under auto a missing key must not stop the job from running.
			log.Warn("WANDB_PROJECT is set but no W&B API key was found (WANDB_API_KEY or ~/.netrc); W&B is off, samples stay in the spool")
		default:
			wc.Label = cfg.NodeID
			if ov.wandbRunID != "" {
				wc.RunID = ov.wandbRunID
			}
			s, err := wandb.New(wc, log) // New adds tracker=wandb itself
			if err != nil {
				return nil, err
			}
			sinks = append(sinks, s)
		}
	}
	return sinks, nil
}
