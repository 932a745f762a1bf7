package mlflow

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

// recorder is an httptest MLflow stand-in that records log-batch bodies and
// answers each request with reply (nil: 200 {}).
type recorder struct {
	mu     sync.Mutex
	bodies [][]byte
	auth   []string
	reply  func(n int, w http.ResponseWriter) bool // n counts from 1; true when it answered
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.bodies = append(rc.bodies, body)
	rc.auth = append(rc.auth, r.Header.Get("Authorization"))
	n := len(rc.bodies)
	rc.mu.Unlock()
	if r.Header.Get("Content-Type") != "application/json" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if rc.reply != nil && rc.reply(n, w) {
		return
	}
	io.WriteString(w, "{}")
}

type wireBatch struct {
	RunID   string `json:"run_id"`
	Metrics []struct {
		Key       string          `json:"key"`
		Value     json.RawMessage `json:"value"`
		Timestamp int64           `json:"timestamp"`
		Step      int64           `json:"step"`
	} `json:"metrics"`
}

func (rc *recorder) batches(t *testing.T) []wireBatch {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []wireBatch
	for _, b := range rc.bodies {
		var wb wireBatch
		if err := json.Unmarshal(b, &wb); err != nil {
			t.Fatalf("body is not JSON: %v\n%s", err, b)
		}
		out = append(out, wb)
	}
	return out
}

// testSink returns a sink attached (without Start) to run "run1" on a
// recorder.
func testSink(t *testing.T, rc *recorder, cfg Config) *Sink {
	t.Helper()
	ts := httptest.NewServer(rc)
	t.Cleanup(ts.Close)
	cfg.TrackingURI = ts.URL
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.runID = "run1"
	return s
}

var t0 = time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)

// samples makes n samples of the given point counts, named m0, m1, ...
func samples(counts ...int) []metrics.Sample {
	var out []metrics.Sample
	for i, c := range counts {
		s := metrics.Sample{Seq: int64(i), Time: t0.Add(time.Duration(i) * time.Second)}
		for j := range c {
			s.Points = append(s.Points, metrics.Named(fmt.Sprintf("m%d", j), float64(i*100+j)))
		}
		out = append(out, s)
	}
	return out
}

