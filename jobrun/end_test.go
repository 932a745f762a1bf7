package jobrun

// The job's end against a real MLflow server: its status from every
// node's record, and its writes behind mocks/faultproxy, each retried by
// the write policy (tracker.Request): repeating one whose answer was lost
// after the server applied it is harmless.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/forensics"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/mocks/faultproxy"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
)

func proxyTo(t *testing.T, srv *mlflowtest.Server) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// endCtx is the end's budget, as the session gives it (generous here).
func endCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestJobEnd: the run's status from every node's end. FAILED as soon as
// one node's child fails, and it stays FAILED; FINISHED only once every
// node ended cleanly, set by one node.
func TestJobEnd(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	t.Run("all clean", func(t *testing.T) {
		exp, key := unique(t), "end:"+unique(t)
		nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 3, nil)
		startTogether(t, nodes)
		win := oneRun(t, srv, exp, key, nodes)
		for i, n := range nodes {
			endNode(t, n, 0)
			r := srv.GetRun(t, win)
			if want := map[bool]string{true: mlflow.StatusFinished, false: mlflow.StatusRunning}[i == len(nodes)-1]; r.Info.Status != want {
				t.Errorf("after %d of %d nodes ended cleanly: %s, want %s", i+1, len(nodes), r.Info.Status, want)
			}
			if l := line(t, srv, win, n.id); l["exit"] != "0" || l["status"] != mlflow.StatusFinished || l["run"] != n.sink.Run().ID {
				t.Errorf("%s's line: %v", n.id, l)
			}
			if own := srv.GetRun(t, n.sink.Run().ID); own.Info.Status != mlflow.StatusFinished || own.Tags["bridge.exit_code"] != "0" {
				t.Errorf("%s's run: %s, tags %v; want FINISHED with its end", n.id, own.Info.Status, own.Tags)
			}
		}
		r := srv.GetRun(t, win)
		if by := r.Tags[TagFinishedBy]; by != nodes[2].id || len(r.Params) != 1 || r.Params["bridge.election"] == "" {
			t.Errorf("tag %s = %q, want the last node; params %v, want the election's alone", TagFinishedBy, by, r.Params)
		}
		if last, _ := strconv.ParseInt(line(t, srv, win, nodes[2].id)["ended"], 10, 64); r.Info.EndTime != last {
			t.Errorf("the run ended at %d, the last node at %d", r.Info.EndTime, last)
		}
	})
	t.Run("one fails", func(t *testing.T) {
		exp, key := unique(t), "fail:"+unique(t)
		nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 3, nil)
		startTogether(t, nodes)
		win := oneRun(t, srv, exp, key, nodes)
		endNode(t, nodes[0], 0)
		endNode(t, nodes[1], 3)
		if st := srv.GetRun(t, win).Info.Status; st != mlflow.StatusFailed {
			t.Errorf("after node 1 failed: %s, want FAILED at once", st)
		}
		endNode(t, nodes[2], 0)
		r := srv.GetRun(t, win)
		if r.Info.Status != mlflow.StatusFailed || r.Tags["bridge.failed.node-1"] == "" || r.Tags[TagFinishedBy] != "" {
			t.Errorf("after the rest ended cleanly: %s, tags %v, params %v; want FAILED kept", r.Info.Status, r.Tags, r.Params)
		}
	})
	t.Run("a node whose previous attempt was lost", func(t *testing.T) {
		exp, key := unique(t), "lost-attempt:"+unique(t)
		nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, nil)
		startTogether(t, nodes[:1])
		// Node 1's bridge found in its spool an attempt that never ended.
		env, err := nodes[1].sink.Start(context.Background(), tracker.StartInfo{NodeID: "node-1",
			Tags: map[string]string{forensics.TagPreviousAttemptLost: "attempt 1 stopped without a clean shutdown"}})
		if err != nil {
			t.Fatal(err)
		}
		nodes[1].env = env
		win := oneRun(t, srv, exp, key, nodes)
		endNode(t, nodes[0], 0)
		endNode(t, nodes[1], 0)
		r := srv.GetRun(t, win)
		if r.Info.Status != mlflow.StatusKilled || !strings.Contains(r.Tags["bridge.failed.node-1"], "lost") ||
			srv.GetRun(t, nodes[1].sink.Run().ID).Tags[forensics.TagPreviousAttemptLost] == "" {
			t.Errorf("both nodes ended cleanly after node 1 lost an attempt: %s, tags %v; want KILLED", r.Info.Status, r.Tags)
		}
	})
	t.Run("a restarted node ends clean after a failed attempt", func(t *testing.T) {
		exp, key := unique(t), "restart:"+unique(t)
		att := func(a int) func(int) tracker.Job {
			return func(int) tracker.Job { return tracker.Job{Key: key, Attempt: a, Nodes: 2, Settle: time.Second} }
		}
		nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, att(0))
		startTogether(t, nodes)
		win := oneRun(t, srv, exp, key, nodes)
		endNode(t, nodes[0], 0)
		endNode(t, nodes[1], 137)
		again := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, att(1))[1:]
		startTogether(t, again)
		if ri := again[0].sink.Run(); ri.Job != win || ri.ID != nodes[1].sink.Run().ID {
			t.Fatalf("the restarted node joined %+v, want job's run %s and its run %s", ri, win, nodes[1].sink.Run().ID)
		}
		if _, err := again[0].sink.Send(context.Background(), systemSamples(1, time.Now())); err != nil {
			t.Fatal(err)
		}
		if l, own := line(t, srv, win, "node-1"), srv.GetRun(t, again[0].sink.Run().ID); l["status"] != mlflow.StatusRunning || l["attempt"] != "1" ||
			own.Info.Status != mlflow.StatusRunning {
			t.Errorf("the restarted node's line %v, its run %s; want RUNNING again, attempt 1", l, own.Info.Status)
		}
		srv.SetStatus(t, win, mlflow.StatusRunning) // the child's mlflow.start_run() resumes it
		endNode(t, again[0], 0)
		r := srv.GetRun(t, win)
		if l := line(t, srv, win, "node-1"); r.Info.Status != mlflow.StatusFailed || l["attempt"] != "1" || l["status"] != mlflow.StatusFinished {
			t.Errorf("after the clean second attempt: %s, line %v; want FAILED kept, attempt 1 recorded", r.Info.Status, l)
		}
	})
	t.Run("a lost attempt after a failed one", func(t *testing.T) {
		// node-1's attempt 0 FAILED, and its end was recorded on the job's
		// run; its bridge found that attempt lost (killed before its spool
		// held the end): the record of the failure stays FAILED.
		exp, key := unique(t), "lost-after-fail:"+unique(t)
		nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, nil)
		startTogether(t, nodes)
		win := oneRun(t, srv, exp, key, nodes)
		endNode(t, nodes[1], 1)
		again := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, nil)[1:]
		env, err := again[0].sink.Start(context.Background(), tracker.StartInfo{NodeID: "node-1",
			Tags: map[string]string{forensics.TagPreviousAttemptLost: "attempt 0 stopped without a clean shutdown"}})
		if err != nil {
			t.Fatal(err)
		}
		again[0].env = env
		if _, err := again[0].sink.Send(context.Background(), systemSamples(1, time.Now())); err != nil {
			t.Fatal(err)
		}
		r := srv.GetRun(t, win)
		if rec := r.Tags["bridge.failed.node-1"]; !strings.HasPrefix(rec, "FAILED: exit 1") || Status(r.Tags, 2) != mlflow.StatusFailed ||
			line(t, srv, win, "node-1")["status"] != mlflow.StatusRunning {
			t.Errorf("after the lost attempt's record: %q, the records call for %s; want the FAILED record kept", rec, Status(r.Tags, 2))
		}
	})
	t.Run("a restarted node killed after a failed attempt", func(t *testing.T) {
		// node-1's attempt 0 FAILED; its attempt 1 is KILLED: the record
		// of the node's failure stays the worse, FAILED, and the job's
		// status is what its records call for.
		exp, key := unique(t), "refail:"+unique(t)
		att := func(a int) func(int) tracker.Job {
			return func(int) tracker.Job { return tracker.Job{Key: key, Attempt: a, Nodes: 2, Settle: time.Second} }
		}
		nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, att(0))
		startTogether(t, nodes)
		win := oneRun(t, srv, exp, key, nodes)
		endNode(t, nodes[1], 1)
		again := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, att(1))[1:]
		startTogether(t, again)
		if _, err := again[0].sink.Send(context.Background(), systemSamples(1, time.Now())); err != nil {
			t.Fatal(err)
		}
		killed := tracker.EndInfo{ExitCode: 137, Signal: 9, Time: time.Now(), Tags: map[string]string{"bridge.exit_code": "137"}}
		if err := again[0].sink.Finish(context.Background(), killed); err != nil {
			t.Fatal(err)
		}
		endNode(t, nodes[0], 0)
		r := srv.GetRun(t, win)
		if rec := r.Tags["bridge.failed.node-1"]; rec != "FAILED: exit 1, attempt 0" || r.Info.Status != mlflow.StatusFailed ||
			Status(r.Tags, 2) != r.Info.Status || line(t, srv, win, "node-1")["attempt"] != "1" {
			t.Errorf("after a KILLED attempt 1: record %q, the job %s, its records call for %s; want attempt 0's FAILED kept, the job FAILED",
				rec, r.Info.Status, Status(r.Tags, 2))
		}
	})
}

