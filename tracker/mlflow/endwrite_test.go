package mlflow

// The end's writes against a real MLflow server behind mocks/faultproxy:
// each is retried by the write policy (tracker.Request), and repeating one
// whose answer was lost after the server applied it is harmless.

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/mocks/faultproxy"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
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

// Every request of a single run's end fails once (a reset the server never
// saw, a 502, an update applied whose answer was lost): Finish records the
// end all the same.
func TestFinishRetriesEachWrite(t *testing.T) {
	srv := mlflowtest.Shared(t)
	p := proxyTo(t, srv)
	s := serverSink(t, p.URL(), Config{ExperimentName: unique(t)})
	if _, err := s.Start(context.Background(), tracker.StartInfo{Command: []string{"train.py"}}); err != nil {
		t.Fatal(err)
	}
	p.Schedule(
		faultproxy.Fault{Path: "runs/log-batch", Kind: faultproxy.Reset, Times: 1},
		faultproxy.Fault{Path: "runs/get", Kind: faultproxy.Status, Code: http.StatusBadGateway, Times: 1},
		faultproxy.Fault{Path: "runs/update", Kind: faultproxy.AppliedThenReset, Times: 1},
	)
	end := tracker.EndInfo{Time: time.Now(), Tags: map[string]string{"bridge.exit_code": "0"}}
	if err := s.Finish(endCtx(t), end); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	r := srv.GetRun(t, s.RunID())
	if r.Info.Status != StatusFinished || r.Tags["bridge.exit_code"] != "0" || p.Count("runs/update") != 2 {
		t.Errorf("run %s, tags %v after %d runs/update: want FINISHED, the exit code, one update repeated", r.Info.Status, r.Tags, p.Count("runs/update"))
	}
}

// A multi-node job's end, its lost answers: the write-once param that
// says which node ends the run is written again with the same value (which
// MLflow takes), and the run's status with it.
func TestJobEndRetriesLostAnswers(t *testing.T) {
	srv := mlflowtest.SharedPostgres(t)
	p := proxyTo(t, srv)
	exp, key := unique(t), "lost-answers:"+unique(t)
	nodes := jobNodes(t, func(int) string { return p.URL() }, exp, key, 1, nil)
	startTogether(t, nodes)
	win := oneRun(t, srv, exp, key, nodes)
	p.Schedule(
		faultproxy.Fault{Path: "runs/log-parameter", Kind: faultproxy.AppliedThenReset, Times: 1},
		faultproxy.Fault{Path: "runs/update", Kind: faultproxy.AppliedThenReset, Times: 1},
	)
	end := tracker.EndInfo{Time: time.Now(), Tags: map[string]string{"bridge.exit_code": "0"}}
	if err := nodes[0].sink.Finish(endCtx(t), end); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	r := srv.GetRun(t, win)
	if r.Info.Status != StatusFinished || r.Params[ParamFinished] != "node-0" || p.Hits(faultproxy.AppliedThenReset) != 2 {
		t.Errorf("run %s, %s=%q after %d lost answers: want FINISHED by node-0 after 2", r.Info.Status, ParamFinished, r.Params[ParamFinished], p.Hits(faultproxy.AppliedThenReset))
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
	if err := nodes[0].sink.SetTags(context.Background(), map[string]string{report.TagReport: claim}); err != nil {
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
