package electsim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow/election"
)

// base is virtual time zero on a node clock with no offset.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// node is one bridge: the real election in a goroutine of its own, whose
// every request and sleep is a step the engine schedules. It is the
// election's Store and Clock.
type node struct {
	e           *engine
	index, life int
	started     time.Duration
	rate        float64       // its clock's rate against virtual time
	offset      time.Duration // and offset
	rng         *rand.Rand
	wake        chan answer

	// Owned by the engine while the node is blocked.
	dead, joined, blocked, ended bool
	spent                        bool // its end gave up within the write budget (job.go)
	// killed: by the schedule (dead is also every node stop ended, after
	// the schedule: the invariants ask killed).
	killed bool

	// The live phase (live.go): ticking, ran to its child's end; when its
	// live phase ended (killed or not); a tick's deadline (its budget);
	// its ticks' at (unix ms); reads of the job's run in this tick, and
	// whether it wrote an evaluation's points (a read of an adopted minute
	// another node evaluated already writes none).
	living, liveDone  bool
	liveEnd, deadline time.Duration
	diedAt            time.Duration // when it was killed
	tickAts           []int64
	reads             int
	evaluated         bool
}

func (e *engine) spawn(index, life int) {
	n := &node{
		e: e, index: index, life: life, started: e.now,
		rate:   1 + (e.rng.Float64()-0.5)/100, // within 0.5% of true time
		offset: time.Duration(e.rng.Int64N(int64(time.Hour))),
		rng:    rand.New(rand.NewPCG(e.o.Seed, uint64(index)<<8|uint64(life)+3)),
		wake:   make(chan answer),
	}
	e.nodes = append(e.nodes, n)
	e.spawns--
	go n.main()
	e.waitNode()
}

func (n *node) main() {
	o := n.e.o
	cfg := election.Config{
		Key: "sim", Settle: o.Settle, Clock: n, Rand: n.rng.Float64,
		NewStartID: func() string { return fmt.Sprintf("n%d.%d.%x", n.index, n.life, n.rng.Uint32()) },
	}
	if o.Tiers {
		cfg.Tier = election.TierOf(n.index, false)
	}
	cfg.Nodes = o.Nodes
	el := election.New(cfg, n)
	ctx := context.Background()
	// The caller's retry of a failed Start (pipeline.startWithin).
	gap := 250 * time.Millisecond
	for {
		id, err := el.Run(ctx)
		n.e.trace("node %d.%d Run: %q %v", n.index, n.life, id, err)
		if err == nil {
			n.joined = true
			n.e.res.Joined = append(n.e.res.Joined, Join{Node: n.index, Run: id, At: n.e.now, Started: n.started})
			if o.End {
				n.runJob(ctx, id)
			}
			break
		}
		if errors.Is(err, errKilled) {
			break
		}
		if errors.Is(err, tracker.ErrPermanent) {
			n.e.res.Failed = append(n.e.res.Failed, fmt.Sprintf("node %d: %v", n.index, err))
			break
		}
		if n.Sleep(ctx, gap) != nil {
			break
		}
		gap = min(2*gap, 2*time.Second)
	}
	n.e.yield <- step{n: n, done: true}
}

func (n *node) real(d time.Duration) time.Duration { return time.Duration(float64(d) / n.rate) }

// Now implements election.Clock.
func (n *node) Now() time.Time {
	return base.Add(n.offset + time.Duration(float64(n.e.now)*n.rate))
}

// Sleep implements election.Clock.
func (n *node) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	return n.block(step{n: n, sleep: d}).err
}

func (n *node) block(s step) answer {
	n.e.yield <- s
	return <-n.wake
}

func (n *node) do(kind, run, value string) answer {
	return n.block(step{n: n, req: &request{kind: kind, run: run, value: value}})
}

// Search implements election.Store.
func (n *node) Search(context.Context) ([]election.Candidate, string, error) {
	a := n.do("search", "", "")
	return a.cands, "", a.err
}

// Create implements election.Store.
func (n *node) Create(_ context.Context, startID string) (string, error) {
	a := n.do("create", "", startID)
	return a.id, a.err
}

// SetParam implements election.Store.
func (n *node) SetParam(_ context.Context, run, value string) (string, error) {
	a := n.do("set-param", run, value)
	return a.held, a.err
}

// MarkElected implements election.Store.
func (n *node) MarkElected(_ context.Context, run string) error {
	return n.do("mark-elected", run, "").err
}

// Delete implements election.Store.
func (n *node) Delete(_ context.Context, run string) error {
	return n.do("delete", run, "").err
}

// directStore is the model without the engine: the job's end, after
// everything landed.
type directStore struct{ m *model }

func (d directStore) Search(context.Context) ([]election.Candidate, string, error) {
	return d.m.search(), "", nil
}
func (d directStore) Create(_ context.Context, s string) (string, error) { return d.m.create(s), nil }
func (d directStore) SetParam(_ context.Context, run, v string) (string, error) {
	return d.m.setParam(run, v), nil
}
func (d directStore) MarkElected(_ context.Context, run string) error {
	d.m.markElected(run)
	return nil
}
func (d directStore) Delete(_ context.Context, run string) error {
	d.m.delete(run)
	return nil
}