// A multi-node job's end, its lost answers: each write whose answer was
// lost (the node's end tags, the run's status) is made again, to the same
// values.
func TestJobEndRetriesLostAnswers(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	p := proxyTo(t, srv)
	exp, key := unique(t), "lost-answers:"+unique(t)
	nodes := jobNodes(t, func(int) string { return p.URL() }, exp, key, 1, nil)
	startTogether(t, nodes)
	win := oneRun(t, srv, exp, key, nodes)
	p.Schedule(
		faultproxy.Fault{Path: "runs/log-batch", Kind: faultproxy.AppliedThenReset, Times: 1},
		faultproxy.Fault{Path: "runs/update", Kind: faultproxy.AppliedThenReset, Times: 1},
	)
	end := tracker.EndInfo{Time: time.Now(), Tags: map[string]string{"bridge.exit_code": "0"}}
	if err := nodes[0].sink.Finish(endCtx(t), end); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	r := srv.GetRun(t, win)
	if r.Info.Status != mlflow.StatusFinished || r.Tags[TagFinishedBy] != "node-0" || p.Hits(faultproxy.AppliedThenReset) != 2 {
		t.Errorf("run %s, %s=%q after %d lost answers: want FINISHED by node-0 after 2", r.Info.Status, TagFinishedBy, r.Tags[TagFinishedBy], p.Hits(faultproxy.AppliedThenReset))
	}
}

