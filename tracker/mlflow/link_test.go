package mlflow

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/tracker"
)

// The run's link is what MLflow's own client prints when the run ends
// (MlflowClient's _log_url), word for word: for a run bridge created, and
// for one it was given (MLFLOW_RUN_ID), whose name it reads.
func TestServerLinkAsMLflowPrintsIt(t *testing.T) {
	srv := mlflowtest.Shared(t)
	py := mlflowtest.Python(t)
	ctx := context.Background()
	created := serverSink(t, srv.URL+"/", Config{ExperimentName: unique(t)})
	if _, ok := created.Link(); ok {
		t.Fatal("a link before the sink has a run")
	}
	if _, err := created.Start(ctx, tracker.StartInfo{RunName: "train.py"}); err != nil {
		t.Fatal(err)
	}
	given := serverSink(t, srv.URL, Config{RunID: created.Run().ID})
	if _, err := given.Start(ctx, tracker.StartInfo{}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", `import sys
from mlflow.tracking import MlflowClient
MlflowClient(tracking_uri=sys.argv[1])._tracking_client._log_url(sys.argv[2])`, srv.URL, created.Run().ID)
	cmd.Env = childEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("MLflow's client: %v\n%s", err, out)
	}
	want := strings.TrimSuffix(string(out), "\n")
	for name, s := range map[string]*Sink{"created": created, "given": given} {
		lines, ok := s.Link()
		if got := strings.Join(lines, "\n"); !ok || got != want {
			t.Errorf("%s run: Link = %q (%v)\nMLflow prints %q", name, got, ok, want)
		}
	}
	if !strings.Contains(want, "🏃 View run train.py at: ") {
		t.Errorf("MLflow printed %q: not the run's name", want)
	}
}

// A link never carries the tracking URI's credentials, query or fragment.
func TestLinkHost(t *testing.T) {
	for _, tc := range []struct{ uri, want string }{
		{"http://127.0.0.1:5000", "http://127.0.0.1:5000"},
		{"https://user:s3cret@mlflow.example.com/prefix/", "https://mlflow.example.com/prefix"},
		{"http://h:1/?token=x#frag", "http://h:1"},
	} {
		if got, ok := linkHost(tc.uri); !ok || got != tc.want {
			t.Errorf("linkHost(%q) = %q, %v; want %q", tc.uri, got, ok, tc.want)
		}
	}
	for _, uri := range []string{"databricks", "file:///tmp/mlruns", "http://"} {
		if got, ok := linkHost(uri); ok {
			t.Errorf("linkHost(%q) = %q: want no link", uri, got)
		}
	}
}
