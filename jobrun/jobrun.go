// Package jobrun is what bridge builds from a tracker's run, above the
// trackers' adapters: a multi-node job's end (its status from every node's
// record, its first failure, its report written on the run), the report
// `bridge report` reads, and the end a bridge recorded on its run (for
// `bridge sync`). It reads and writes runs through a tracker.RunStore,
// which an adapter implements (MLflow's fully, W&B's where its API
// allows); it makes no request itself. docs/multinode.md says what a user
// sees of it.
package jobrun

import (
	"context"
	"log/slog"
	"time"

	"github.com/bridge-dev/bridge/tracker"
)

// Node is one bridge of a multi-node job, as the job's records name it.
type Node struct {
	Node, Task string // its node's id; "" for the node's lead, else its task
	// Scope is the prefix of its tags on a run the whole job shares (W&B's
	// shared run): bridge.node.<node>, bridge.task.<node>.<task>
	// (tracker.JobScope).
	Scope string
	Who   string // its name in the job's records: <node>, <node>.<task>
	// Nodes is how many nodes the launcher started, 0 when it did not say:
	// then the run's own record of it (tracker.TagNodes) counts.
	Nodes   int
	Attempt int // the launcher's restart count; -1 unknown
	Rank    int // the launcher's index of its node; -1 unknown
	// Lead: the lead bridge of the launcher's first node (rank 0), which
	// reads a run the whole job shares on its ticks (Sink.TicksLive); on
	// a job's run with a run a node, the first nodes take turns
	// (evaluate.go).
	Lead bool
	// Clock is the end's clock: when this node claims the report, and
	// whether another's claim went stale; nil: the wall clock (the
	// simulation gives its virtual one).
	Clock func() time.Time
}

// now is the node's clock's time.
func (n Node) now() time.Time {
	if n.Clock == nil {
		return time.Now()
	}
	return n.Clock()
}

// NodeOf is the node a multi-node job's bridge is on its run; nil for a
// single-node job.
func NodeOf(j *tracker.Job) *Node {
	if j == nil {
		return nil
	}
	scope, who := tracker.JobScope(j.Node, j.Task)
	return &Node{Node: j.Node, Task: j.Task, Scope: scope, Who: who, Nodes: j.Nodes, Attempt: j.Attempt, Rank: j.Rank, Lead: j.Rank == 0 && j.Task == ""}
}

// ownScope is the prefix of a bridge's end tags on its node's own run:
// the lead's are the node's (bridge.*, as a single run has them), a
// further bridge's under its task (bridge.task.<task>.).
func (n Node) ownScope() string {
	if n.Task == "" {
		return "bridge."
	}
	return "bridge.task." + n.Task + "."
}

// Sink is a tracker's sink whose run is also a run store: after the sink's
// own Finish has recorded this node's end, its Finish decides the job's
// end from every node's record (End); the run's ticks (Tick) read and
// write the run during the job. Everything else is the sink's.
type Sink struct {
	tracker.Sink
	store tracker.RunStore
	node  *Node // nil: a single-node job's run
	log   *slog.Logger

	noteFull bool // the run's note had no room for bridge's section (said once)

	// The live evaluation's rotation (evaluate.go): the candidates' slots
	// this node evaluates for them, the minute it last read the run, and
	// the minute of its first tick as a candidate.
	adopted       map[int]bool
	evaluatedAt   int64
	evaluatedOnce bool
	firstMinute   int64
	ticked        bool
}

// Wrap is s with what this package does on its run: the job's end of a
// multi-node job (node not nil) on a sink that is a tracker.RunStore, the
// end a bridge recorded on a run whose status bridge owns (RecordedEnd,
// on a tracker.RunOwner), and the run's ticks on a run store that owns
// its runs or has notes (tracker.NoteWriter). Any other s is returned as
// it is.
func Wrap(s tracker.Sink, node *Node, log *slog.Logger) tracker.Sink {
	st, ok := s.(tracker.RunStore)
	if !ok {
		return s
	}
	_, owner := st.(tracker.RunOwner)
	if _, noted := st.(tracker.NoteWriter); node == nil && !owner && !noted {
		return s
	}
	if log == nil {
		log = slog.Default()
	}
	return &Sink{Sink: s, store: st, node: node, log: log}
}

// Finish records the end on the sink's run and, on a multi-node job's run
// once this node's end is recorded, the job's (End), within ctx.
func (s *Sink) Finish(ctx context.Context, end tracker.EndInfo) error {
	if err := s.Sink.Finish(ctx, end); err != nil || s.node == nil || end.KeepStatus {
		return err
	}
	return End(ctx, s.store, runsOf(s.Sink.Run()), *s.node, end, s.log)
}

// Runs are the runs of a multi-node job's bridge: the job's, and its
// node's own where it writes to one (MLflow's); Node "" where the job's
// run is shared by every node (W&B's).
type Runs struct{ Job, Node string }

// runsOf reads a sink's runs from what it knows of them.
func runsOf(ri tracker.RunInfo) Runs {
	if ri.Job == "" {
		return Runs{Job: ri.ID}
	}
	return Runs{Job: ri.Job, Node: ri.ID}
}

// Reached implements tracker.Reacher as the sink does; one that cannot
// tell counts as reached.
func (s *Sink) Reached() bool {
	r, ok := s.Sink.(tracker.Reacher)
	return !ok || r.Reached()
}

// Link implements tracker.Linker as the sink does.
func (s *Sink) Link() ([]string, bool) {
	l, ok := s.Sink.(tracker.Linker)
	if !ok {
		return nil, false
	}
	return l.Link()
}

// RecordedEnd is the end a bridge recorded on the run sink writes to since
// then (for a multi-node job's run, this node's), and whether there is
// one: `bridge sync` asks before it records an attempt whose spool has no
// end as lost (a full disk can keep the end record out of the spool after
// the tracker got the end). A sink this package did not wrap (Wrap) has
// none to read.
func RecordedEnd(ctx context.Context, sink tracker.Sink, since time.Time) (tracker.EndInfo, bool, error) {
	s, ok := sink.(*Sink)
	if !ok {
		return tracker.EndInfo{}, false, nil
	}
	if _, owner := s.store.(tracker.RunOwner); !owner && s.node == nil {
		return tracker.EndInfo{}, false, nil // a run whose end is not bridge's to record
	}
	return recordedEnd(ctx, s.store, runsOf(s.Sink.Run()), s.node, since)
}