// A report claim whose writer stopped (its bridge killed after the claim)
// says until when it held; the next node to end writes the report in its
// place.
func TestReportClaimSettledByTheNextNode(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	exp, key := unique(t), "claim:"+unique(t)
	nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, nil)
	startTogether(t, nodes)
	win := oneRun(t, srv, exp, key, nodes)
	began := time.Now().Add(-time.Minute)
	dead, cancel := context.WithDeadline(context.Background(), began.Add(30*time.Second))
	claim := reportClaim(dead, "node-0", began)
	cancel()
	if err := nodes[0].raw.SetTags(context.Background(), win, map[string]string{report.TagReport: claim}); err != nil {
		t.Fatal(err)
	}
	if want := "until " + began.Add(30*time.Second).UTC().Format(time.RFC3339) + " at the latest"; !strings.Contains(claim, want) {
		t.Errorf("claim %q, want it to say %q", claim, want)
	}
	// node-1 ends; node-0 never does (its bridge died): the run's status
	// waits for it, the report does not.
	endNode(t, nodes[1], 0)
	r := srv.GetRun(t, win)
	if got := r.Tags[report.TagReport]; !strings.HasPrefix(got, "tag "+report.TagReportSummary+", written by node-1 at ") ||
		!strings.Contains(r.Tags[report.TagReportSummary], "node-1") {
		t.Errorf("after node-1's end: %s = %q, summary %q; want node-1's report", report.TagReport, got, r.Tags[report.TagReportSummary])
	}
}

// Whether a report claim outlived its writer is read on the ending node's
// clock (Node.Clock), never the wall's: an hour ahead of it, a claim
// whose until passed on that clock (still ahead of the wall's) is
// settled, and the report says when by that clock; one whose until is
// still ahead is left to its writer.
func TestReportClaimStaleByTheNodesClock(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	for _, tc := range []struct {
		name    string
		after   time.Duration // the ending node's clock, after the claim's until
		written bool
	}{
		{"stale on its clock", time.Minute, true},
		{"still held on its clock", -10 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp, key := unique(t), "clock:"+unique(t)
			nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, nil)
			startTogether(t, nodes)
			win := oneRun(t, srv, exp, key, nodes)
			began := time.Now().Add(time.Hour).Truncate(time.Second)
			until := began.Add(30 * time.Second)
			held, cancel := context.WithDeadline(context.Background(), until)
			claim := reportClaim(held, "node-0", began)
			cancel()
			if err := nodes[0].raw.SetTags(context.Background(), win, map[string]string{report.TagReport: claim}); err != nil {
				t.Fatal(err)
			}
			now := until.Add(tc.after)
			node := *NodeOf(&tracker.Job{Node: "node-1", Nodes: 2, Attempt: -1, Rank: 1})
			node.Clock = func() time.Time { return now }
			end := tracker.EndInfo{ExitCode: 0, Time: now, Tags: map[string]string{"bridge.exit_code": "0"}}
			if err := End(endCtx(t), nodes[1].raw, runsOf(nodes[1].raw.Run()), node, end, quiet(t)); err != nil {
				t.Fatal(err)
			}
			got := srv.GetRun(t, win).Tags[report.TagReport]
			if want := "written by node-1 at " + now.UTC().Format(time.RFC3339); tc.written != strings.HasSuffix(got, want) || !tc.written && got != claim {
				t.Errorf("%s = %q; want written %v (%q)", report.TagReport, got, tc.written, want)
			}
		})
	}
}

