// Package electsim runs the multi-node election (package election) of many
// nodes against an in-memory model of MLflow's run store, and with
// Options.End the job after it (job.go: every node's state line and end,
// jobrun.End's status, first failure and report), in virtual time and
// deterministically from a seed: the same seed replays the same schedule,
// request for request.
//
// Each node is the real protocol code in a goroutine of its own; only one
// runs at a time. Every request and every sleep is a step the engine
// schedules: requests travel with random delays, answers are lost, requests
// are applied twice or never, nodes die at any step and come back, and
// each node's clock runs within 0.5% of true time, with any offset. A
// server model (Server) adds a queue in front of the store, with workers
// and service times, for the figures of bench/election.
package electsim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow/election"
)

// Options describe one schedule.
type Options struct {
	Seed   uint64
	Nodes  int
	Settle time.Duration // T; default 1 s
	Tiers  bool          // nodes take tiers from their index (a launcher's rank)

	StartSpread time.Duration // nodes start uniformly within it
	MaxDelay    time.Duration // each way of a request, uniform in [0, MaxDelay]
	Timeout     time.Duration // a lost answer's error comes this long after the request; default 10 s

	// Faults, each a probability per request (Kill: per step), while the
	// virtual time is before FaultsUntil.
	Lose, Drop, Dup, Kill float64
	// Refuse: the server answers with an error at once (a 503, a reset),
	// the request not applied.
	Refuse              float64
	Restart             float64       // a killed node comes back (a new bridge), after up to RestartAfter
	RestartAfter        time.Duration // default 30 s
	SlowFrom, SlowUntil time.Duration // requests sent in this window take SlowDelay more each way
	SlowDelay           time.Duration
	// Tail: each way of a request, with this probability, takes up to
	// TailMax more (uniformly): the answers that arrive after T.
	Tail        float64
	TailMax     time.Duration
	FaultsUntil time.Duration

	Server *Server // nil: the store answers at once (delays are the network's)

	Horizon time.Duration // a node not joined by then fails the schedule; default 10 min

	// End plays the job after its election (job.go): each joined node's
	// child runs RunFor plus up to EndSpread, and ends; Fail and Killed
	// are the shares of children that fail (exit 1) and are killed (137),
	// per node and attempt. MaxPerNodeMinute bounds the requests one node
	// sends in a minute (0: not checked).
	End               bool
	RunFor, EndSpread time.Duration
	Fail, Killed      float64
	MaxPerNodeMinute  int

	// Tick plays the job's live phase (live.go): each node's lead ticks
	// once a Tick while its child runs (0: none). KillCandidates of the
	// evaluator candidates (ranks 0..2) are killed at a tick each, drawn
	// in their live phase, so that another takes their minutes over.
	// Evaluated: the job's run is evaluated live (its series checked).
	Tick           time.Duration
	KillCandidates int
	Evaluated      bool

	Trace func(string) // if set, every step, for replaying a seed
}

// Result is what a schedule did.
type Result struct {
	Seed     uint64
	Elected  []string       // every run ever marked elected
	Joined   []Join         // one per node that joined
	Unjoined []int          // live nodes that never joined
	Left     []string       // active runs after the sweep, other than the elected one
	Requests map[string]int // by kind
	Failed   []string       // permanent errors
	Bound    time.Duration  // the liveness bound checked
	Busy     time.Duration  // server busy time (with a Server)
	Job      JobResult      // with Options.End
}

// JoinedBy is, per joined node (in Joined's order), the time from its
// start to its join.
func (r Result) JoinedBy() []time.Duration {
	out := make([]time.Duration, len(r.Joined))
	for i, j := range r.Joined {
		out[i] = j.At - j.Started
	}
	return out
}

// Last is when the last node joined (0 when none did).
func (r Result) Last() time.Duration {
	var last time.Duration
	for _, j := range r.Joined {
		last = max(last, j.At)
	}
	return last
}

// Join is one node's join.
type Join struct {
	Node    int
	Run     string
	At      time.Duration
	Started time.Duration
}

var errKilled = tracker.Permanent(errors.New("electsim: node killed"))
var errTimeout = errors.New("electsim: no answer (timeout)")
var errRefused = errors.New("electsim: refused (503)")

type event struct {
	at  time.Duration
	seq int
	fn  func()
}