func TestEncodeMetric(t *testing.T) {
	tests := []struct {
		value float64
		want  string
	}{
		{math.NaN(), `"NaN"`},
		{math.Inf(1), `"Infinity"`},
		{math.Inf(-1), `"-Infinity"`},
		{0, `0`},
		{-2.5, `-2.5`},
		{1e21, `1e+21`},
		{123456.789, `123456.789`},
	}
	for _, tc := range tests {
		got := string(encodeMetric("system/x", tc.value, 1700000000123, 7))
		want := `{"key":"system/x","value":` + tc.want + `,"timestamp":1700000000123,"step":7}`
		if got != want {
			t.Errorf("value %v: got %s, want %s", tc.value, got, want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("value %v: %s is not valid JSON", tc.value, got)
		}
	}
}

func TestSendKeysTimestampsSteps(t *testing.T) {
	for _, node := range []string{"", "worker-1"} {
		t.Run("node="+node, func(t *testing.T) {
			rc := &recorder{}
			s := testSink(t, rc, Config{NodeID: node})
			in := []metrics.Sample{{Seq: 4, Time: t0.Add(1500 * time.Microsecond), Points: []metrics.Point{
				metrics.Named("container_memory_working_set_megabytes", 12.5),
				metrics.Named("node_load_1", math.NaN()),
			}}}
			acked, err := s.Send(context.Background(), in)
			if err != nil || acked != 1 {
				t.Fatalf("Send = %d, %v", acked, err)
			}
			b := rc.batches(t)
			if len(b) != 1 || b[0].RunID != "run1" || len(b[0].Metrics) != 2 {
				t.Fatalf("requests %+v", b)
			}
			prefix := "system/"
			if node != "" {
				prefix += node + "/"
			}
			for i, m := range b[0].Metrics {
				if want := prefix + in[0].Points[i].Name(); m.Key != want {
					t.Errorf("key %q, want %q", m.Key, want)
				}
				if m.Timestamp != t0.UnixMilli()+1 || m.Step != 4 {
					t.Errorf("timestamp %d step %d, want %d and 4", m.Timestamp, m.Step, t0.UnixMilli()+1)
				}
			}
			if string(b[0].Metrics[1].Value) != `"NaN"` {
				t.Errorf("NaN sent as %s", b[0].Metrics[1].Value)
			}
		})
	}
}

func TestSendSplits(t *testing.T) {
	const bodyFor3 = -1
	tests := []struct {
		name       string
		counts     []int // points per sample
		maxMetrics int
		maxBody    int
		wantSizes  []int // metrics per request
	}{
		{"packs samples together", []int{2, 2, 2, 2}, 3, maxBodyBytes, []int{3, 3, 2}},
		{"one sample over the limit", []int{5}, 2, maxBodyBytes, []int{2, 2, 1}},
		{"exactly full", []int{3, 3}, 3, maxBodyBytes, []int{3, 3}},
		{"body limit", []int{4}, 1000, bodyFor3, []int{3, 1}},
		{"empty samples", []int{0, 0}, 3, maxBodyBytes, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc := &recorder{}
			s := testSink(t, rc, Config{})
			in := samples(tc.counts...)
			if tc.maxBody == bodyFor3 {
				// Exactly three of these (equal-sized) metrics fit.
				m := encodeMetric("system/m0", 0, t0.UnixMilli(), 0)
				tc.maxBody = len(newBatch("run1", 1, 1).head) + 3*len(m) + 2 + len(batchTail)
			}
			s.maxMetrics, s.maxBody = tc.maxMetrics, tc.maxBody
			acked, err := s.Send(context.Background(), in)
			if err != nil || acked != len(in) {
				t.Fatalf("Send = %d, %v; want %d, nil", acked, err, len(in))
			}
			var sizes []int
			var got []string
			for i, b := range rc.batches(t) {
				sizes = append(sizes, len(b.Metrics))
				if n := len(rc.bodies[i]); n > tc.maxBody {
					t.Errorf("request %d is %d bytes, over %d", i, n, tc.maxBody)
				}
				for _, m := range b.Metrics {
					got = append(got, fmt.Sprintf("%s@%d", m.Key, m.Step))
				}
			}
			if fmt.Sprint(sizes) != fmt.Sprint(tc.wantSizes) {
				t.Errorf("metrics per request %v, want %v", sizes, tc.wantSizes)
			}
			var want []string
			for _, sm := range in {
				for _, p := range sm.Points {
					want = append(want, fmt.Sprintf("system/%s@%d", p.Name(), sm.Seq))
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("sent %v\nwant %v", got, want)
			}
		})
	}
}

func TestSendAckedOnFailure(t *testing.T) {
	// Samples of 2 points, 3 metrics per request:
	// request 1 = s0 s0 s1, request 2 = s1 s2 s2, request 3 = s3 s3.
	tests := []struct {
		failAt int
		acked  int
	}{
		{1, 0}, // nothing posted
		{2, 1}, // s0 complete; s1 only half posted
		{3, 3},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint("fail at ", tc.failAt), func(t *testing.T) {
			rc := &recorder{reply: func(n int, w http.ResponseWriter) bool {
				if n != tc.failAt {
					return false
				}
				w.WriteHeader(http.StatusInternalServerError)
				io.WriteString(w, `{"error_code":"INTERNAL_ERROR","message":"database is locked"}`)
				return true
			}}
			s := testSink(t, rc, Config{})
			s.maxMetrics = 3
			acked, err := s.Send(context.Background(), samples(2, 2, 2, 2))
			if err == nil {
				t.Fatal("no error")
			}
			if acked != tc.acked {
				t.Errorf("acked %d, want %d", acked, tc.acked)
			}
			if len(rc.bodies) != tc.failAt {
				t.Errorf("%d requests, want %d (stop at the first failure)", len(rc.bodies), tc.failAt)
			}
		})
	}
}

