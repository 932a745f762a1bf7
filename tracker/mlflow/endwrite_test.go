package mlflow

// The end's writes against a real MLflow server behind mocks/faultproxy:
// each is retried by the write policy (tracker.Request), and repeating one
// whose answer was lost after the server applied it is harmless.

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/mocks/faultproxy"
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
	r := srv.GetRun(t, s.Run().ID)
	if r.Info.Status != StatusFinished || r.Tags["bridge.exit_code"] != "0" || p.Count("runs/update") != 2 {
		t.Errorf("run %s, tags %v after %d runs/update: want FINISHED, the exit code, one update repeated", r.Info.Status, r.Tags, p.Count("runs/update"))
	}
}