type events []*event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *events) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// engine is one schedule's world.
type engine struct {
	o      Options
	rng    *rand.Rand
	now    time.Duration
	seq    int
	queue  events
	model  *model
	yield  chan step // a running node's next step, or its end
	res    Result
	srv    *serverState
	spawns int // nodes still to start (or restart)
	nodes  []*node

	// The job's phase (Options.End): whether a node's end was recorded
	// (by any of its lives), its last recorded outcome, and the requests
	// by node and minute.
	recorded  map[int]bool
	outcomes  map[int]int
	perMinute map[[2]int]int

	// The live phase (live.go): reads of the job's run by ticks a minute,
	// the ticks that read it and landed, bridge.job.differs as written,
	// the running lines' at as applied (by node#attempt), and the
	// candidates that evaluated each minute (the series' step).
	liveReads   map[int]int
	liveTicks   []liveTick
	differs     []stamped
	lineAts     map[string][]int64
	evaluatedBy map[int64]map[int]bool
}

// step is what a node asks of the engine when it blocks.
type step struct {
	n     *node
	sleep time.Duration // a sleep (local time)
	req   *request      // or a request
	done  bool          // or its end
}

type request struct {
	kind     string
	run      string // SetParam, MarkElected, Delete; the job's requests
	value    string // SetParam; Create: the start id; set-status: the status; put-artifact: the name
	tags     map[string]string
	at       time.Time          // set-status
	body     []byte             // put-artifact
	points   map[string]float64 // log-points, at at, step step, from node from
	step     int64
	from     int
	live     bool // get-run: a tick's read
	answer   answer
	resolved bool // the node was woken (answer or timeout)
}

type answer struct {
	cands []election.Candidate
	id    string
	held  string
	run   tracker.StoredRun // get-run
	err   error
}

// Run plays one schedule and checks its invariants; the error names the
// seed and the violation.
func Run(o Options) (Result, error) {
	e := newEngine(o)
	e.play()
	return e.res, e.check()
}

func newEngine(o Options) *engine {
	if o.Settle == 0 {
		o.Settle = time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	if o.RestartAfter == 0 {
		o.RestartAfter = 30 * time.Second
	}
	if o.Horizon == 0 {
		o.Horizon = 10 * time.Minute
		if o.End {
			o.Horizon += o.RunFor + o.EndSpread + 5*time.Minute
		}
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))
	e := &engine{o: o, rng: rng, model: newModel(rand.New(rand.NewPCG(o.Seed, 1))), yield: make(chan step)}
	e.res.Seed = o.Seed
	e.res.Requests = map[string]int{}
	e.recorded, e.outcomes, e.perMinute = map[int]bool{}, map[int]int{}, map[[2]int]int{}
	e.liveReads, e.lineAts, e.evaluatedBy = map[int]int{}, map[string][]int64{}, map[int64]map[int]bool{}
	if o.Server != nil {
		e.srv = &serverState{Server: *o.Server, rng: rand.New(rand.NewPCG(o.Seed, 2))}
	}
	return e
}

func (e *engine) at(d time.Duration, fn func()) {
	e.seq++
	heap.Push(&e.queue, &event{at: e.now + max(d, 0), seq: e.seq, fn: fn})
}

func (e *engine) play() {
	e.spawns = e.o.Nodes
	for i := range e.o.Nodes {
		start := time.Duration(0)
		if e.o.StartSpread > 0 {
			start = time.Duration(e.rng.Int64N(int64(e.o.StartSpread)))
		}
		e.at(start, func() { e.spawn(i, 0) })
	}
	for e.queue.Len() > 0 && e.now <= e.o.Horizon {
		ev := heap.Pop(&e.queue).(*event)
		e.now = ev.at
		ev.fn()
		if e.allSettled() {
			break
		}
	}
	for _, n := range e.nodes {
		if !n.dead && !n.joined {
			e.res.Unjoined = append(e.res.Unjoined, n.index)
		}
	}
	e.drain()
	e.sweep()
	e.stop()
}

// allSettled: every node spawned, and joined or dead.
func (e *engine) allSettled() bool {
	if e.spawns > 0 {
		return false
	}
	for _, n := range e.nodes {
		if !n.dead && (!n.joined || e.o.End && !n.ended) {
			return false
		}
	}
	return true
}

// drain applies what is still in flight (a dead node's request, a
// duplicate): the sweep comes after everything landed, as the job's end
// comes long after its start.
func (e *engine) drain() {
	for e.queue.Len() > 0 {
		ev := heap.Pop(&e.queue).(*event)
		e.now = max(e.now, ev.at)
		if ev.at > e.o.Horizon+time.Hour {
			break
		}
		ev.fn()
	}
}

