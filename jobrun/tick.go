package jobrun

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
)

// What one of the run's ticks does on the run (pipeline's Session calls
// Tick once a --run-tick, and once more at the end of the run): one
// bounded read of the run (GetRun: its tags, its series' latest values,
// the largest step of the training script's own series), and what
// follows from it: the job's energy per step, and the run's note kept
// current. Periodic reads and writes of a run belong here, and nowhere
// else.

// Tags of the job's energy per step, written on the job's run at the end
// (on a run bridge owns): the job's energy (every node's GPUs and CPU
// packages) over the largest step its own series reached, and that step.
const (
	TagEnergyPerStep = "bridge.energy_per_step_joules"
	TagSteps         = "bridge.steps"
)

// Live is what this bridge measured of its job so far, for one tick.
type Live struct {
	// Tags are this node's tags as its end would record them now (bridge.*
	// keys, unscoped: peak memory, limits, advice, energy, cost); the tick
	// reads them over what the run holds of this node.
	Tags map[string]string
	// Shares are the bottleneck causes' shares of the run so far (Shares),
	// "" when not known.
	Shares string
	// Note: write the run's note on this tick.
	Note bool
	// End: the end of the run, after the end was recorded. The note is
	// written, and on a run bridge owns the job's energy per step
	// (TagEnergyPerStep, TagSteps).
	End bool
	// Status is this node's end status at the end, for a run whose status
	// is not bridge's (W&B's); "" during the run.
	Status string
	// At is the tick's wall time (the caller's clock: Tick never reads
	// one): the line's at, the tick's minute (Every) and which lines are
	// stale.
	At time.Time
	// Latest are this node's latest values of the signals the job's live
	// evaluation compares (report.LiveSignals), for its line.
	Latest report.Latest
	// Every is the period of the ticks (--run-tick): the evaluators of a
	// job take turns a period each (evaluates). 0: every tick.
	Every time.Duration
}

// Progress is what one tick read of the job: the largest step its run's
// own series reached, and the job's energy per step then (0 without a step
// or an energy).
type Progress struct {
	Steps               int64
	EnergyPerStepJoules float64
}

// TicksLive reports whether this bridge ticks during the run: a single
// run's, and in a multi-node job each node's lead bridge: each writes its
// state line, where its node writes to a run of its own (MLflow's node
// runs), and the lead bridges of the launcher's first nodes take turns to
// read the job's run for the whole job (evaluate.go); on a run the job
// shares (W&B's) the first node's lead (Node.Lead) reads it. Every node's
// bridge ticks at its end.
func (s *Sink) TicksLive() bool { return s.node == nil || s.node.Task == "" }

// Tick is one of the run's ticks on run id (a job's node writing to a run
// of its own: the job's run, runs.Job), within ctx: one GetRun, the
// job's report of it with this node's live tags over its record (no
// series read), on a job's run the live evaluation (evaluate.go; a node
// whose minute it is not writes its line only, no read), and then, with live.Note or live.End, the run's note
// (written only when it changed; a person's note kept, withSection), and
// with live.End on a run bridge owns, the job's energy per step. Every
// request goes through tracker.Request, retried within ctx's deadline. A
// run that does not exist yet (W&B's before the child's wandb.init) is no
// error: nothing to read.
func (s *Sink) Tick(ctx context.Context, id string, live Live) (Progress, error) {
	if id == "" {
		return Progress{}, errNoRun
	}
	if s.node != nil && s.node.Task != "" {
		return Progress{}, nil // a node's further bridge: its node's lead ticks
	}
	runs := runsOf(s.Sink.Run())
	if s.node != nil && runs.Node != "" {
		id = runs.Job
	}
	// A job's node whose node writes to a run of its own (MLflow's): one
	// write a tick, its line, but on the minutes it evaluates the job
	// (evaluate.go).
	ownRun := s.node != nil && runs.Node != "" && !live.End
	var t turn
	if ownRun {
		t = s.turnOf(live)
		if !s.ticked {
			s.firstMinute, s.ticked = t.m, true
		}
		if !s.evaluates(t) {
			return Progress{}, s.store.SetTags(ctx, id, map[string]string{tracker.StateTag(s.node.Node, ""): s.liveLine(live, runs)})
		}
		s.evaluatedAt, s.evaluatedOnce = t.m, true
	} else if s.node != nil && !s.node.Lead && !live.End {
		return Progress{}, nil // a run the job shares: the first node's lead reads it
	}
	run, err := s.store.GetRun(ctx, id)
	if errors.Is(err, tracker.ErrNotReady) {
		return Progress{}, nil
	}
	if err != nil {
		return Progress{}, err
	}
	run = s.withLive(run, live, runs)
	rep, _ := report.Build(ctx, reportRun(run), nil) // no series: no error
	var p Progress
	if rep.EnergyPerStepJoules != nil {
		p = Progress{Steps: rep.Steps, EnergyPerStepJoules: rep.EnergyPerStepJoules.Float64()}
	}
	var errs []error
	if ownRun {
		ev := evaluation{tags: map[string]string{}}
		if s.adopt(t, run.Tags) {
			ev = s.evaluate(run, rep, live, t)
		}
		ev.tags[tracker.StateTag(s.node.Node, "")] = run.Tags[tracker.StateTag(s.node.Node, "")]
		errs = append(errs, s.write(ctx, id, ev, t))
	}
	if _, owner := s.store.(tracker.RunOwner); live.End && owner && p.Steps > 0 {
		tags := map[string]string{TagEnergyPerStep: strconv.FormatFloat(p.EnergyPerStepJoules, 'f', -1, 64), TagSteps: strconv.FormatInt(p.Steps, 10)}
		errs = append(errs, s.store.SetTags(ctx, id, tags))
	}
	if live.Note || live.End {
		errs = append(errs, s.writeNote(ctx, run, rep, live))
	}
	return p, errors.Join(errs...)
}

