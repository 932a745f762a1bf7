package mlflow

// The election against a real MLflow server on PostgreSQL (its row locks
// and isolation are what concurrent bridges meet in production), with
// mocks/faultproxy in front of some nodes for the slow and lost answers
// the protocol must survive. The binary's rounds with N = 2, 8 and 32 are
// in cmd/bridge (multinode_e2e_test.go).

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/mocks/faultproxy"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow/election"
)

// node is one bridge's sink in a test job.
type node struct {
	id   string
	sink *Sink
	env  []string
	err  error
}

// jobNodes makes n sinks of one job (key) in experiment exp, each talking
// to url(i) (the server, or a fault proxy in front of it).
func jobNodes(t *testing.T, url func(i int) string, exp, key string, n int, job func(i int) tracker.Job) []*node {
	t.Helper()
	nodes := make([]*node, n)
	for i := range nodes {
		j := tracker.Job{Key: key, KeyFrom: "test", Attempt: -1, Nodes: n, Settle: time.Second}
		if job != nil {
			j = job(i)
		}
		nodes[i] = &node{id: fmt.Sprintf("node-%d", i), sink: serverSink(t, url(i), Config{ExperimentName: exp, Job: &j})}
	}
	return nodes
}

// startTogether starts every node's sink at the same moment and waits for
// all of them (each within a generous deadline).
func startTogether(t *testing.T, nodes []*node) {
	t.Helper()
	startNodes(nodes)()
}

// startNodes starts the nodes' sinks at once and returns the wait for them.
func startNodes(nodes []*node) (wait func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			<-gate
			n.env, n.err = n.sink.Start(ctx, tracker.StartInfo{NodeID: n.id, Command: []string{"train.py"}, RunName: "job"})
		})
	}
	close(gate)
	return func() { wg.Wait(); cancel() }
}

// oneRun checks that every node got the same run, the only active run of
// the key, elected and eligible; that every other candidate is deleted and
// was never elected; and returns it.
func oneRun(t *testing.T, srv *mlflowtest.Server, exp, key string, nodes []*node) string {
	t.Helper()
	win := ""
	own := map[string]bool{}
	for _, n := range nodes {
		if n.err != nil {
			t.Fatalf("%s: Start: %v", n.id, n.err)
		}
		ri := n.sink.Run()
		if win == "" {
			win = ri.Job
		}
		// MLflow's own monitor in the child gets no node id: it would add
		// a set of keys a node to the job's run.
		if ri.Job != win || !slices.Contains(n.env, EnvRunID+"="+win) || !slices.Contains(n.env, EnvNodeID+"=") ||
			ri.ID == "" || ri.ID == win || own[ri.ID] {
			t.Errorf("%s: runs %+v, env %v; want the job's run %s, an empty node id for the child, and a run of its own", n.id, ri, n.env, win)
		}
		own[ri.ID] = true
	}
	expID := srv.ExperimentID(t, exp)
	filter := fmt.Sprintf("tags.`%s` = '%s'", TagJobKey, key)
	active := srv.SearchRuns(t, expID, filter, "ACTIVE_ONLY")
	if len(active) != 1 || active[0].Info.RunID != win {
		var ids []string
		for _, r := range active {
			ids = append(ids, r.Info.RunID)
		}
		t.Fatalf("active runs of key %s: %v, want only %s", key, ids, win)
	}
	if r := active[0]; r.Tags[TagElected] != "true" || !strings.HasPrefix(r.Params[ParamElection], "eligible:") {
		t.Errorf("the job's run: tags %v params %v, want it elected and eligible", r.Tags, r.Params)
	}
	for _, r := range srv.SearchRuns(t, expID, filter, "DELETED_ONLY") {
		if r.Tags[TagElected] != "" {
			t.Errorf("deleted candidate %s was elected: %v", r.Info.RunID, r.Tags)
		}
	}
	return win
}

