package pipeline

import (
	"fmt"
	"log/slog"

	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/tracker"
)

// Overrides are run ids a subcommand sets over the environment (a resumed
// attempt's run, attach's and sync's --run-id), keyed by tracker name.
type Overrides struct {
	RunIDs map[string]string // tracker name -> run to write to
	Owned  map[string]bool   // tracker name -> bridge created that run in an earlier attempt
	// Recorded is the start record (its tags) of the attempt whose samples
	// `bridge sync` uploads: each tracker takes from it where the attempt's
	// run is (tracker.RunInfo.Place), over its variables here.
	Recorded map[string]string
	// Follow (`bridge attach`): the trackers that can follow their run's
	// status stop writing into it once its owner ends it.
	Follow bool
}

// SameRun writes every tracker into run id (attach's and sync's --run-id).
func (ts TrackerList) SameRun(id string) Overrides {
	ov := Overrides{RunIDs: map[string]string{}}
	for _, t := range ts {
		ov.RunIDs[t.Name] = id
	}
	return ov
}

// ResumeRuns makes an attempt write into the runs of the lost attempt
// whose start record is lost, for each tracker that can resume one
// (Tracker.Resume), unless the tracker's run variable names a run. A
// multi-node job's run is found by its key again instead (the election
// joins the elected run, which also records this node's end).
func (ts TrackerList) ResumeRuns(lost spool.Record, multi bool, getenv func(string) string, log *slog.Logger) Overrides {
	ov := Overrides{RunIDs: map[string]string{}, Owned: map[string]bool{}}
	for _, t := range ts {
		id := lost.Runs[t.Name]
		if !t.Resume || id == "" || getenv(t.RunIDEnv) != "" || multi {
			continue
		}
		ov.RunIDs[t.Name], ov.Owned[t.Name] = id, lost.Info[CreatedTag(t.Name)] == "true"
		log.Info("writing into the run of that attempt again", "tracker", t.Name, "run", id, "attempt", lost.Attempt)
	}
	return ov
}

// AttachRuns are `bridge attach`'s overrides: its --run-id for every
// tracker, else each tracker's run variable. The runs are their owners':
// once one ends its run (mlflow.end_run()), attach writes nothing more
// into it and stops, as MLflow's own monitor does.
func (ts TrackerList) AttachRuns(runID string, getenv func(string) string) Overrides {
	ov := ts.SameRun(runID)
	if runID == "" {
		for _, t := range ts {
			ov.RunIDs[t.Name] = getenv(t.RunIDEnv)
		}
	}
	ov.Follow = true
	return ov
}

// MissingRun is an error, worded for the user, when one of sinks must be
// told its run (Tracker.AttachRunHint: `bridge attach` never creates one)
// and ov does not name it.
func (ts TrackerList) MissingRun(sinks []tracker.Sink, ov Overrides) error {
	for _, s := range sinks {
		if t, _ := ts.Registered(s.Name()); t.AttachRunHint != "" && ov.RunIDs[t.Name] == "" {
			return fmt.Errorf("attach needs the run to write to: --run-id ID or %s (e.g. %s)", t.RunIDEnv, t.AttachRunHint)
		}
	}
	return nil
}

// NodeID is the node id a job's series are keyed under: --node-id, else
// the first tracker variable that names the node (Tracker.NodeIDEnv), as
// that tracker reads it.
func (ts TrackerList) NodeID(flag string, getenv func(string) string) string {
	if flag != "" {
		return flag
	}
	for _, t := range ts {
		if v := getenv(t.NodeIDEnv); t.NodeIDEnv != "" && v != "" {
			return v
		}
	}
	return ""
}
