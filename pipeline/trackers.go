package pipeline

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/internal/printable"
	"github.com/bridge-dev/bridge/jobkey"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
	"github.com/bridge-dev/bridge/tracker/wandb"
)

// TrackerOff is a tracker the job asked for (by its variables, or
// --trackers) that is off because a variable of its own cannot be used,
// or because the job turned it off (Mode: W&B's WANDB_MODE). The job runs;
// the tracker's samples stay in the spool, and the end-of-run table says
// why and how to upload them.
type TrackerOff struct {
	Tracker string
	Why     string       // the variable, what is wrong and what to do
	Mode    *tracker.Off // set when the job's own settings turned it off
}

// Later reports whether the tracker's samples are for an upload later
// (the spool is kept for them): all but those of a tracker the job turned
// off for good (WANDB_MODE=disabled).
func (o TrackerOff) Later() bool { return o.Mode == nil || o.Mode.RunID != "" }

// row is o's line of the end-of-run table: what the start said, where the
// samples are and what uploads them.
func (o TrackerOff) row(sp *spool.Spool) summary.Row {
	var v string
	switch {
	case o.Mode != nil && o.Mode.RunID != "" && sp.InMemory():
		v = fmt.Sprintf("offline (%s): the child's run %s is on disk; bridge's samples are only in this table: there is no spool file", o.Why, o.Mode.RunID)
	case o.Mode != nil && o.Mode.RunID != "":
		v = fmt.Sprintf("offline (%s): the child's run %s is on disk; upload it with %s, then bridge's samples with %s (%s): both land in run %s",
			o.Why, o.Mode.RunID, o.Mode.Upload, SyncCommand(sp.Path()), o.Mode.On, o.Mode.RunID)
	case o.Mode != nil:
		v = "off (" + o.Why + ")"
	case sp.InMemory():
		v = "off: " + o.Why + "; there is no spool file, so the samples are only in this table"
	default:
		v = "off: " + o.Why + "; upload the samples to it later with: " + SyncCommand(sp.Path())
	}
	return summary.Row{What: o.Tracker, Value: v}
}

// TrackerList is a list of tracker registrations: what the functions on
// it know of trackers comes from it alone (a test adds a toy to its own
// list).
type TrackerList []tracker.Registration

// Trackers is the one list of bridge's trackers, in the order they start,
// each its package's registration: a new list at each call, so that
// nothing can change bridge's. It is the one place outside tracker/ that
// names a tracker.
func Trackers() TrackerList {
	return TrackerList{mlflow.Registration(), wandb.Registration()}
}

// Registered is the registration of the tracker named name.
func (ts TrackerList) Registered(name string) (tracker.Registration, bool) {
	for _, t := range ts {
		if t.Name == name {
			return t, true
		}
	}
	return tracker.Registration{}, false
}

// BuildSinks builds the sinks the configuration turns on. With "auto" a
// tracker is on when its own variables say so (its registration's
// Configured); a tracker named explicitly is built whatever they say. A
// tracker whose variables cannot be used is off, with one warning that
// names the variable and says what to do, and is returned in off (for the
// end-of-run table): the job runs without it. A sink whose run is also a
// run store gets what package jobrun does on it (jobrun.Wrap): a
// multi-node job's end.
func (ts TrackerList) BuildSinks(cfg config.Config, ov Overrides, job *Job, log *slog.Logger) (sinks []tracker.Sink, off []TrackerOff) {
	if slices.Contains(cfg.Trackers, "none") {
		return nil, nil
	}
	home, _ := os.UserHomeDir()
	getenv := os.Getenv
	auto := slices.Contains(cfg.Trackers, "auto")
	var tj *tracker.Job
	if job != nil && job.Multi() {
		tj = job.trackerJob()
	}
	for _, t := range ts {
		explicit := slices.Contains(cfg.Trackers, t.Name)
		if !explicit && (!auto || !t.Configured(getenv)) {
			continue
		}
		node := cfg.NodeID
		if node == "" && t.NodeIDEnv != "" {
			var note string
			if node, note = nodeIDFrom(t.NodeIDEnv, getenv); note != "" {
				log.Warn(note, "tracker", t.Name)
			}
		}
		s, err := t.Build(tracker.Build{NodeID: node, RunName: cfg.RunName, RunID: ov.RunIDs[t.Name], Owned: ov.Owned[t.Name],
			Recorded: ov.Recorded, Follow: ov.Follow, Job: tj, Getenv: getenv, Home: home, Log: log})
		var mode *tracker.Off
		switch {
		case errors.As(err, &mode):
			log.Info(t.Help.Title+" is off: "+mode.Why, "tracker", t.Name)
			off = append(off, TrackerOff{Tracker: t.Name, Why: mode.Why, Mode: mode})
		case err != nil:
			log.Warn(t.Name+" is off for this job; the job runs, and its samples stay in the spool (the end-of-run table says how to upload them)",
				"tracker", t.Name, "why", err.Error())
			off = append(off, TrackerOff{Tracker: t.Name, Why: err.Error()})
		case s != nil:
			sinks = append(sinks, jobrun.Wrap(s, jobrun.NodeOf(tj), log))
		}
	}
	return sinks, off
}

// nodeIDFrom is the node id a tracker's own variable env names, as bridge
// uses it: the variable is another tool's, so a value that is not one key
// segment is cleaned into one (jobkey.NodeIDFrom), with note saying so,
// never refused. "" when env is not set.
func nodeIDFrom(env string, getenv func(string) string) (id, note string) {
	raw := strings.TrimSpace(getenv(env))
	id, changed := jobkey.NodeIDFrom(raw)
	if changed {
		note = fmt.Sprintf("%s=%s is not one key segment (letters, digits, _ - . only, at most %d): bridge's series use node id %s (the cleaned value and a hash of it; docs/multinode.md)",
			env, printable.Quote(raw), jobkey.MaxNodeID, id)
	}
	return id, note
}

// NoTracker says why no tracker is on, for a command that needs one
// (`bridge sync`): each tracker that is off and why, with what turns it
// on (W&B offline: WANDB_MODE); with none off, what turns each on.
func (ts TrackerList) NoTracker(off []TrackerOff) string {
	var why []string
	for _, o := range off {
		t, _ := ts.Registered(o.Tracker)
		w := t.Help.Title + " is off (" + o.Why + ")"
		if o.Mode != nil && o.Mode.On != "" {
			w = t.Help.Title + " is off here (" + o.Why + "): " + o.Mode.On + " where bridge sync runs"
		}
		why = append(why, w)
	}
	if len(why) > 0 {
		return strings.Join(why, "; ")
	}
	return "--trackers auto turns on " + strings.Join(ts.TrackersOn(), ", and ")
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

// Reader is the tracker whose runs `bridge report` reads: the first with
// a run store (tracker.Registration.Store) that the variables set up, else
// the first with one (for the messages: configured is false).
func (ts TrackerList) Reader(getenv func(string) string) (t tracker.Registration, configured bool) {
	for _, r := range ts {
		if r.Store == nil {
			continue
		}
		if r.Configured(getenv) {
			return r, true
		}
		if t.Name == "" {
			t = r
		}
	}
	return t, false
}