func TestSendSkipsInvalidKeys(t *testing.T) {
	rc := &recorder{}
	s := testSink(t, rc, Config{})
	in := []metrics.Sample{{Time: t0, Points: []metrics.Point{
		metrics.Named("ok_metric", 1), metrics.Named("bad{name}", 2), metrics.Named("trailing/", 3),
		metrics.Named(strings.Repeat("x", 250), 4), metrics.Named("a//b", 5), metrics.Named("../up", 6),
	}}}
	acked, err := s.Send(context.Background(), in)
	if err != nil || acked != 1 {
		t.Fatalf("Send = %d, %v", acked, err)
	}
	b := rc.batches(t)
	if len(b) != 1 || len(b[0].Metrics) != 1 || b[0].Metrics[0].Key != "system/ok_metric" {
		t.Errorf("sent %+v, want only system/ok_metric", b)
	}
}

func TestClassify(t *testing.T) {
	type kind int
	const (
		ok kind = iota
		retry
		retryAfter
		permanent
	)
	tests := []struct {
		name    string
		status  int
		header  string // Retry-After
		body    string
		cfg     Config
		want    kind
		after   time.Duration
		message []string
	}{
		{"200", 200, "", "{}", Config{}, ok, 0, nil},
		{"500", 500, "", `{"error_code":"INTERNAL_ERROR","message":"boom"}`, Config{}, retry, 0, []string{"500 INTERNAL_ERROR", "boom"}},
		{"502 from a proxy", 502, "", "<html>Bad Gateway</html>", Config{}, retry, 0, []string{"502"}},
		{"504", 504, "", "", Config{}, retry, 0, nil},
		{"408", 408, "", "", Config{}, retry, 0, nil},
		{"429 without Retry-After", 429, "", `{"error_code":"REQUEST_LIMIT_EXCEEDED","message":"slow down"}`, Config{}, retry, 0, nil},
		{"429 Retry-After seconds", 429, "7", `{"error_code":"REQUEST_LIMIT_EXCEEDED","message":"slow down"}`, Config{}, retryAfter, 7 * time.Second, nil},
		{"503 Retry-After", 503, "2", `{"error_code":"TEMPORARILY_UNAVAILABLE","message":"x"}`, Config{}, retryAfter, 2 * time.Second, nil},
		{"503 without", 503, "", "", Config{}, retry, 0, nil},
		{"401 token", 401, "", `{"error_code":"UNAUTHENTICATED","message":"You are not authenticated."}`, Config{Token: "t0ps3cret"}, permanent, 0,
			[]string{"MLflow rejected the credentials (401 UNAUTHENTICATED) at http://127.0.0.1:", "check " + EnvToken}},
		{"401 basic", 401, "", "", Config{Username: "u", Password: "pw"}, permanent, 0, []string{EnvUsername, EnvPassword}},
		{"401 no credentials", 401, "", "", Config{}, permanent, 0, []string{"no credentials are set"}},
		{"403", 403, "", `{"error_code":"PERMISSION_DENIED","message":"Permission denied"}`, Config{}, permanent, 0, []string{"403 PERMISSION_DENIED", "run1"}},
		{"404 run", 404, "", `{"error_code":"RESOURCE_DOES_NOT_EXIST","message":"Run 'run1' not found"}`, Config{}, permanent, 0, []string{"RESOURCE_DOES_NOT_EXIST", "not found"}},
		{"404 not mlflow", 404, "", `<html>Not Found</html>`, Config{}, permanent, 0, []string{"no MLflow REST API", EnvTrackingURI}},
		// MLflow 3.17's answer when its database connection pool is exhausted
		// (seen with 50 bridges on one server, bench/load.sh).
		{"400 database pool timeout", 400, "", `{"error_code":"BAD_REQUEST","message":"QueuePool limit of size 5 overflow 10 reached, connection timed out, timeout 30.00 (Background on this error at: https://sqlalche.me/e/20/3o7r)"}`,
			Config{}, retry, 0, []string{"400 BAD_REQUEST", "QueuePool", "database error on the MLflow server"}},
		{"400 other request error", 400, "", `{"error_code":"BAD_REQUEST","message":"Invalid value for request parameter"}`, Config{}, permanent, 0, nil},
		{"400 deleted run", 400, "", `{"error_code":"INVALID_PARAMETER_VALUE","message":"The run run1 must be in the 'active' state."}`, Config{}, permanent, 0, []string{"active"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc := &recorder{reply: func(n int, w http.ResponseWriter) bool {
				if tc.header != "" {
					w.Header().Set("Retry-After", tc.header)
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
				return true
			}}
			s := testSink(t, rc, tc.cfg)
			_, err := s.Send(context.Background(), samples(1))
			var ra *tracker.RetryAfterError
			got := ok
			switch {
			case err == nil:
			case errors.Is(err, tracker.ErrPermanent):
				got = permanent
			case errors.As(err, &ra):
				got = retryAfter
			default:
				got = retry
			}
			if got != tc.want {
				t.Fatalf("err = %v: kind %d, want %d", err, got, tc.want)
			}
			if ra != nil && ra.After != tc.after {
				t.Errorf("Retry-After %s, want %s", ra.After, tc.after)
			}
			for _, m := range tc.message {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message %q does not contain %q", err, m)
				}
			}
			for _, secret := range []string{tc.cfg.Token, tc.cfg.Password} {
				if secret != "" && strings.Contains(err.Error(), secret) {
					t.Errorf("message %q leaks a credential", err)
				}
			}
			if tc.cfg.Token != "" && rc.auth[0] != "Bearer "+tc.cfg.Token {
				t.Errorf("Authorization %q, want Bearer", rc.auth[0])
			}
		})
	}
}

