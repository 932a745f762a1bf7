// Package mlflowrec is a recording MLflow REST server for tests that must run
// without Python: it answers the endpoints bridge's MLflow sink uses as
// `mlflow server` answers them (mlflow/protos/service.proto, the error codes of
// mlflow/exceptions.py) and records every request, so that a test can diff
// what bridge posts against a golden file.
//
// It is a test double, not MLflow: state lives in memory; run and experiment
// ids are counters ("1", "2"... for experiments, "0" being the default one;
// run ids are 32 hex digits) so that the answers, and what bridge sends after
// them, are the same on every run; metrics are checked against MLflow's
// limits and recorded, not stored (runs/get answers the run's tags, no
// metrics). Any other path gets the HTML 404 MLflow's server answers there,
// recorded like the rest, so a test notices when bridge starts using a new
// endpoint. The answers' status and error_code are checked against a real
// server in mlflowrec_test.go.
// Requests are not authenticated; their Authorization header is recorded.
//
// Proxy records the same way in front of a real MLflow server, which
// answers instead: a test with Python checks there that a client sends the
// real server what it sends the recorder.
//
// Concurrency: every method is safe for concurrent use; Requests returns
// copies the caller owns.
package mlflowrec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Prefix is the path of MLflow's REST API under the tracking URI.
const Prefix = "/api/2.0/mlflow/"

// Limits of runs/log-batch (mlflow/utils/validation.py). MLflow 3.17's
// server does not refuse a body over its documented 1e6 bytes.
const (
	maxMetrics = 1000
	maxTags    = 100
)

// maxBody bounds what the recorder reads of one request.
const maxBody = 16 << 20

// Request is one recorded request.
type Request struct {
	Method string
	Path   string // the endpoint under Prefix, e.g. "runs/create" (the whole path outside it)
	Query  url.Values
	Header http.Header
	Body   []byte
	Status int // the status the server answered
}

// Server is a running recorder. Start it with Start or Proxy.
type Server struct {
	URL string // the tracking URI: http://127.0.0.1:PORT

	upstream *httputil.ReverseProxy // Proxy: the real server answers

	mu    sync.Mutex
	reqs  []Request
	exps  []experiment // index = experiment id
	runs  map[string]*run
	order []string // run ids in creation order
}

type experiment struct {
	ID    string `json:"experiment_id"`
	Name  string `json:"name"`
	Stage string `json:"lifecycle_stage"`
}

type tag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type run struct {
	info runInfo
	tags map[string]string
}

type runInfo struct {
	RunID          string `json:"run_id"`
	RunUUID        string `json:"run_uuid"`
	RunName        string `json:"run_name"`
	ExperimentID   string `json:"experiment_id"`
	UserID         string `json:"user_id"`
	Status         string `json:"status"`
	StartTime      int64  `json:"start_time"`
	EndTime        int64  `json:"end_time,omitempty"`
	ArtifactURI    string `json:"artifact_uri"`
	LifecycleStage string `json:"lifecycle_stage"`
}

// RunID is the id the recorder gives the n-th run created (from 1): 32 hex
// digits, as MLflow's.
func RunID(n int) string { return fmt.Sprintf("%032x", n) }

// Start serves a recorder on 127.0.0.1 until the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{
		exps: []experiment{{ID: "0", Name: "Default", Stage: "active"}},
		runs: map[string]*run{},
	}
	ts := httptest.NewServer(s)
	tb.Cleanup(ts.Close)
	s.URL = ts.URL
	return s
}

// Proxy serves a recorder on 127.0.0.1 until the test ends that forwards
// every request to the MLflow server at trackingURI and records it with the
// status that server answered.
func Proxy(tb testing.TB, trackingURI string) *Server {
	tb.Helper()
	u, err := url.Parse(trackingURI)
	if err != nil {
		tb.Fatalf("mlflowrec: tracking URI %q: %v", trackingURI, err)
	}
	s := &Server{upstream: httputil.NewSingleHostReverseProxy(u)}
	ts := httptest.NewServer(s)
	tb.Cleanup(ts.Close)
	s.URL = ts.URL
	return s
}