// sweep is the job's end: a live node clears the candidates that lost.
func (e *engine) sweep() {
	var win string
	if len(e.model.elected) > 0 {
		win = e.model.elected[0]
	}
	if win == "" {
		return
	}
	alive := false
	for _, n := range e.nodes {
		if n.joined && !n.dead {
			alive = true
		}
	}
	if !alive {
		return
	}
	left, _ := election.Sweep(context.Background(), directStore{e.model}, win)
	e.res.Left = append(e.res.Left, left...)
	for _, id := range e.model.active() {
		if id != win && !slices.Contains(e.res.Left, id) {
			e.res.Left = append(e.res.Left, id)
		}
	}
}

// stop ends every node goroutine still blocked (dead ones, and live ones
// past the horizon): each step they take from now on fails.
func (e *engine) stop() {
	for _, n := range e.nodes {
		n.dead = true
		for n.blocked {
			n.blocked = false
			n.wake <- answer{err: errKilled}
			e.waitNode()
		}
	}
}

// waitNode runs the node just woken until its next step, and handles it.
func (e *engine) waitNode() {
	s := <-e.yield
	n := s.n
	switch {
	case s.done:
		n.blocked = false
	case n.dead:
		n.blocked = true // woken again by stop
	case s.req != nil:
		n.blocked = true
		e.request(n, s.req)
	default:
		n.blocked = true
		e.sleep(n, s.sleep)
	}
}

func (e *engine) resume(n *node, a answer) {
	if n.dead || !n.blocked {
		return
	}
	n.blocked = false
	n.wake <- a
	e.waitNode()
}

func (e *engine) faulty() bool { return e.now < e.o.FaultsUntil }

func (e *engine) chance(p float64) bool { return p > 0 && e.faulty() && e.rng.Float64() < p }

// kill ends a node at its current step; it may come back as a new bridge.
func (e *engine) kill(n *node) {
	e.trace("node %d.%d killed", n.index, n.life)
	n.dead, n.killed = true, true
	n.diedAt = e.now
	if n.living {
		n.liveEnd = e.now
		if n.index < evaluators {
			e.res.Job.Live.CandidatesKilled++
		}
	}
	if e.o.Restart > 0 && e.rng.Float64() < e.o.Restart {
		e.spawns++
		e.at(time.Duration(e.rng.Int64N(int64(e.o.RestartAfter))), func() { e.spawn(n.index, n.life+1) })
	}
}

func (e *engine) sleep(n *node, d time.Duration) {
	e.trace("node %d.%d sleeps %v", n.index, n.life, d)
	if e.chance(e.o.Kill) {
		e.kill(n)
		return
	}
	e.at(n.real(d), func() { e.resume(n, answer{}) })
}

func (e *engine) delay() time.Duration {
	d := time.Duration(0)
	if e.o.MaxDelay > 0 {
		d = time.Duration(e.rng.Int64N(int64(e.o.MaxDelay) + 1))
	}
	if e.now >= e.o.SlowFrom && e.now < e.o.SlowUntil {
		d += e.o.SlowDelay
	}
	if e.o.TailMax > 0 && e.chance(e.o.Tail) {
		d += time.Duration(e.rng.Int64N(int64(e.o.TailMax)))
	}
	return d
}

func (e *engine) trace(format string, a ...any) {
	if e.o.Trace != nil {
		e.o.Trace(fmt.Sprintf("%12v ", e.now.Round(time.Millisecond)) + fmt.Sprintf(format, a...))
	}
}

func (e *engine) request(n *node, r *request) {
	e.res.Requests[r.kind]++
	e.perMinute[[2]int{n.index, int(e.now / time.Minute)}]++
	e.trace("node %d.%d sends %s %s %s", n.index, n.life, r.kind, r.run, r.value)
	if e.chance(e.o.Kill) {
		// Dies as it sends: the request may still be on its way.
		e.kill(n)
		if e.rng.IntN(2) == 0 {
			e.at(e.delay(), func() { e.arrive(r, nil) })
		}
		return
	}
	// Whichever comes first, the answer or the client's timeout (resty's),
	// wakes the node.
	answered := func(a answer) {
		if !r.resolved {
			e.trace("node %d.%d gets %s: id %s held %s err %v cands %v", n.index, n.life, r.kind, a.id, a.held, a.err, a.cands)
			r.resolved = true
			e.resume(n, a)
		}
	}
	e.at(e.o.Timeout, func() { answered(answer{err: errTimeout}) })
	if e.chance(e.o.Dup) {
		dup := &request{kind: r.kind, run: r.run, value: r.value, tags: r.tags, at: r.at, body: r.body, points: r.points, step: r.step, from: r.from, live: r.live}
		e.at(e.delay()+e.delay(), func() { e.arrive(dup, nil) })
	}
	switch {
	case e.chance(e.o.Drop):
	case e.chance(e.o.Refuse):
		e.at(2*e.delay(), func() { answered(answer{err: errRefused}) })
	case e.chance(e.o.Lose):
		e.at(e.delay(), func() { e.arrive(r, nil) })
	default:
		e.at(e.delay(), func() {
			e.arrive(r, func() { e.at(e.delay(), func() { answered(r.answer) }) })
		})
	}
}