// TestElectRace: eight nodes ask in the same instant; one run.
func TestElectRace(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	exp, key := unique(t), "race:"+unique(t)
	nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 8, nil)
	startTogether(t, nodes)
	oneRun(t, srv, exp, key, nodes)
}

// TestElectSlowCreates: every node's runs/create is applied at once and
// answered after 2T, so every candidate's window is longer than T (round 4,
// fault 2: the old rule withdrew them all, forever). The windows stretch
// instead: one run, no candidate withdrawn for its latency, and one
// warning per node naming the latency and --job-settle.
func TestElectSlowCreates(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	exp, key := unique(t), "slow:"+unique(t)
	const n, settle = 3, 500 * time.Millisecond
	proxies := make([]*faultproxy.Proxy, n)
	for i := range proxies {
		p, err := faultproxy.Start(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		p.Schedule(faultproxy.Fault{Path: "runs/create", Kind: faultproxy.SlowAnswer, Delay: 4 * settle, Times: 1000})
		proxies[i] = p
	}
	var logs syncbuf.Buffer
	nodes := make([]*node, n)
	for i := range nodes {
		j := tracker.Job{Key: key, Attempt: -1, Nodes: n, Settle: settle, Rank: -1}
		cfg := Config{TrackingURI: proxies[i].URL(), ExperimentName: exp, Job: &j}
		sink, err := New(cfg, slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), &logs), nil)))
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = &node{id: fmt.Sprintf("node-%d", i), sink: sink}
	}
	startTogether(t, nodes)
	win := oneRun(t, srv, exp, key, nodes)
	v := srv.GetRun(t, win).Params[ParamElection]
	if ms, err := strconv.Atoi(strings.TrimPrefix(v, "eligible:")); err != nil || ms < 2000 {
		t.Errorf("the job's run's election param is %q, want a window of at least the 2 s the create took", v)
	}
	// The old rule withdrew (deleted) its own candidate, param-less, when
	// the create took longer than T. Now a candidate is deleted only once it
	// holds a param: voided by another node (its creator was slow to write
	// eligibility), or eligible and losing.
	for _, r := range srv.SearchRuns(t, srv.ExperimentID(t, exp), fmt.Sprintf("tags.`%s` = '%s'", TagJobKey, key), "DELETED_ONLY") {
		if r.Params[ParamElection] == "" {
			t.Errorf("candidate %s was deleted without an election param: withdrawn for its latency", r.Info.RunID)
		}
	}
	if got := strings.Count(logs.String(), "took longer than --job-settle"); got < 1 || got > n {
		t.Errorf("%d warnings about the slow server, want one per creating node (at most %d):\n%s", got, n, logs.String())
	}
	if !strings.Contains(logs.String(), "job_settle=500ms") {
		t.Errorf("the warning does not name --job-settle's value:\n%s", logs.String())
	}
}

