package mlflow

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/bridge-dev/bridge/tracker"
)

// TestStartExperimentRace replays the losing side of two jobs creating the
// same experiment: get-by-name says missing, create says it already exists
// (the other job won), so the sink looks it up again.
func TestStartExperimentRace(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	lookups := 0
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/2.0/mlflow/experiments/get-by-name", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, "get-by-name")
		lookups++
		if lookups == 1 {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error_code":"RESOURCE_DOES_NOT_EXIST","message":"Could not find experiment with name 'e'"}`)
			return
		}
		io.WriteString(w, `{"experiment":{"experiment_id":"42","name":"e","lifecycle_stage":"active"}}`)
	})
	mux.HandleFunc("POST /api/2.0/mlflow/experiments/create", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, "create-experiment")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error_code":"RESOURCE_ALREADY_EXISTS","message":"Experiment 'e' already exists."}`)
	})
	var created createRunRequest
	mux.HandleFunc("POST /api/2.0/mlflow/runs/create", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, "create-run")
		json.NewDecoder(r.Body).Decode(&created)
		io.WriteString(w, `{"run":{"info":{"run_id":"r1","run_name":"n","status":"RUNNING"}}}`)
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)

	s, err := New(Config{TrackingURI: ts.URL, ExperimentName: "e"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env, err := s.Start(context.Background(), tracker.StartInfo{RunName: "n", Tags: map[string]string{"mlflow.runName": "other", "bridge.version": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "get-by-name create-experiment get-by-name create-run"; strings.Join(calls, " ") != want {
		t.Errorf("calls %v, want %s", calls, want)
	}
	if created.ExperimentID != "42" || created.RunName != "n" || created.StartTime <= 0 {
		t.Errorf("runs/create %+v", created)
	}
	for _, tag := range created.Tags {
		if tag.Key == "mlflow.runName" {
			t.Errorf("mlflow.runName tag sent with run_name (MLflow answers 400 when they differ)")
		}
	}
	if strings.Join(env, " ") != "MLFLOW_RUN_ID=r1 MLFLOW_EXPERIMENT_ID=42" || !s.Run().Created {
		t.Errorf("env %v created %v", env, s.Run().Created)
	}
}

// TestStartUnreachableKeepsGivenRun: with MLFLOW_RUN_ID and no server, Start
// still hands the id on and Send can go once the server is back.
func TestStartUnreachableKeepsGivenRun(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	url := ts.URL
	ts.Close()
	s, err := New(Config{TrackingURI: url, RunID: "given"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env, err := s.Start(context.Background(), tracker.StartInfo{})
	if err == nil || errors.Is(err, tracker.ErrPermanent) {
		t.Fatalf("err = %v, want a retryable error", err)
	}
	if strings.Join(env, " ") != "MLFLOW_RUN_ID=given" || s.Run().ID != "given" {
		t.Errorf("env %v run %q", env, s.Run().ID)
	}
}
