package tracker

import (
	"context"
	"errors"
	"time"
)

// StoredRun is a run as its tracker holds it: what the job's end, its
// report and `bridge report` read (package jobrun). The caller owns it.
type StoredRun struct {
	ID     string
	Status string    // RUNNING, FINISHED, FAILED, KILLED; "" where the run's status is not bridge's (W&B's is the child's)
	End    time.Time // the run's end time as recorded, zero when none
	Tags   map[string]string
	// Latest is every series' latest value, by the tracker's key; nil
	// where the store does not read them.
	Latest map[string]float64
	// Artifacts is where the run's artifacts are (MLflow's artifact_uri),
	// for PutArtifact.
	Artifacts string
	// Step is the largest step the run's own series reached (the training
	// script's: bridge's system/ series are not its steps), 0 when the
	// store does not know one.
	Step int64
	// Note is the run's description a person reads and may write
	// (MLflow's mlflow.note.content, W&B's notes); "" for none.
	Note string
}

// Point is one point of a series' history.
type Point struct {
	Time  time.Time
	Value float64
}

// ErrHistoryTooLong marks a series with more points than a store reads
// (RunOwner.History): its figures are left out, the report says why.
var ErrHistoryTooLong = errors.New("more points than bridge report reads")

// RunStore is a tracker's runs as bridge reads and writes them beyond the
// samples: a multi-node job's records, its first failure and its report
// (package jobrun). A sink that is one gets the job's end decided on its
// run; on any other run bridge records nothing but its samples and end.
//
// Contract: the methods are called one at a time, after the sink's Start
// found the run: during the job from the run's tick (pipeline's Session),
// beside Send, which an implementation is safe for; at the job's end once
// its forwarder has returned; or on a store Registration.Store opened.
// Every call honours ctx and sends its requests through Request: retried
// by the write policy unless ctx is OneAttempt, so each is safe to repeat.
type RunStore interface {
	// GetRun reads run id: its status, tags and what else the store holds
	// (StoredRun), in one bounded read. A run that does not exist yet (W&B's
	// before the child's wandb.init) is an error wrapping ErrNotReady.
	GetRun(ctx context.Context, id string) (StoredRun, error)
	// SetTags sets tags on run id. Setting a tag again to the same value
	// changes nothing.
	SetTags(ctx context.Context, id string, tags map[string]string) error
}

// NoteWriter is a RunStore whose runs have a note a person reads
// (StoredRun.Note): MLflow's description on the run's Overview page, W&B's
// notes. The note is a person's as much as bridge's: package jobrun writes
// only its own section of it.
type NoteWriter interface {
	RunStore
	// SetNote writes run id's note whole. Setting the same note again
	// changes nothing.
	SetNote(ctx context.Context, id, note string) error
}

// SeriesWriter is a RunStore that takes points of series on a run.
type SeriesWriter interface {
	RunStore
	// LogPoints adds one point to each series in values (the tracker's keys) at time at, step step.
	LogPoints(ctx context.Context, id string, values map[string]float64, at time.Time, step int64) error
}

// RunOwner is a RunStore whose runs bridge owns (MLflow's): their status
// is bridge's to set, their series read back and files written beside
// them.
type RunOwner interface {
	RunStore
	// History reads every point of one series of run id, oldest first, in
	// pages of a bounded answer, to a bound on points: past it an error
	// wrapping ErrHistoryTooLong.
	History(ctx context.Context, id, key string) ([]Point, error)
	// SetStatus sets run id's terminal status and end time.
	SetStatus(ctx context.Context, id, status string, end time.Time) error
	// PutArtifact writes a file named name into run's artifacts; the same
	// file again replaces it.
	PutArtifact(ctx context.Context, run StoredRun, name, contentType string, body []byte) error
}