// Requests returns every request received so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.reqs))
	for i, r := range s.reqs {
		r.Query = maps.Clone(r.Query)
		r.Header = r.Header.Clone()
		r.Body = bytes.Clone(r.Body)
		out[i] = r
	}
	return out
}

// apiError is MLflow's error answer.
type apiError struct {
	status int
	Code   string `json:"error_code"`
	Msg    string `json:"message"`
}

func errorf(status int, code, format string, a ...any) *apiError {
	return &apiError{status: status, Code: code, Msg: fmt.Sprintf(format, a...)}
}

// ServeHTTP implements http.Handler: it records the request, then answers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	rec := Request{Method: r.Method, Path: strings.TrimPrefix(r.URL.Path, Prefix), Query: r.URL.Query(), Header: r.Header.Clone(), Body: body}
	if s.upstream != nil && err == nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		s.upstream.ServeHTTP(sw, r)
		rec.Status = sw.status
		s.mu.Lock()
		s.reqs = append(s.reqs, rec)
		s.mu.Unlock()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out any
	var aerr *apiError
	if err != nil {
		aerr = errorf(http.StatusBadRequest, "BAD_REQUEST", "reading the body: %v", err)
	} else {
		out, aerr = s.handle(r, rec.Path, body)
	}
	rec.Status = http.StatusOK
	if aerr != nil {
		rec.Status, out = aerr.status, aerr
	}
	s.reqs = append(s.reqs, rec)
	if aerr == errNoEndpoint {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, notFoundPage)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rec.Status)
	_ = json.NewEncoder(w).Encode(out)
}

// errNoEndpoint is a path MLflow's server has no handler for: Flask's HTML
// 404 page, not MLflow's JSON.
var errNoEndpoint = &apiError{status: http.StatusNotFound}

const notFoundPage = `<!doctype html>
<html lang=en>
<title>404 Not Found</title>
<h1>Not Found</h1>
<p>The requested URL was not found on the server. If you entered the URL manually please check your spelling and try again.</p>
`

// statusWriter keeps the status a proxied answer had.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// handle answers one request; s.mu is held.
func (s *Server) handle(r *http.Request, endpoint string, body []byte) (any, *apiError) {
	if r.Method == http.MethodPost {
		// MLflow refuses a POST whose body it would not parse as JSON.
		if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
			return nil, errorf(http.StatusBadRequest, "INVALID_PARAMETER_VALUE", "Bad Request. Content-Type must be one of ['application/json'].")
		}
	}
	switch r.Method + " " + endpoint {
	case "GET experiments/get-by-name":
		name := r.URL.Query().Get("experiment_name")
		for _, e := range s.exps {
			if e.Name == name {
				return map[string]any{"experiment": e}, nil
			}
		}
		return nil, errorf(http.StatusNotFound, "RESOURCE_DOES_NOT_EXIST", "Could not find experiment with name '%s'", name)
	case "POST experiments/create":
		var req struct {
			Name string `json:"name"`
		}
		if err := decode(body, &req); err != nil {
			return nil, err
		}
		if req.Name == "" {
			return nil, errorf(http.StatusBadRequest, "INVALID_PARAMETER_VALUE", "Missing value for required parameter 'name'.")
		}
		for _, e := range s.exps {
			if e.Name == req.Name {
				return nil, errorf(http.StatusBadRequest, "RESOURCE_ALREADY_EXISTS", "Experiment '%s' already exists.", req.Name)
			}
		}
		e := experiment{ID: strconv.Itoa(len(s.exps)), Name: req.Name, Stage: "active"}
		s.exps = append(s.exps, e)
		return map[string]any{"experiment_id": e.ID}, nil
	case "POST runs/create":
		return s.createRun(body)
	case "GET runs/get":
		ru, err := s.run(r.URL.Query().Get("run_id"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"run": ru.view()}, nil
	case "POST runs/log-batch":
		return s.logBatch(body)
	case "POST runs/update":
		var req struct {
			RunID   string `json:"run_id"`
			Status  string `json:"status"`
			EndTime *int64 `json:"end_time"`
		}
		if err := decode(body, &req); err != nil {
			return nil, err
		}
		ru, err := s.run(req.RunID)
		if err != nil {
			return nil, err
		}
		// An unknown status is ignored, as MLflow's protobuf parsing drops
		// an unknown enum value.
		if slices.Contains([]string{"RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED"}, req.Status) {
			ru.info.Status = req.Status
		}
		if req.EndTime != nil {
			ru.info.EndTime = *req.EndTime
		}
		return map[string]any{"run_info": ru.info}, nil
	}
	return nil, errNoEndpoint
}