func TestAuthPreference(t *testing.T) {
	rc := &recorder{}
	// Both set: Basic, as the Python client does.
	s := testSink(t, rc, Config{Token: "tok", Username: "u", Password: "p"})
	if _, err := s.Send(context.Background(), samples(1)); err != nil {
		t.Fatal(err)
	}
	if want := "Basic dTpw"; rc.auth[0] != want {
		t.Errorf("Authorization %q, want %q", rc.auth[0], want)
	}
}

func TestUnreachableIsRetryable(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	url := ts.URL
	ts.Close()
	s, err := New(Config{TrackingURI: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.runID = "run1"
	acked, err := s.Send(context.Background(), samples(1))
	if err == nil || acked != 0 || errors.Is(err, tracker.ErrPermanent) {
		t.Fatalf("Send = %d, %v; want a retryable error", acked, err)
	}
	if !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("message %q should say the server is unreachable", err)
	}
}

func TestSendBeforeStart(t *testing.T) {
	s, err := New(Config{TrackingURI: "http://127.0.0.1:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Send(context.Background(), samples(1)); !errors.Is(err, tracker.ErrNotReady) {
		t.Errorf("err = %v, want ErrNotReady", err)
	}
}

func TestTagValuesTruncated(t *testing.T) {
	long := strings.Repeat("é", maxTagValue+5)
	got := tagList(map[string]string{"b": long, "a": "short"})
	if len(got) != 2 || got[0].Key != "a" || got[1].Key != "b" {
		t.Fatalf("tags %v, want sorted a, b", got)
	}
	if n := len([]rune(got[1].Value)); n != maxTagValue {
		t.Errorf("long value kept %d characters, want %d", n, maxTagValue)
	}
}

// A server whose certificate is not trusted is configuration: a permanent
// error naming the variables that set what is trusted, not an outage. With
// its CA given, the same server is an ordinary tracker (here: one that is
// unavailable, retried).
func TestUntrustedCertificateIsPermanent(t *testing.T) {
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer ts.Close()
	s, err := New(Config{TrackingURI: ts.URL, RunID: "run1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Start(context.Background(), tracker.StartInfo{})
	if !errors.Is(err, tracker.ErrPermanent) || !strings.Contains(err.Error(), EnvServerCertPath) || !strings.Contains(err.Error(), EnvInsecureTLS) {
		t.Fatalf("Start = %v; want a permanent error naming %s and %s", err, EnvServerCertPath, EnvInsecureTLS)
	}

	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = New(Config{TrackingURI: ts.URL, RunID: "run1", ServerCertPath: ca}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err = s.Start(context.Background(), tracker.StartInfo{}); err == nil || errors.Is(err, tracker.ErrPermanent) || tracker.TLSUntrusted(err) {
		t.Fatalf("Start with the CA given = %v; want the server's 503, retryable", err)
	}
}

// MLflow refuses a whole batch for one point timed before 1970: such
// points are left out and counted, the rest of their batch is sent, and
// their samples count as acknowledged.
func TestSendLeavesOutRefusedTimes(t *testing.T) {
	rc := &recorder{}
	s := testSink(t, rc, Config{})
	in := samples(2, 3, 2)
	in[1].Time = time.UnixMilli(-1)
	in = append(in, metrics.Sample{Seq: 3, Time: t0, Points: []metrics.Point{metrics.Named("ok", 1), metrics.Named("bad{key}", 2)}})
	acked, err := s.Send(context.Background(), in)
	if err != nil || acked != 4 {
		t.Fatalf("Send = %d, %v; want all 4 acknowledged", acked, err)
	}
	var steps []int64
	for _, b := range rc.batches(t) {
		for _, m := range b.Metrics {
			if m.Timestamp < 0 {
				t.Errorf("sent a point timed %d", m.Timestamp)
			}
			steps = append(steps, m.Step)
		}
	}
	if len(steps) != 5 {
		t.Errorf("sent %d points (steps %v), want the 5 MLflow accepts", len(steps), steps)
	}
	if s.Run().Dropped != 4 {
		t.Errorf("Dropped = %d, want 4 (3 early points, 1 bad key)", s.Run().Dropped)
	}
}

// KeepStatus records the tags of a run bridge owns and leaves its status.
func TestFinishKeepStatus(t *testing.T) {
	rc := &recorder{}
	s := testSink(t, rc, Config{})
	s.created = true
	if err := s.Finish(context.Background(), tracker.EndInfo{Time: t0, KeepStatus: true, Tags: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.bodies) != 1 || !strings.Contains(string(rc.bodies[0]), `"k"`) {
		t.Fatalf("requests %q, want one: the tags", rc.bodies)
	}
}

func TestNextStepOf(t *testing.T) {
	latest := []Metric{
		{Key: "system/cpu_utilization_percentage", Step: 41},
		{Key: "system/n1/node_memory_used_megabytes", Step: 9},
		{Key: "system/n1/t2/node_memory_used_megabytes", Step: 99}, // a task of n1
		{Key: "system/n10/node_memory_used_megabytes", Step: 77},   // another node sharing the prefix's letters
		{Key: "loss", Step: 5000},
	}
	for _, tc := range []struct {
		prefix string
		want   int64
	}{{"system/", 42}, {"system/n1/", 10}, {"system/n1/t2/", 100}, {"system/n2/", 0}} {
		if got := nextStepOf(latest, tc.prefix); got != tc.want {
			t.Errorf("nextStepOf(%q) = %d, want %d", tc.prefix, got, tc.want)
		}
	}
}
