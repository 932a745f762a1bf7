package mlflowtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// This file reads and prepares runs over REST with net/http only, so that
// checks do not go through the sink they check.

// RunInfo is a run's identity and status as runs/get answers it.
type RunInfo struct {
	RunID          string
	RunName        string
	ExperimentID   string
	Status         string
	LifecycleStage string
	StartTime      int64
	EndTime        int64
}

// Run is a run's info, tags, params and latest value per metric key.
type Run struct {
	Info   RunInfo
	Tags   map[string]string
	Params map[string]string
	Latest map[string]Metric
}

// wireRun is a run as runs/get and runs/search answer.
type wireRun struct {
	Info struct {
		RunID          string      `json:"run_id"`
		RunName        string      `json:"run_name"`
		ExperimentID   string      `json:"experiment_id"`
		Status         string      `json:"status"`
		LifecycleStage string      `json:"lifecycle_stage"`
		StartTime      json.Number `json:"start_time"`
		EndTime        json.Number `json:"end_time"`
	} `json:"info"`
	Data struct {
		Metrics []wireMetric `json:"metrics"`
		Tags    []keyValue   `json:"tags"`
		Params  []keyValue   `json:"params"`
	} `json:"data"`
}

type keyValue struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func (w wireRun) run(t testing.TB) Run {
	t.Helper()
	in := w.Info
	r := Run{
		Info:   RunInfo{RunID: in.RunID, RunName: in.RunName, ExperimentID: in.ExperimentID, Status: in.Status, LifecycleStage: in.LifecycleStage},
		Tags:   map[string]string{},
		Params: map[string]string{},
		Latest: map[string]Metric{},
	}
	r.Info.StartTime, _ = in.StartTime.Int64()
	r.Info.EndTime, _ = in.EndTime.Int64()
	for _, tg := range w.Data.Tags {
		r.Tags[tg.Key] = tg.Value
	}
	for _, p := range w.Data.Params {
		r.Params[p.Key] = p.Value
	}
	for _, wm := range w.Data.Metrics {
		m, err := wm.metric()
		if err != nil {
			t.Fatal(err)
		}
		r.Latest[m.Key] = m
	}
	return r
}

// Metric is one stored point.
type Metric struct {
	Key       string
	Value     float64
	Timestamp int64
	Step      int64
}

type wireMetric struct {
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	Timestamp json.Number     `json:"timestamp"`
	Step      json.Number     `json:"step"`
}

func (w wireMetric) metric() (Metric, error) {
	m := Metric{Key: w.Key}
	var err error
	var s string
	if json.Unmarshal(w.Value, &s) == nil {
		switch s {
		case "NaN":
			m.Value = math.NaN()
		case "Infinity":
			m.Value = math.Inf(1)
		case "-Infinity":
			m.Value = math.Inf(-1)
		default:
			m.Value, err = strconv.ParseFloat(s, 64)
		}
	} else {
		err = json.Unmarshal(w.Value, &m.Value)
	}
	if err != nil {
		return m, fmt.Errorf("metric %s value %s: %w", w.Key, w.Value, err)
	}
	if w.Timestamp != "" {
		if m.Timestamp, err = w.Timestamp.Int64(); err != nil {
			return m, err
		}
	}
	if w.Step != "" {
		if m.Step, err = w.Step.Int64(); err != nil {
			return m, err
		}
	}
	return m, nil
}

// do calls one REST endpoint and decodes the answer into out; a non-2xx
// answer fails the test with MLflow's message.
func (s *Server) do(t testing.TB, method, endpoint string, query url.Values, body, out any) {
	t.Helper()
	if code, msg := s.try(method, endpoint, query, body, out); code/100 != 2 {
		t.Fatalf("MLflow %s %s: %d %s", method, endpoint, code, msg)
	}
}

// try is do without failing: it returns the HTTP status (0 on a transport
// error) and the body or error text when not 2xx.
func (s *Server) try(method, endpoint string, query url.Values, body, out any) (int, string) {
	u := s.URL + "/api/2.0/mlflow/" + endpoint
	if query != nil {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err.Error()
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		return 0, err.Error()
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, string(raw)
	}
	if out != nil {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		if err := d.Decode(out); err != nil {
			return 0, fmt.Sprintf("decoding %s: %v", raw, err)
		}
	}
	return resp.StatusCode, ""
}

// GetRun reads a run's info, tags, params and latest metrics.
func (s *Server) GetRun(t testing.TB, runID string) Run {
	t.Helper()
	var out struct {
		Run wireRun `json:"run"`
	}
	s.do(t, http.MethodGet, "runs/get", url.Values{"run_id": {runID}}, nil, &out)
	return out.Run.run(t)
}