// lateTick is a node's MLflow sink on which the server applies, just
// before the end's read, a tick's write of the node's running line whose
// answer never came (the client gave up on it before the end began).
type lateTick struct {
	*mlflow.Sink
	key, line string
	applied   bool
}

func (l *lateTick) GetRun(ctx context.Context, id string) (tracker.StoredRun, error) {
	if !l.applied {
		l.applied = true
		if err := l.Sink.SetTags(ctx, id, map[string]string{l.key: l.line}); err != nil {
			return tracker.StoredRun{}, err
		}
	}
	return l.Sink.GetRun(ctx, id)
}

// A tick's write of the node's running line that the server applies after
// the node's end line does not leave the node running: the end's read
// shows it, and the end is written again; the last node to end then sees
// every node ended (the job FINISHED).
func TestEndLineKeptOverALateTick(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	exp, key := unique(t), "late:"+unique(t)
	nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 2, nil)
	startTogether(t, nodes)
	win := oneRun(t, srv, exp, key, nodes)
	if _, err := nodes[1].sink.Send(context.Background(), systemSamples(1, time.Now())); err != nil {
		t.Fatal(err) // its running line, with its first samples
	}
	endNode(t, nodes[0], 0)
	node := *NodeOf(&tracker.Job{Node: "node-1", Nodes: 2, Attempt: -1, Rank: 1})
	tag := tracker.StateTag("node-1", "")
	late := &lateTick{Sink: nodes[1].raw, key: tag, line: srv.GetRun(t, win).Tags[tag]}
	if tracker.ParseLine(late.line)[tracker.LineStatus] != tracker.StatusRunning {
		t.Fatalf("node-1's line before its end: %q, want it running", late.line)
	}
	end := tracker.EndInfo{ExitCode: 0, Time: time.Now(), Tags: map[string]string{"bridge.exit_code": "0"}}
	if err := End(endCtx(t), late, runsOf(nodes[1].raw.Run()), node, end, quiet(t)); err != nil {
		t.Fatal(err)
	}
	r := srv.GetRun(t, win)
	if l := tracker.ParseLine(r.Tags[tag]); !late.applied || l[tracker.LineStatus] != mlflow.StatusFinished || r.Info.Status != mlflow.StatusFinished {
		t.Errorf("after a late tick (applied %v): node-1's line %v, the job %s; want node-1 FINISHED, the job FINISHED", late.applied, l, r.Info.Status)
	}
}

// killedAtClaim is a node's MLflow sink whose bridge is killed as it
// claims the job's report: that write never lands.
type killedAtClaim struct{ *mlflow.Sink }

func (k killedAtClaim) SetTags(ctx context.Context, id string, tags map[string]string) error {
	if _, ok := tags[report.TagReport]; ok {
		return errors.New("killed")
	}
	return k.Sink.SetTags(ctx, id, tags)
}

// The node that set the job's status (FAILED) is killed before it claims
// the report: the next node to end, not the last (one node still runs),
// writes it.
func TestReportWrittenWhenItsSetterDiedUnclaimed(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	exp, key := unique(t), "unclaimed:"+unique(t)
	nodes := jobNodes(t, func(int) string { return srv.URL }, exp, key, 3, nil)
	startTogether(t, nodes)
	win := oneRun(t, srv, exp, key, nodes)
	node := *NodeOf(&tracker.Job{Node: "node-0", Nodes: 3, Attempt: -1, Rank: 0})
	end := tracker.EndInfo{ExitCode: 1, Time: time.Now(), Tags: map[string]string{"bridge.exit_code": "1"}}
	if err := End(endCtx(t), killedAtClaim{nodes[0].raw}, runsOf(nodes[0].raw.Run()), node, end, quiet(t)); err == nil {
		t.Fatal("node-0's end went through its claim")
	}
	if r := srv.GetRun(t, win); r.Info.Status != mlflow.StatusFailed || r.Tags[report.TagReport] != "" {
		t.Fatalf("after node-0 died at its claim: %s, %s = %q; want FAILED, no claim", r.Info.Status, report.TagReport, r.Tags[report.TagReport])
	}
	endNode(t, nodes[1], 0)
	if got := srv.GetRun(t, win).Tags[report.TagReport]; !strings.Contains(got, "written by node-1 at ") {
		t.Errorf("after node-1's end: %s = %q; want node-1's report", report.TagReport, got)
	}
}