// arrive hands the request to the server; then applies it, and calls
// answered once the answer leaves.
func (e *engine) arrive(r *request, answered func()) {
	apply := func() {
		r.answer = e.apply(r)
		if answered != nil {
			answered()
		}
	}
	if e.srv == nil {
		apply()
		return
	}
	e.srv.enqueue(e, r.kind, apply)
}

func (e *engine) apply(r *request) answer {
	if jobKinds[r.kind] {
		return e.applyJob(r)
	}
	switch r.kind {
	case "search":
		return answer{cands: e.model.search()}
	case "create":
		return answer{id: e.model.create(r.value)}
	case "set-param":
		return answer{held: e.model.setParam(r.run, r.value)}
	case "mark-elected":
		if !e.model.markElected(r.run) {
			return answer{err: tracker.Permanent(fmt.Errorf("set-tag on run %s: the run is deleted", r.run))}
		}
		return answer{}
	case "delete":
		e.model.delete(r.run)
		return answer{}
	}
	panic("electsim: unknown request " + r.kind)
}

// check is the invariants: at most one run ever elected; every live node
// joined it, within the bound once faults stopped; no other candidate left
// active after the job's end.
func (e *engine) check() error {
	r := &e.res
	fail := func(format string, a ...any) error {
		return fmt.Errorf("seed %d: "+format, append([]any{r.Seed}, a...)...)
	}
	r.Elected = slices.Clone(e.model.elected)
	if len(r.Elected) > 1 {
		return fail("%d runs elected: %v", len(r.Elected), r.Elected)
	}
	if len(r.Failed) > 0 {
		return fail("nodes failed for good: %v", r.Failed)
	}
	r.Bound = e.bound()
	if len(r.Unjoined) > 0 {
		return fail("nodes %v never joined the job's run (horizon %v)", r.Unjoined, e.o.Horizon)
	}
	for _, j := range r.Joined {
		if len(r.Elected) == 0 || j.Run != r.Elected[0] {
			return fail("node %d joined %s, elected %v", j.Node, j.Run, r.Elected)
		}
		if due := max(e.o.FaultsUntil, e.o.SlowUntil, j.Started) + r.Bound; j.At > due {
			return fail("node %d joined at %v, after the bound %v (due %v)", j.Node, j.At, r.Bound, due)
		}
	}
	if len(r.Left) > 0 {
		return fail("candidates left active after the job's end: %v", r.Left)
	}
	if e.o.End {
		return e.checkJob(fail)
	}
	return nil
}

// bound is the stated liveness bound, from the last fault (or a node's
// start, or a restart): a node may wait its tier's creator grace, the
// slowest one's, then one stray candidate's grace and window, then an
// election of its own; the grace counts four request times (2·MaxDelay
// each, and a server's queue), and each step a request or two. The
// forwarder's retry of a failed Start adds its backoff, at most 8 s
// after a lost answer (that counts a timeout).
func (e *engine) bound() time.Duration {
	T := e.o.Settle
	rtt := 2 * e.o.MaxDelay
	if e.srv != nil {
		rtt += time.Duration(e.o.Nodes) * e.srv.Mean / time.Duration(max(e.srv.Workers, 1))
	}
	grace := T + time.Second + 4*rtt
	tiers := 0
	if e.o.Tiers {
		tiers = election.TierOf(e.o.Nodes-1, false)
	}
	creator := time.Duration(tiers) * (2*T + time.Second + 4*rtt)
	window := max(T, 2*rtt) + T/100 + 20*time.Millisecond
	return creator + 2*(grace+window+12*rtt) + 8*time.Second + 2*e.o.Timeout
}