func decode(body []byte, v any) *apiError {
	if err := json.Unmarshal(body, v); err != nil {
		return errorf(http.StatusBadRequest, "INVALID_PARAMETER_VALUE", "the request body is not the JSON this endpoint takes: %v", err)
	}
	return nil
}

func (s *Server) run(id string) (*run, *apiError) {
	ru, ok := s.runs[id]
	if !ok {
		return nil, errorf(http.StatusNotFound, "RESOURCE_DOES_NOT_EXIST", "Run with id=%s not found", id)
	}
	return ru, nil
}

func (ru *run) view() map[string]any {
	tags := make([]tag, 0, len(ru.tags))
	for _, k := range slices.Sorted(maps.Keys(ru.tags)) {
		tags = append(tags, tag{k, ru.tags[k]})
	}
	return map[string]any{"info": ru.info, "data": map[string]any{"tags": tags}, "inputs": map[string]any{}}
}

func (s *Server) createRun(body []byte) (any, *apiError) {
	var req struct {
		ExperimentID string `json:"experiment_id"`
		RunName      string `json:"run_name"`
		StartTime    int64  `json:"start_time"`
		Tags         []tag  `json:"tags"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.ExperimentID == "" {
		req.ExperimentID = "0"
	}
	if n, err := strconv.Atoi(req.ExperimentID); err != nil || n < 0 || n >= len(s.exps) {
		return nil, errorf(http.StatusNotFound, "RESOURCE_DOES_NOT_EXIST", "No Experiment with id=%s exists", req.ExperimentID)
	}
	tags := map[string]string{}
	for _, t := range req.Tags {
		tags[t.Key] = t.Value
	}
	if n, ok := tags["mlflow.runName"]; ok && req.RunName != "" && n != req.RunName {
		return nil, errorf(http.StatusBadRequest, "INVALID_PARAMETER_VALUE", "Both 'run_name' argument and 'mlflow.runName' tag are specified, but with different values (run_name='%s', mlflow.runName='%s').", req.RunName, n)
	}
	if req.RunName == "" {
		req.RunName = tags["mlflow.runName"]
	}
	tags["mlflow.runName"] = req.RunName
	id := RunID(len(s.order) + 1)
	s.runs[id] = &run{
		info: runInfo{RunID: id, RunUUID: id, RunName: req.RunName, ExperimentID: req.ExperimentID, Status: "RUNNING",
			StartTime: req.StartTime, ArtifactURI: "mlflow-artifacts:/" + req.ExperimentID + "/" + id + "/artifacts", LifecycleStage: "active"},
		tags: tags,
	}
	s.order = append(s.order, id)
	return map[string]any{"run": s.runs[id].view()}, nil
}

func (s *Server) logBatch(body []byte) (any, *apiError) {
	var req struct {
		RunID   string            `json:"run_id"`
		Metrics []json.RawMessage `json:"metrics"`
		Tags    []tag             `json:"tags"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	switch {
	case len(req.Metrics) > maxMetrics:
		return nil, errorf(http.StatusBadRequest, "INVALID_PARAMETER_VALUE", "A batch logging request can contain at most %d metrics. Got %d metrics.", maxMetrics, len(req.Metrics))
	case len(req.Tags) > maxTags:
		return nil, errorf(http.StatusBadRequest, "INVALID_PARAMETER_VALUE", "A batch logging request can contain at most %d tags. Got %d tags.", maxTags, len(req.Tags))
	}
	ru, err := s.run(req.RunID)
	if err != nil {
		return nil, err
	}
	for _, t := range req.Tags {
		ru.tags[t.Key] = t.Value
	}
	return map[string]any{}, nil
}