// SearchRuns returns the runs of an experiment that match filter (MLflow's
// search syntax, "" for all), in view ACTIVE_ONLY, DELETED_ONLY or ALL.
func (s *Server) SearchRuns(t testing.TB, experimentID, filter, view string) []Run {
	t.Helper()
	var runs []Run
	token := ""
	for {
		req := map[string]any{"experiment_ids": []string{experimentID}, "filter": filter, "run_view_type": view, "max_results": 1000}
		if token != "" {
			req["page_token"] = token
		}
		var out struct {
			Runs          []wireRun `json:"runs"`
			NextPageToken string    `json:"next_page_token"`
		}
		s.do(t, http.MethodPost, "runs/search", nil, req, &out)
		for _, w := range out.Runs {
			runs = append(runs, w.run(t))
		}
		if out.NextPageToken == "" || len(out.Runs) == 0 {
			return runs
		}
		token = out.NextPageToken
	}
}

// PollRuns is SearchRuns for a test that polls a busy server: a call that
// gets no answer (a timeout, a reset) or a 5xx is "not yet" (ok false),
// not a failure; any other error fails the test. One page.
func (s *Server) PollRuns(t testing.TB, experimentID, filter, view string) (runs []Run, ok bool) {
	t.Helper()
	req := map[string]any{"experiment_ids": []string{experimentID}, "filter": filter, "run_view_type": view, "max_results": 1000}
	var out struct {
		Runs []wireRun `json:"runs"`
	}
	switch code, msg := s.try(http.MethodPost, "runs/search", nil, req, &out); {
	case code == 0 || code/100 == 5:
		t.Logf("polling MLflow runs/search: %d %s (tried again)", code, msg)
		return nil, false
	case code/100 != 2:
		t.Fatalf("MLflow POST runs/search: %d %s", code, msg)
	}
	for _, w := range out.Runs {
		runs = append(runs, w.run(t))
	}
	return runs, true
}

// OrderedRuns is the experiment's active runs as runs/search orders them
// by orderBy (MLflow's order_by, e.g. "metrics.`system/x` DESC"): the
// server's sort, one page of at most 1000.
func (s *Server) OrderedRuns(t testing.TB, experimentID, orderBy string) []Run {
	t.Helper()
	req := map[string]any{"experiment_ids": []string{experimentID}, "order_by": []string{orderBy}, "max_results": 1000}
	var out struct {
		Runs []wireRun `json:"runs"`
	}
	s.do(t, http.MethodPost, "runs/search", nil, req, &out)
	runs := make([]Run, len(out.Runs))
	for i, w := range out.Runs {
		runs[i] = w.run(t)
	}
	return runs
}

