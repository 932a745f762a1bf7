// Package election finds the one tracker run of a multi-node job. Every
// node's bridge runs the same protocol against the tracker's run store,
// with no coordinator; docs/multinode.md ("Finding the one run") states it
// and proves that every node picks the same run.
//
// The store is MLflow's (package mlflow adapts it): runs searched by a tag,
// created, tagged, deleted, and a write-once param per run, the one
// compare-and-set a tracker offers. The protocol only talks to the Store
// and the Clock, so the same code runs against a real server and in the
// deterministic simulation (harness/electsim).
package election

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/tracker"
)

// Candidate is an active run of the job's key (and generation).
type Candidate struct {
	ID      string
	StartID string // the tag its creator put on it: finds a create whose answer was lost
	Elected bool   // tagged as the job's run
	Param   string // the write-once election param: "" none yet, Void, or an eligible value
}

// Store is what the protocol needs of the tracker. Each method is one
// request (SetParam may read the run back) and may fail transiently; an
// error that wraps tracker.ErrPermanent ends the election.
type Store interface {
	// Search returns the job's active candidates. join is the run of an
	// earlier generation a restarted job joins instead ("" when none).
	Search(ctx context.Context) (cands []Candidate, join string, err error)
	// Create creates a candidate tagged with startID and returns its id.
	Create(ctx context.Context, startID string) (string, error)
	// SetParam writes the write-once election param and returns the value
	// the run holds afterwards: value, or the one another node wrote
	// first; "" when the run is gone. Writing the value it holds succeeds.
	SetParam(ctx context.Context, run, value string) (string, error)
	// MarkElected tags run as the job's run.
	MarkElected(ctx context.Context, run string) error
	// Delete marks a candidate deleted.
	Delete(ctx context.Context, run string) error
}

// Clock is time as the protocol sees it: a monotonic clock in production,
// virtual time in the simulation.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or less when ctx ends first (then ctx's error).
	Sleep(ctx context.Context, d time.Duration) error
}

// Void is the param value of a candidate that can never win.
const Void = "void"

// eligiblePrefix starts the param value of a candidate that may win; its
// window (below) follows, in milliseconds.
const eligiblePrefix = "eligible:"

// Eligible is the param value of an eligible candidate whose window is w.
func Eligible(w time.Duration) string {
	return eligiblePrefix + strconv.FormatInt(w.Milliseconds(), 10)
}