// withLive is run with live's tags over this node's record (its state
// line, where it writes to a run of its own: runs.Node; else under its
// scope in a job's run) and, where the run's status is not bridge's, the
// status live gives. A state line that holds the node's end already (the
// end's tick) is kept.
func (s *Sink) withLive(run tracker.StoredRun, live Live, runs Runs) tracker.StoredRun {
	tags := maps.Clone(run.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	if s.node != nil && runs.Node != "" {
		tag := tracker.StateTag(s.node.Node, s.node.Task)
		if st := tracker.ParseLine(tags[tag])[tracker.LineStatus]; st == "" || st == tracker.StatusRunning {
			tags[tag] = s.liveLine(live, runs)
		}
		run.Tags = tags
		return run
	}
	for k, v := range live.Tags {
		if rest, ok := strings.CutPrefix(k, "bridge."); ok && s.node != nil {
			k = s.node.Scope + "." + rest
		}
		tags[k] = v
	}
	run.Tags = tags
	if s.node == nil && run.Status == "" && live.Status != "" {
		run.Status = live.Status
	}
	return run
}

// writeNote writes bridge's section of the run's note, where the store
// has notes (tracker.NoteWriter) and the note changed: a person's note
// kept, bridge's section replaced or appended once.
func (s *Sink) writeNote(ctx context.Context, run tracker.StoredRun, rep *report.Report, live Live) error {
	nw, ok := s.store.(tracker.NoteWriter)
	if !ok {
		return nil
	}
	who := ""
	if s.node != nil {
		who = s.node.Who
	}
	note, fits := withSection(run.Note, noteOf(rep, run.Tags, who, live.Shares))
	if !fits {
		if !s.noteFull {
			s.noteFull = true
			s.log.Warn("the run's note is too long to add bridge's summary; it is left as it is", "run_id", run.ID, "max_characters", NoteMax)
		}
		return nil
	}
	if note == run.Note {
		return nil
	}
	return nw.SetNote(ctx, run.ID, note)
}

// liveLine is this node's state line while it runs: RUNNING, its attempt,
// when (live.At), its run, its figures so far (live.Tags) and its latest
// values (live.Latest).
func (s *Sink) liveLine(live Live, runs Runs) string {
	return report.EndLine(live.Tags, report.Ending{Who: s.node.Who, Status: tracker.StatusRunning, Attempt: s.node.Attempt, Run: runs.Node, At: live.At, Latest: live.Latest})
}

// TagDiffers holds, on a job's run, the nodes that differ from the job
// now and why, in the report's words ("node-17: CPU throttled in 85% of
// periods; node-203: ..."), and the nodes whose line stopped moving;
// "none" when no node does. The evaluator writes it on its tick
// (evaluate.go).
const TagDiffers = "bridge.job.differs"

// staleLine: a running node's line older than this, against the tick's
// At, has stopped reporting.
const staleLine = 3 * time.Minute

// differsMax bounds TagDiffers (MLflow takes 8,000 characters a tag).
const differsMax = 4000