// MetricKeys lists a run's metric keys, sorted; with prefix, only those
// starting with it (e.g. "system/").
func (s *Server) MetricKeys(t testing.TB, runID, prefix string) []string {
	t.Helper()
	var keys []string
	for k := range s.GetRun(t, runID).Latest {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// History returns every point of key in the run, in the server's order,
// following next_page_token as the Python client does.
func (s *Server) History(t testing.TB, runID, key string) []Metric {
	t.Helper()
	var all []Metric
	token := ""
	for {
		q := url.Values{"run_id": {runID}, "metric_key": {key}, "max_results": {"25000"}}
		if token != "" {
			q.Set("page_token", token)
		}
		var out struct {
			Metrics       []wireMetric `json:"metrics"`
			NextPageToken string       `json:"next_page_token"`
		}
		s.do(t, http.MethodGet, "metrics/get-history", q, nil, &out)
		for _, w := range out.Metrics {
			m, err := w.metric()
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, m)
		}
		if out.NextPageToken == "" || len(out.Metrics) == 0 {
			return all
		}
		token = out.NextPageToken
	}
}

// CreateExperiment creates an experiment and returns its id.
func (s *Server) CreateExperiment(t testing.TB, name string) string {
	t.Helper()
	var out struct {
		ExperimentID string `json:"experiment_id"`
	}
	s.do(t, http.MethodPost, "experiments/create", nil, map[string]string{"name": name}, &out)
	return out.ExperimentID
}

// ExperimentID returns the id of the named experiment, "" if none.
func (s *Server) ExperimentID(t testing.TB, name string) string {
	t.Helper()
	var out struct {
		Experiment struct {
			ExperimentID string `json:"experiment_id"`
		} `json:"experiment"`
	}
	code, msg := s.try(http.MethodGet, "experiments/get-by-name", url.Values{"experiment_name": {name}}, nil, &out)
	switch {
	case code == http.StatusNotFound:
		return ""
	case code/100 != 2:
		t.Fatalf("MLflow experiments/get-by-name %q: %d %s", name, code, msg)
	}
	return out.Experiment.ExperimentID
}

// DeleteExperiment marks an experiment deleted.
func (s *Server) DeleteExperiment(t testing.TB, id string) {
	t.Helper()
	s.do(t, http.MethodPost, "experiments/delete", nil, map[string]string{"experiment_id": id}, nil)
}

// CreateRun creates a RUNNING run in the experiment, as a user's own code
// would, and returns its id.
func (s *Server) CreateRun(t testing.TB, experimentID, name string) string {
	t.Helper()
	var out struct {
		Run struct {
			Info struct {
				RunID string `json:"run_id"`
			} `json:"info"`
		} `json:"run"`
	}
	s.do(t, http.MethodPost, "runs/create", nil, map[string]any{
		"experiment_id": experimentID, "run_name": name, "start_time": time.Now().UnixMilli(),
	}, &out)
	return out.Run.Info.RunID
}

// LogBatch records tags and points (key -> values, logged at steps 0, 1,
// ... one second apart) on a run, as a user's own code could, in as many
// runs/log-batch requests as MLflow's limits (100 tags, 1000 metrics)
// call for.
func (s *Server) LogBatch(t testing.TB, runID string, tags map[string]string, points map[string][]float64) {
	t.Helper()
	var tl, ml []map[string]any
	for k, v := range tags {
		tl = append(tl, map[string]any{"key": k, "value": v})
	}
	now := time.Now().UnixMilli()
	for k, vs := range points {
		for i, v := range vs {
			ml = append(ml, map[string]any{"key": k, "value": v, "timestamp": now + int64(i)*1000, "step": i})
		}
	}
	for len(tl) > 0 || len(ml) > 0 {
		body := map[string]any{"run_id": runID}
		if n := min(len(tl), 100); n > 0 {
			body["tags"], tl = tl[:n], tl[n:]
		}
		if n := min(len(ml), 1000); n > 0 {
			body["metrics"], ml = ml[:n], ml[n:]
		}
		s.do(t, http.MethodPost, "runs/log-batch", nil, body, nil)
	}
}

// DeleteRun marks a run deleted.
func (s *Server) DeleteRun(t testing.TB, runID string) {
	t.Helper()
	s.do(t, http.MethodPost, "runs/delete", nil, map[string]string{"run_id": runID}, nil)
}

// SetStatus sets a run's status (and end time for terminal ones), as a
// child's mlflow.end_run() would.
func (s *Server) SetStatus(t testing.TB, runID, status string) {
	t.Helper()
	body := map[string]any{"run_id": runID, "status": status}
	if status != "RUNNING" {
		body["end_time"] = time.Now().UnixMilli()
	}
	s.do(t, http.MethodPost, "runs/update", nil, body, nil)
}

// EndRun sets a run's terminal status with the end time given, as the
// Python client's set_terminated(run_id, status, end_time) does.
func (s *Server) EndRun(t testing.TB, runID, status string, end time.Time) {
	t.Helper()
	s.do(t, http.MethodPost, "runs/update", nil, map[string]any{"run_id": runID, "status": status, "end_time": end.UnixMilli()}, nil)
}

// RunIDs lists the ids of every run (active or deleted) in the named
// experiment, none when it does not exist.
func (s *Server) RunIDs(t testing.TB, experimentName string) []string {
	t.Helper()
	exp := s.ExperimentID(t, experimentName)
	if exp == "" {
		return nil
	}
	var out struct {
		Runs []struct {
			Info struct {
				RunID string `json:"run_id"`
			} `json:"info"`
		} `json:"runs"`
	}
	s.do(t, http.MethodPost, "runs/search", nil, map[string]any{"experiment_ids": []string{exp}, "run_view_type": "ALL", "max_results": 1000}, &out)
	var ids []string
	for _, r := range out.Runs {
		ids = append(ids, r.Info.RunID)
	}
	slices.Sort(ids)
	return ids
}

// CreateExperimentAt creates an experiment whose runs keep their artifacts
// at location (mlflow-artifacts:/<dir> for the server's artifact proxy, a
// path for files only the client writes) and returns its id.
func (s *Server) CreateExperimentAt(t testing.TB, name, location string) string {
	t.Helper()
	var out struct {
		ExperimentID string `json:"experiment_id"`
	}
	s.do(t, http.MethodPost, "experiments/create", nil, map[string]string{"name": name, "artifact_location": location}, &out)
	return out.ExperimentID
}

// Artifact reads a run's artifact as the UI does (GET /get-artifact);
// ok is false when the run has no such artifact.
func (s *Server) Artifact(t testing.TB, runID, path string) (body []byte, ok bool) {
	t.Helper()
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(s.URL + "/get-artifact?" + url.Values{"run_uuid": {runID}, "path": {path}}.Encode())
	if err != nil {
		t.Fatalf("GET /get-artifact %s of run %s: %v", path, runID, err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return body, true
	case resp.StatusCode == http.StatusNotFound, resp.StatusCode == http.StatusBadRequest && bytes.Contains(body, []byte("RESOURCE_DOES_NOT_EXIST")):
		return nil, false
	}
	t.Fatalf("GET /get-artifact %s of run %s: %s: %s", path, runID, resp.Status, body)
	return nil, false
}