// strayCandidate makes a candidate of key as a creator would have and
// then died: with param (eligible or void) or without one.
func strayCandidate(t *testing.T, srv *mlflowtest.Server, exp, key, param string) string {
	t.Helper()
	sink := serverSink(t, srv.URL, Config{ExperimentName: exp})
	expID, err := sink.experiment(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	id, err := sink.createRun(context.Background(), expID, "stray", time.Time{}, map[string]string{TagJobKey: key, TagCandidateOf: "dead-node"})
	if err != nil {
		t.Fatal(err)
	}
	if param != "" {
		if _, err := sink.setOnce(context.Background(), id, ParamElection, param); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// TestElectStrayCandidates: a creator killed after marking its candidate
// eligible, or before, leaves a candidate and no elected run (round 4,
// fault 3). Nodes that start afterwards, with no generation in the key,
// still get a run: an eligible stray is elected (its window has long
// passed), one never made eligible is voided and deleted and the nodes
// elect their own.
func TestElectStrayCandidates(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	for _, tc := range []struct {
		name, param string
		elected     bool // the stray is the job's run
	}{
		{"eligible", election.Eligible(time.Second), true},
		{"never eligible", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp, key := unique(t), "stray:"+unique(t)
			stray := strayCandidate(t, srv, exp, key, tc.param)
			nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 3, func(i int) tracker.Job {
				return tracker.Job{Key: key, Attempt: -1, Nodes: 3, Settle: time.Second, Rank: i}
			})
			// Generous: on a busy machine the requests take long. That the
			// defaults clear a stray within --start-timeout is checked in
			// election (TestStartTimeoutCoversStray).
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			for _, n := range nodes {
				wg.Go(func() {
					n.env, n.err = n.sink.Start(ctx, tracker.StartInfo{NodeID: n.id, Command: []string{"train.py"}, RunName: "job"})
				})
			}
			wg.Wait()
			win := oneRun(t, srv, exp, key, nodes)
			if (win == stray) != tc.elected {
				t.Errorf("the job's run is %s, the stray %s: want the stray elected: %v", win, stray, tc.elected)
			}
		})
	}
}

// TestElectLostCreateAnswer: a create applied by the server whose answer
// is lost is found again by its start id.
func TestElectLostCreateAnswer(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	exp, key := unique(t), "lost:"+unique(t)
	p, err := faultproxy.Start(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.Schedule(faultproxy.Fault{Path: "runs/create", Kind: faultproxy.AppliedThenReset, Times: 1})
	nodes := jobNodes(t, func(int) string { return p.URL() }, exp, key, 1, nil)
	startTogether(t, nodes)
	win := oneRun(t, srv, exp, key, nodes)
	if all := srv.RunIDs(t, exp); len(all) != 2 || !slices.Contains(all, win) || !slices.Contains(all, nodes[0].sink.Run().ID) {
		t.Errorf("runs in the experiment: %v, want only %s (the lost create's run, found again) and the node's run", all, win)
	}
}

// TestElectLatecomer: a node that starts after the election joins the
// elected run and creates nothing.
func TestElectLatecomer(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	exp, key := unique(t), "late:"+unique(t)
	first := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, nil)
	startTogether(t, first)
	win := oneRun(t, srv, exp, key, first)
	candidates := func() int {
		return len(srv.SearchRuns(t, srv.ExperimentID(t, exp), fmt.Sprintf("tags.`%s` = '%s'", TagJobKey, key), "ALL"))
	}
	before := candidates()
	late := jobNodes(t, func(int) string { return srv.URL }, exp, key, 3, nil)[2:]
	startTogether(t, late)
	if got := oneRun(t, srv, exp, key, append(first, late...)); got != win {
		t.Errorf("the latecomer joined %s, want %s", got, win)
	}
	if after := candidates(); after != before {
		t.Errorf("runs of the job's key went from %d to %d: the latecomer made a candidate", before, after)
	}
}

// TestElectGenerations: a Slurm job id reused after a database reset is a
// new job (another generation) and gets a run of its own; a requeued
// attempt of it (Attempt > 0, a later start time) joins that run.
func TestElectGenerations(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	exp, key := unique(t), "slurm:c:"+unique(t)
	gen := func(g string, attempt int) func(int) tracker.Job {
		return func(int) tracker.Job {
			return tracker.Job{Key: key, Generation: g, Attempt: attempt, Nodes: 2, Settle: time.Second}
		}
	}
	old := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, gen("1000", 0))
	startTogether(t, old)
	oldRun := old[0].sink.Run().Job
	reused := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, gen("5000", 0))
	startTogether(t, reused)
	newRun := reused[0].sink.Run().Job
	if newRun == "" || newRun == oldRun || reused[1].sink.Run().Job != newRun {
		t.Fatalf("the reused job id's runs: %q %q, the old job's %q: want a new run shared by both nodes", newRun, reused[1].sink.Run().Job, oldRun)
	}
	requeued := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, gen("7000", 1))
	startTogether(t, requeued)
	for _, n := range requeued {
		if n.err != nil || n.sink.Run().Job != newRun {
			t.Errorf("%s of the requeued attempt: run %q (%v), want %s", n.id, n.sink.Run().Job, n.err, newRun)
		}
	}
}
