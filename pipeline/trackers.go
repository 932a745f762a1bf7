package pipeline

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/internal/printable"
	"github.com/bridge-dev/bridge/jobkey"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
	"github.com/bridge-dev/bridge/tracker/wandb"
)

// TrackerOff is a tracker the job asked for (by its variables, or
// --trackers) that is off because a variable of its own cannot be used.
// The job runs; the tracker's samples stay in the spool, and the end-of-run
// table says why and how to upload them.
type TrackerOff struct {
	Tracker string
	Why     string // the variable, what is wrong and what to do
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
		switch {
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