// window parses an eligible value; ok is false for anything else.
func window(v string) (w time.Duration, ok bool) {
	ms, found := strings.CutPrefix(v, eligiblePrefix)
	if !found {
		return 0, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// DefaultSettle is T when Config.Settle is unset.
const DefaultSettle = time.Second

// Config is one node's part in the election.
type Config struct {
	Key    string        // the job's key, for messages
	Settle time.Duration // T (--job-settle): the shortest window
	// Tier orders who creates: a node of tier k waits k creator graces for
	// a run of a lower tier before it creates one itself. TierOf gives it
	// from the launcher's node index; every node is tier 0 when there is
	// none (all of them create at once, as the protocol allows).
	Tier int
	// Restarted: the job ran before (a restart count above 0), so its run
	// likely exists: look at once, whatever the tier.
	Restarted  bool
	Nodes      int // the job's nodes, 0 unknown: spaces a large job's searches
	Log        *slog.Logger
	Clock      Clock          // nil: the monotonic clock
	Rand       func() float64 // jitter in [0, 1); nil: math/rand/v2
	NewStartID func() string  // nil: a random text
}

// TierOf is the tier of the node with launcher index rank (-1 unknown) and,
// for a second bridge of the job on one node, task true: rank 0 creates at
// once, rank 1 after one grace, ranks 2-3 after two, 4-7 after three...
// so that a large job sends one create, not one per node, and still gets
// its run when its first nodes never come.
func TierOf(rank int, task bool) int {
	t := 0
	if rank > 0 {
		t = bits.Len(uint(rank))
	}
	if task {
		t++
	}
	return t
}

// Election is one node's election, kept across calls of Run: a Run cut
// short by its context resumes where it stopped.
type Election struct {
	cfg   Config
	store Store
	clock Clock

	began time.Time // the first Run

	own      string        // this node's candidate, "" when none
	startID  string        // the start id of the create in flight, "" when none
	searched time.Time     // when the search that found no run was sent (s)
	created  time.Time     // when the candidate was known committed (c)
	win      time.Duration // the own candidate's window
	eligible bool          // the own candidate holds this node's eligible value

	seen  map[string]time.Time // candidates by id: when first known committed
	rtt   time.Duration        // a decaying maximum of request durations
	fails int                  // requests failed in a row
	empty int                  // searches in a row that found no run
	slow  bool                 // the slow-create warning was given
}

// New prepares a node's election; it makes no request.
func New(cfg Config, store Store) *Election {
	if cfg.Settle <= 0 {
		cfg.Settle = DefaultSettle
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.NewStartID == nil {
		cfg.NewStartID = crand.Text
	}
	if cfg.Restarted {
		// Its run is there to be found: no herd to spread.
		cfg.Tier = 0
	}
	return &Election{cfg: cfg, store: store, clock: cfg.Clock, seen: map[string]time.Time{}}
}

// Timing. Every wait below is bounded by a multiple of T and of the
// request durations this node has seen, so a slow server stretches them
// instead of breaking them.

// stretch is the wait after which a node's clock has surely passed w on
// every other node's: monotonic clocks run at the same rate within 1% (NTP
// slews by at most 0.05%), plus a tick.
func stretch(w time.Duration) time.Duration { return w + w/100 + 20*time.Millisecond }

// grace is how long a node waits for another one to finish a step (write
// its candidate's eligibility, mark the winner) before doing it itself;
// longer for a higher tier, so that on a large job the lowest live tier
// does it, not every node.
func (e *Election) grace() time.Duration {
	return e.cfg.Settle + time.Second + 4*e.rtt + time.Duration(e.cfg.Tier)*e.creatorGrace()/2
}

// creatorGrace is how long each tier waits for a lower tier's run.
func (e *Election) creatorGrace() time.Duration { return 2*e.cfg.Settle + time.Second + 4*e.rtt }

// pollGap is a latecomer's wait between searches: short on a fast server,
// twice the request time on a slow one, jittered so that many nodes do not
// search in step.
func (e *Election) pollGap() time.Duration {
	base := max(min(max(e.cfg.Settle/2, 100*time.Millisecond), 500*time.Millisecond), 2*e.rtt)
	return time.Duration(float64(base) * (0.75 + e.cfg.Rand()/2))
}

// emptyGapMax bounds the wait between searches that find no run: node 0
// may start late (a pod scheduled last), and its run must be found soon
// after; the job's searches together stay near 250 a second (4 ms a node),
// which a server with a few workers answers.
func (e *Election) emptyGapMax() time.Duration {
	return max(2*time.Second, time.Duration(e.cfg.Nodes)*4*time.Millisecond)
}

// firstLook is when a node of a tier above 0 first searches: once node 0
// has had its window and a few requests, so that on a large job the first
// searches of every node do not queue in front of node 0's requests, and
// one search each finds the run. Jittered, as every wait that many nodes
// make together.
func (e *Election) firstLook() time.Duration {
	if e.cfg.Tier == 0 || e.cfg.Restarted {
		return 0
	}
	T := e.cfg.Settle
	return stretch(T) + T/4 + time.Duration(float64(T/4)*e.cfg.Rand())
}

// Run returns the job's run: the one every node of the job picks. It
// returns ctx's error (wrapped) when ctx ends first; a later Run resumes.
//
// A request that fails transiently is tried again (after 100 ms, doubling
// to 2 s); a permanent error ends Run.
func (e *Election) Run(ctx context.Context) (string, error) {
	if e.began.IsZero() {
		e.began = e.clock.Now()
		if err := e.clock.Sleep(ctx, e.firstLook()); err != nil {
			return "", fmt.Errorf("finding the job's run (key %s): %w", e.cfg.Key, err)
		}
	}
	var last error
	for {
		id, err := e.round(ctx)
		switch {
		case err == nil:
			return id, nil
		case errors.Is(err, tracker.ErrPermanent):
			return "", err
		case ctx.Err() != nil:
			if last != nil && !errors.Is(err, last) {
				err = fmt.Errorf("%w (the last request failed: %w)", err, last)
			}
			return "", err
		}
		last = err
		e.fails++
		e.cfg.Log.Debug("a request of the job's election failed; trying again", "err", err)
		gap := min(100*time.Millisecond<<min(e.fails-1, 5), 2*time.Second)
		if serr := e.clock.Sleep(ctx, gap); serr != nil {
			return "", fmt.Errorf("finding the job's run (key %s): %w (the last request failed: %w)", e.cfg.Key, serr, err)
		}
	}
}

// round runs the protocol until it returns the job's run or a request
// fails.
func (e *Election) round(ctx context.Context) (string, error) {
	for {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("finding the job's run (key %s): %w", e.cfg.Key, err)
		}
		if e.own != "" {
			id, err := e.candidacy(ctx)
			if id != "" || err != nil {
				return id, err
			}
			continue // the candidate cannot win: start over
		}
		sent := e.clock.Now()
		cands, join, err := e.search(ctx)
		if err != nil {
			return "", err
		}
		if join != "" {
			e.cfg.Log.Info("restarted job: joining the run of its earlier attempt", "run_id", join, "key", e.cfg.Key)
			return join, nil
		}
		if w := electedOf(cands); w != "" {
			return w, nil
		}
		if e.startID != "" {
			// A create whose answer was lost: its run is this node's.
			if c, ok := byStartID(cands, e.startID); ok {
				e.adopt(c.ID, e.clock.Now())
				continue
			}
			e.startID = "" // applied later, if ever: a stray the others clear
		}
		if len(cands) > 0 {
			e.empty = 0
			id, err := e.await(ctx, cands)
			if id != "" || err != nil {
				return id, err
			}
			continue
		}
		if wait := time.Duration(e.cfg.Tier)*e.creatorGrace() - e.clock.Now().Sub(e.began); wait > 0 {
			// A lower tier creates: look again, less often each time (a
			// large job's nodes must not hold up node 0's requests).
			gap := min(e.pollGap()<<min(e.empty, 4), e.emptyGapMax())
			e.empty++
			if err := e.clock.Sleep(ctx, min(wait, gap)); err != nil {
				return "", fmt.Errorf("finding the job's run (key %s): %w", e.cfg.Key, err)
			}
			continue
		}
		if err := e.create(ctx, sent); err != nil {
			return "", err
		}
	}
}

// create makes this node's candidate. sent is when the search that found
// no run was sent: the run is committed in [sent, c], c being when the
// create answered, so its window c - sent (at least T) bounds how late
// another node may see it.
func (e *Election) create(ctx context.Context, sent time.Time) error {
	e.startID = e.cfg.NewStartID()
	e.searched = sent
	id, err := e.timed(func() (string, error) { return e.store.Create(ctx, e.startID) })
	if err != nil {
		if errors.Is(err, tracker.ErrPermanent) {
			e.startID = ""
		}
		// A transient error: the next search looks for the start id.
		return err
	}
	e.adopt(id, e.clock.Now())
	return nil
}

// adopt makes run, known committed at c, this node's candidate.
func (e *Election) adopt(run string, c time.Time) {
	e.own, e.startID, e.created, e.eligible = run, "", c, false
	took := c.Sub(e.searched)
	// Whole milliseconds, rounded up: the param holds milliseconds.
	e.win = ceilMs(max(e.cfg.Settle, took))
	if took > e.cfg.Settle && !e.slow {
		e.slow = true
		e.cfg.Log.Warn("the MLflow server took longer than --job-settle to create the job's candidate run; the election waits that long instead (raise --job-settle, or give the server more workers)",
			"took", took.Round(time.Millisecond), "job_settle", e.cfg.Settle)
	}
}

// candidacy takes the own candidate through eligibility, the window and
// the decision. It returns "" with no error when the candidate cannot win
// (void, or missing from the final search): start over.
func (e *Election) candidacy(ctx context.Context) (string, error) {
	if !e.eligible {
		mine := Eligible(e.win)
		held, err := e.setParam(ctx, e.own, mine)
		if err != nil {
			return "", err
		}
		if held != mine {
			e.cfg.Log.Info("another node found the candidate before it was eligible; withdrawing it", "run_id", e.own)
			e.delete(ctx, e.own, "a void candidate")
			e.own = ""
			return "", nil
		}
		e.eligible = true
	}
	if err := e.clock.Sleep(ctx, e.created.Add(stretch(e.win)).Sub(e.clock.Now())); err != nil {
		return "", fmt.Errorf("finding the job's run (key %s): %w", e.cfg.Key, err)
	}
	win, err := e.decide(ctx, e.own)
	if err != nil {
		return "", err
	}
	if win == "" {
		e.cfg.Log.Warn("this node's candidate is missing from the final search; starting over", "run_id", e.own)
	}
	e.own = ""
	return win, nil
}

// await is a latecomer's step: candidates and no elected run. It returns
// the job's run once it decided it, "" to look again. A candidate that
// stays without eligibility past grace is voided (its creator died or is
// stuck); an eligible one whose window and grace have passed makes this
// node a decider, so a creator that died after its candidate became
// eligible cannot block the job.
func (e *Election) await(ctx context.Context, cands []Candidate) (string, error) {
	now := e.clock.Now()
	ids := make(map[string]bool, len(cands))
	for _, c := range cands {
		ids[c.ID] = true
		if _, ok := e.seen[c.ID]; !ok {
			e.seen[c.ID] = now // committed before the answer came
		}
	}
	for id := range e.seen {
		if !ids[id] {
			delete(e.seen, id)
		}
	}
	next := e.pollGap()
	for _, c := range cands {
		first := e.seen[c.ID]
		if w, ok := window(c.Param); ok {
			if !now.Before(first.Add(stretch(w) + e.grace())) {
				e.cfg.Log.Info("the job's election has not finished; deciding it from this node", "key", e.cfg.Key, "candidate", c.ID)
				return e.decide(ctx, c.ID)
			}
			// Its creator marks the winner once the window is over: look
			// then, not before (one more search, not one a poll gap).
			if due := first.Add(stretch(w)).Sub(now); due > next {
				next = due + time.Duration(float64(e.cfg.Settle/4)*e.cfg.Rand())
			}
			continue
		}
		if now.Before(first.Add(e.grace())) {
			continue
		}
		held := c.Param
		if held == "" {
			var err error
			if held, err = e.setParam(ctx, c.ID, Void); err != nil {
				return "", err
			}
		}
		if _, ok := window(held); !ok && held != "" {
			e.cfg.Log.Info("cleared a candidate whose creator never made it eligible", "run_id", c.ID)
			e.delete(ctx, c.ID, "a void candidate")
		}
	}
	if err := e.clock.Sleep(ctx, next); err != nil {
		return "", fmt.Errorf("finding the job's run (key %s): %w", e.cfg.Key, err)
	}
	return "", nil
}

// decide is the final step, from a search sent now, at least the anchor's
// window (stretched) after the anchor was known committed: every
// candidate's param is settled (void where none), the smallest eligible
// candidate by (window, id) wins and is marked, and every other candidate
// in the search is deleted. It returns "" when the anchor is not eligible
// in the search (it was deleted, or voided): the caller starts over.
//
// Why this is safe (docs/multinode.md): a candidate m smaller than every
// one in this search would have a window no longer than the anchor's, and
// its creator's search, which found no run, came before the anchor's
// commit; so m was committed before this search was sent.
func (e *Election) decide(ctx context.Context, anchor string) (string, error) {
	cands, join, err := e.search(ctx)
	if err != nil {
		return "", err
	}
	if join != "" {
		return join, nil
	}
	type entry struct {
		id string
		w  time.Duration
	}
	var ok []entry
	var lose []string
	for _, c := range cands {
		v := c.Param
		if v == "" {
			if v, err = e.setParam(ctx, c.ID, Void); err != nil {
				return "", err
			}
		}
		if w, isElig := window(v); isElig {
			ok = append(ok, entry{c.ID, w})
		} else if v != "" {
			lose = append(lose, c.ID)
		}
	}
	if !slices.ContainsFunc(ok, func(x entry) bool { return x.id == anchor }) {
		// Deleted by a decider that found a smaller one (then the run is
		// marked: join it), or voided before it became eligible.
		return electedOf(cands), nil
	}
	win := slices.MinFunc(ok, func(a, b entry) int { return cmp.Or(cmp.Compare(a.w, b.w), cmp.Compare(a.id, b.id)) }).id
	if w := electedOf(cands); w != "" && w != win {
		// Every decider computes the same winner; an elected run that
		// differs means a clock ran far outside the bound (stretch).
		// Joining it keeps the job on one run.
		e.cfg.Log.Warn("the job's run was elected differently by another node; joining it", "elected", w, "computed", win)
		win = w
	}
	if err := e.markElected(ctx, win); err != nil {
		return "", err
	}
	for _, x := range ok {
		if x.id != win {
			lose = append(lose, x.id)
		}
	}
	for _, id := range lose {
		e.delete(ctx, id, "a losing candidate")
	}
	e.cfg.Log.Info("elected the job's run", "run_id", win, "candidates", len(ok), "key", e.cfg.Key)
	return win, nil
}

// Sweep deletes the job's candidates other than its run (winner), which
// lost or never became eligible: those whose creator died, and a create
// applied after the election. A node that knows the winner may: nothing
// else can win. It returns the ones it could not delete. It needs no
// election state, only the store: a node that never elected may sweep.
func Sweep(ctx context.Context, store Store, winner string) ([]string, error) {
	cands, _, err := store.Search(ctx)
	if err != nil {
		return nil, err
	}
	var left []string
	for _, c := range cands {
		if c.ID == winner {
			continue
		}
		if c.Param == "" {
			if held, err := store.SetParam(ctx, c.ID, Void); err != nil || held != Void {
				if err != nil || held != "" {
					left = append(left, c.ID)
				}
				continue
			}
		}
		if err := store.Delete(ctx, c.ID); err != nil {
			left = append(left, c.ID)
		}
	}
	return left, nil
}

func (e *Election) search(ctx context.Context) ([]Candidate, string, error) {
	began := e.clock.Now()
	cands, join, err := e.store.Search(ctx)
	e.observe(e.clock.Now().Sub(began), err)
	slices.SortFunc(cands, func(a, b Candidate) int { return cmp.Compare(a.ID, b.ID) })
	return cands, join, err
}

// setParam writes a write-once param, again after a transient error:
// writing the same value twice is allowed.
func (e *Election) setParam(ctx context.Context, run, value string) (string, error) {
	var held string
	err := e.retry(ctx, func() (err error) {
		held, err = e.store.SetParam(ctx, run, value)
		return err
	})
	return held, err
}

func (e *Election) markElected(ctx context.Context, run string) error {
	return e.retry(ctx, func() error { return e.store.MarkElected(ctx, run) })
}

// delete deletes a candidate, again after a transient error. One left
// behind is named: Sweep or a later election clears it.
func (e *Election) delete(ctx context.Context, run, what string) {
	if err := e.retry(ctx, func() error { return e.store.Delete(ctx, run) }); err != nil {
		e.cfg.Log.Warn("cannot delete a candidate run of the job; the job's end clears it, or delete it by hand", "run_id", run, "what", what, "err", err)
	}
}

// retry makes one request, again after a transient error, until ctx ends.
func (e *Election) retry(ctx context.Context, req func() error) error {
	for gap := 100 * time.Millisecond; ; gap = min(2*gap, 2*time.Second) {
		began := e.clock.Now()
		err := req()
		e.observe(e.clock.Now().Sub(began), err)
		if err == nil || errors.Is(err, tracker.ErrPermanent) {
			return err
		}
		if serr := e.clock.Sleep(ctx, gap); serr != nil {
			return err
		}
	}
}

// timed runs one request and records how long it took.
func (e *Election) timed(req func() (string, error)) (string, error) {
	began := e.clock.Now()
	v, err := req()
	e.observe(e.clock.Now().Sub(began), err)
	return v, err
}

// observe keeps rtt near the longest recent time the server took to
// answer; a request with no answer (a timeout, a reset) says nothing of it.
func (e *Election) observe(d time.Duration, err error) {
	if err == nil {
		e.rtt = max(d, e.rtt*7/8)
		e.fails = 0
	}
}

func electedOf(cands []Candidate) string {
	for _, c := range cands {
		if c.Elected {
			return c.ID
		}
	}
	return ""
}

func byStartID(cands []Candidate, id string) (Candidate, bool) {
	for _, c := range cands {
		if c.StartID == id {
			return c, true
		}
	}
	return Candidate{}, false
}

func ceilMs(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
