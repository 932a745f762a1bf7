package wandb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/jobkey"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
	"github.com/bridge-dev/bridge/tracker"
)

const testKey = "testtesttesttesttesttesttesttesttesttest"

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func newSink(t *testing.T, srv *wandbserver.Server, mod func(*Config)) *Sink {
	t.Helper()
	cfg := Config{BaseURL: srv.URL(), APIKey: testKey, KeySource: "test", Project: "demo", Label: "node-a", Timeout: 10 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func start(t *testing.T, s *Sink) {
	t.Helper()
	if _, err := s.Start(context.Background(), tracker.StartInfo{}); err != nil {
		t.Fatal(err)
	}
	// Pin _runtime's origin so that the lines are reproducible.
	s.start = t0
}

// createRun does what the child's wandb.init does first: UpsertBucket with
// wandb's _wandb.t in the config (withT false: a run created by someone
// else, which wandb counts as not started).
func createRun(t *testing.T, srv *wandbserver.Server, project, id string, withT bool) {
	t.Helper()
	cfg := `{"lr":{"value":0.1}}`
	if withT {
		cfg = `{"_wandb":{"value":{"t":{"1":[1,55]}}}}`
	}
	body, _ := json.Marshal(map[string]any{
		"query":         "mutation UpsertBucket($name: String, $project: String, $config: JSONString) { upsertBucket { bucket { id } } }",
		"operationName": "UpsertBucket",
		"variables":     map[string]any{"name": id, "project": project, "config": cfg},
	})
	req, _ := http.NewRequest("POST", srv.URL()+"/graphql", bytes.NewReader(body))
	req.SetBasicAuth("api", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("UpsertBucket: %s", resp.Status)
	}
}

func samples(from, n int) []metrics.Sample {
	var out []metrics.Sample
	for i := from; i < from+n; i++ {
		out = append(out, metrics.Sample{
			Seq:  int64(i),
			Time: t0.Add(time.Duration(i) * 10 * time.Second),
			Points: []metrics.Point{
				metrics.Named("container_memory_working_set_megabytes", float64(100+i)),
				metrics.Named("gpu_0_utilization_percentage", float64(i)),
			},
		})
	}
	return out
}

func events(t *testing.T, srv *wandbserver.Server, s *Sink) wandbserver.File {
	t.Helper()
	r, ok := srv.Run(srv.Entity(), "demo", s.Run().ID)
	if !ok {
		t.Fatalf("no run %s", s.Run().ID)
	}
	return r.File(s.ClientID(), wandbserver.EventsFile)
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // the variable the message must name
	}{
		{"offline", Config{Mode: ModeOffline, APIKey: "k"}, "WANDB_MODE=offline"},
		{"disabled", Config{Mode: ModeDisabled}, "WANDB_MODE=disabled"},
		{"no key", Config{}, "WANDB_API_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || s != nil {
				t.Errorf("New = %v, %v; want nil, %v", s, err, tc.want)
			}
		})
	}
	if _, err := New(Config{APIKey: "k", BaseURL: "ftp://x"}, nil); err == nil || !strings.Contains(err.Error(), `"ftp://x"`) {
		t.Errorf("bad URL: %v", err)
	}
}

func TestStartRunID(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	s := newSink(t, srv, func(c *Config) { c.Label = "" })
	env, err := s.Start(context.Background(), tracker.StartInfo{NodeID: "rank 1/node"})
	if err != nil {
		t.Fatal(err)
	}
	if len(env) != 1 || !regexp.MustCompile(`^WANDB_RUN_ID=[a-z0-9]{8}$`).MatchString(env[0]) || env[0] != "WANDB_RUN_ID="+s.Run().ID {
		t.Errorf("env %q, run id %q", env, s.Run().ID)
	}
	if s.Label() != "rank_1_node" {
		t.Errorf("label %q, want the node id made one key segment", s.Label())
	}
	if !regexp.MustCompile(`^[a-z0-9]{32}$`).MatchString(s.ClientID()) {
		t.Errorf("client id %q", s.ClientID())
	}

	given := newSink(t, srv, func(c *Config) { c.RunID = "given123" })
	env, err = given.Start(context.Background(), tracker.StartInfo{NodeID: "ignored"})
	if err != nil || len(env) != 1 || env[0] != "WANDB_RUN_ID=given123" || given.Label() != "node-a" {
		t.Errorf("env %q err %v label %q", env, err, given.Label())
	}
	// Start creates nothing.
	for _, r := range srv.Requests() {
		if r.Operation != "Viewer" {
			t.Errorf("Start sent %s %s (%s)", r.Method, r.Path, r.Operation)
		}
	}
	if len(srv.Runs()) != 0 {
		t.Errorf("Start created a run")
	}
}

func TestStartBadKeyIsPermanentWithEnv(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	s := newSink(t, srv, func(c *Config) { c.APIKey = strings.Repeat("z", 40) })
	env, err := s.Start(context.Background(), tracker.StartInfo{})
	if !errors.Is(err, tracker.ErrPermanent) || !strings.Contains(err.Error(), "API key was rejected") {
		t.Errorf("err %v", err)
	}
	if len(env) != 1 {
		t.Errorf("env %q: Start must return the run id even when the key is bad", env)
	}
}

func TestStartServerDownIsRetryableWithEnv(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	s := newSink(t, srv, nil)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	env, err := s.Start(context.Background(), tracker.StartInfo{})
	if err == nil || errors.Is(err, tracker.ErrPermanent) || len(env) != 1 {
		t.Errorf("env %q err %v", env, err)
	}
}

func TestSendWaitsForTheRun(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	s := newSink(t, srv, nil)
	start(t, s)
	ctx := context.Background()

	n, err := s.Send(ctx, samples(0, 2))
	if n != 0 || !errors.Is(err, tracker.ErrNotReady) {
		t.Fatalf("no project: %d, %v", n, err)
	}
	createRun(t, srv, "demo", "someone", true)
	if n, err = s.Send(ctx, samples(0, 2)); n != 0 || !errors.Is(err, tracker.ErrNotReady) {
		t.Fatalf("no run: %d, %v", n, err)
	}
	createRun(t, srv, "demo", s.Run().ID, false)
	if n, err = s.Send(ctx, samples(0, 2)); n != 0 || !errors.Is(err, tracker.ErrNotReady) {
		t.Fatalf("run without _wandb.t: %d, %v", n, err)
	}
	createRun(t, srv, "demo", s.Run().ID, true)
	if n, err = s.Send(ctx, samples(0, 2)); n != 2 || err != nil {
		t.Fatalf("run started: %d, %v", n, err)
	}
	if got := len(events(t, srv, s).Lines); got != 2 {
		t.Errorf("%d lines", got)
	}
}

func TestSendLinesOffsetsHeaders(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	s := newSink(t, srv, nil)
	start(t, s)
	createRun(t, srv, "demo", s.Run().ID, true)
	ctx := context.Background()
	if n, err := s.Send(ctx, samples(0, 3)); n != 3 || err != nil {
		t.Fatalf("first: %d %v", n, err)
	}
	if n, err := s.Send(ctx, samples(3, 2)); n != 2 || err != nil {
		t.Fatalf("second: %d %v", n, err)
	}
	if err := s.Finish(ctx, tracker.EndInfo{ExitCode: 1}); err != nil {
		t.Fatal(err)
	}

	f := events(t, srv, s)
	if len(f.Lines) != 5 || !f.Contiguous() || f.Overwrites != 0 || f.Resent != 0 || f.Gaps != 0 {
		t.Fatalf("file %+v", f)
	}
	for i, line := range f.Contents() {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{
			"_wandb":     true,
			"_timestamp": float64(t0.Unix() + int64(10*i)),
			"_runtime":   float64(10 * i),
			"system.container_memory_working_set_megabytes/l:node-a": float64(100 + i),
			"system.gpu_0_utilization_percentage/l:node-a":           float64(i),
		}
		if len(m) != len(want) {
			t.Errorf("line %d has keys %v", i, m)
		}
		for k, v := range want {
			if m[k] != v {
				t.Errorf("line %d: %s = %v, want %v", i, k, m[k], v)
			}
		}
	}

	var offsets []int
	for _, r := range srv.Requests() {
		if r.Operation == "UpsertBucket" {
			continue // the test's own stand-in for the child
		}
		if r.Operation != "RunResumeStatus" && r.Operation != "Viewer" && r.Operation != "file_stream" {
			t.Errorf("sink sent %s %s", r.Path, r.Operation)
		}
		if r.Header.Get("X-Wandb-Use-Async-Filestream") != "true" {
			t.Errorf("%s without X-WANDB-USE-ASYNC-FILESTREAM", r.Operation)
		}
		if r.Operation == "file_stream" {
			if r.Writer != s.ClientID() {
				t.Errorf("file_stream with client id %q, want %q", r.Writer, s.ClientID())
			}
			var body map[string]any
			if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"complete", "exitcode", "preempting", "uploaded"} {
				if _, ok := body[k]; ok {
					t.Errorf("file_stream body carries %q: %s", k, r.Body)
				}
			}
			files := body["files"].(map[string]any)
			if len(files) != 1 || files[wandbserver.EventsFile] == nil {
				t.Errorf("files %v", files)
			}
			offsets = append(offsets, int(files[wandbserver.EventsFile].(map[string]any)["offset"].(float64)))
		} else if r.Header.Get("X-Wandb-Client-Id") != s.ClientID() {
			t.Errorf("%s with X-WANDB-CLIENT-ID %q", r.Operation, r.Header.Get("X-Wandb-Client-Id"))
		}
	}
	if len(offsets) != 2 || offsets[0] != 0 || offsets[1] != 3 {
		t.Errorf("offsets %v, want [0 3]", offsets)
	}
	if r, _ := srv.Run(srv.Entity(), "demo", s.Run().ID); r.Complete || r.ExitCode != nil {
		t.Errorf("the sink finished the run: %+v", r)
	}
}

func TestResendIsIdempotent(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	s := newSink(t, srv, nil)
	start(t, s)
	createRun(t, srv, "demo", s.Run().ID, true)
	ctx := context.Background()
	if _, err := s.Send(ctx, samples(0, 2)); err != nil {
		t.Fatal(err)
	}

	// The request is lost before the server: nothing acked.
	srv.FailNext(1, 502, nil, wandbserver.IsFileStream)
	n, err := s.Send(ctx, samples(2, 2))
	if n != 0 || err == nil || errors.Is(err, tracker.ErrPermanent) {
		t.Fatalf("502: %d %v", n, err)
	}
	// The server applies the request but the answer is lost.
	srv.FailAfterHandling(1, 502, wandbserver.IsFileStream)
	if n, err = s.Send(ctx, samples(2, 2)); n != 0 || err == nil {
		t.Fatalf("lost answer: %d %v", n, err)
	}
	// The forwarder resends, with one more sample now pending.
	if n, err = s.Send(ctx, samples(2, 3)); n != 3 || err != nil {
		t.Fatalf("resend: %d %v", n, err)
	}
	// And samples already acked (an ack the spool failed to record).
	if n, err = s.Send(ctx, samples(3, 3)); n != 3 || err != nil {
		t.Fatalf("resend of acked + new: %d %v", n, err)
	}

	f := events(t, srv, s)
	if len(f.Lines) != 6 || !f.Contiguous() || f.Overwrites != 0 {
		t.Fatalf("lines %d contiguous %v overwrites %d", len(f.Lines), f.Contiguous(), f.Overwrites)
	}
	if f.Resent != 2 {
		t.Errorf("resent %d, want the 2 lines of the lost answer", f.Resent)
	}
	for i, line := range f.Contents() {
		if !strings.Contains(line, `"system.gpu_0_utilization_percentage/l:node-a":`+itoa(i)+`,`) &&
			!strings.Contains(line, `"system.gpu_0_utilization_percentage/l:node-a":`+itoa(i)+`}`) {
			t.Errorf("line %d holds another sample: %s", i, line)
		}
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestSendErrorsClassified(t *testing.T) {
	for _, tc := range []struct {
		status     int
		retryAfter string
		permanent  bool
		after      time.Duration
	}{
		{401, "", true, 0},
		{403, "", true, 0},
		{404, "", true, 0},
		{400, "", true, 0},
		{429, "7", false, 7 * time.Second},
		{503, "2", false, 2 * time.Second},
		{429, "", false, 0},
		{500, "", false, 0},
		{502, "", false, 0},
	} {
		t.Run(http.StatusText(tc.status)+tc.retryAfter, func(t *testing.T) {
			srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
			s := newSink(t, srv, nil)
			start(t, s)
			createRun(t, srv, "demo", s.Run().ID, true)
			h := http.Header{}
			if tc.retryAfter != "" {
				h.Set("Retry-After", tc.retryAfter)
			}
			srv.FailNext(1, tc.status, h, wandbserver.IsFileStream)
			n, err := s.Send(context.Background(), samples(0, 1))
			if n != 0 || err == nil {
				t.Fatalf("%d %v", n, err)
			}
			if errors.Is(err, tracker.ErrPermanent) != tc.permanent {
				t.Errorf("permanent %v, want %v: %v", errors.Is(err, tracker.ErrPermanent), tc.permanent, err)
			}
			var ra *tracker.RetryAfterError
			if got := errors.As(err, &ra); got != (tc.after > 0) || (got && ra.After != tc.after) {
				t.Errorf("retry-after %v %+v, want %v", got, ra, tc.after)
			}
			if errors.Is(err, tracker.ErrNotReady) {
				t.Errorf("classified as not ready: %v", err)
			}
		})
	}
}

func TestSendBadKeyIsPermanent(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	s := newSink(t, srv, func(c *Config) { c.APIKey = strings.Repeat("y", 40) })
	if _, err := s.Start(context.Background(), tracker.StartInfo{}); !errors.Is(err, tracker.ErrPermanent) {
		t.Fatalf("start: %v", err)
	}
	n, err := s.Send(context.Background(), samples(0, 1))
	if n != 0 || !errors.Is(err, tracker.ErrPermanent) || errors.Is(err, tracker.ErrNotReady) {
		t.Errorf("%d %v", n, err)
	}
}

func TestSendServerDownIsRetryable(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	s := newSink(t, srv, nil)
	start(t, s)
	createRun(t, srv, "demo", s.Run().ID, true)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	n, err := s.Send(context.Background(), samples(0, 1))
	if n != 0 || err == nil || errors.Is(err, tracker.ErrPermanent) || errors.Is(err, tracker.ErrNotReady) {
		t.Errorf("%d %v", n, err)
	}
}

func TestSendSplitsLargeBatches(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	s := newSink(t, srv, nil)
	s.maxBytes = 400 // about two lines
	start(t, s)
	createRun(t, srv, "demo", s.Run().ID, true)
	if n, err := s.Send(context.Background(), samples(0, 7)); n != 7 || err != nil {
		t.Fatalf("%d %v", n, err)
	}
	f := events(t, srv, s)
	if len(f.Lines) != 7 || !f.Contiguous() || f.Overwrites != 0 {
		t.Errorf("file %+v", f)
	}
	streams := 0
	for _, r := range srv.Requests() {
		if r.Operation == "file_stream" {
			streams++
			if len(r.Body) > 2*s.maxBytes {
				t.Errorf("request of %d bytes", len(r.Body))
			}
		}
	}
	if streams < 3 {
		t.Errorf("%d file_stream requests for 7 lines of ~200 bytes under a 400-byte cap", streams)
	}
}

func TestSendSkipsNonFinite(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	s := newSink(t, srv, nil)
	start(t, s)
	createRun(t, srv, "demo", s.Run().ID, true)
	in := []metrics.Sample{
		{Seq: 0, Time: t0, Points: []metrics.Point{metrics.Named("a", math.NaN())}},
		{Seq: 1, Time: t0, Points: []metrics.Point{metrics.Named("a", math.Inf(1)), metrics.Named("b", 2)}},
	}
	if n, err := s.Send(context.Background(), in); n != 2 || err != nil {
		t.Fatalf("%d %v", n, err)
	}
	f := events(t, srv, s)
	if len(f.Lines) != 1 || strings.Contains(f.Lines[0].Content, "system.a/") || !strings.Contains(f.Lines[0].Content, `"system.b/l:node-a":2`) {
		t.Errorf("lines %+v", f.Lines)
	}
}

func TestKey(t *testing.T) {
	if got := Key("container_cpu_utilization_percentage", "node-a"); got != "system.container_cpu_utilization_percentage/l:node-a" {
		t.Errorf("Key = %q", got)
	}
	for in, want := range map[string]string{"host-1.example": "host-1.example", "a/b c": "a_b_c", "": "bridge"} {
		if got := sanitizeLabel(in); got != want {
			t.Errorf("sanitizeLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

// The exit verdict goes on the run as tags and a section of the notes,
// next to the child's own tags and notes; config and summary stay the
// child's, and a second Finish replaces bridge's part instead of adding one.
func TestFinishRecordsVerdict(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	s := newSink(t, srv, nil)
	start(t, s)
	ctx := context.Background()
	createRun(t, srv, "demo", s.Run().ID, true)
	body, _ := json.Marshal(map[string]any{
		"query":         "mutation UpsertBucket($name: String, $project: String, $tags: [String!], $notes: String) { upsertBucket { bucket { id } } }",
		"operationName": "UpsertBucket",
		"variables":     map[string]any{"name": s.Run().ID, "project": "demo", "tags": []string{"baseline"}, "notes": "child's notes"},
	})
	req, _ := http.NewRequest("POST", srv.URL()+"/graphql", bytes.NewReader(body))
	req.SetBasicAuth("api", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n, err := s.Send(ctx, samples(0, 1)); n != 1 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	before, _ := srv.FindRun(s.Run().ID)
	end := tracker.EndInfo{ExitCode: 137, Signal: 9, Tags: map[string]string{
		"bridge.exit_code": "137", "bridge.exit_reason": "oom_killed", "bridge.exit_evidence": "memory.events oom_kill +1",
	}}
	for range 2 {
		if err := s.Finish(ctx, end); err != nil {
			t.Fatal(err)
		}
	}
	run, _ := srv.FindRun(s.Run().ID)
	if fmt.Sprint(run.Tags) != "[baseline bridge-exit-137 bridge-oom_killed]" {
		t.Errorf("tags %q", run.Tags)
	}
	want := "child's notes\n\n---\nbridge (end of job):\nbridge.exit_code: 137\nbridge.exit_reason: oom_killed\nbridge.exit_evidence: memory.events oom_kill +1\n"
	if run.Notes != want {
		t.Errorf("notes %q, want %q", run.Notes, want)
	}
	if fmt.Sprint(run.Config) != fmt.Sprint(before.Config) || fmt.Sprint(run.Summary()) != fmt.Sprint(before.Summary()) || run.Complete {
		t.Errorf("bridge changed the child's record: config %v -> %v, summary %v -> %v, complete %v",
			before.Config, run.Config, before.Summary(), run.Summary(), run.Complete)
	}
}

// The job's figures go into the run's summary, a key each, beside the
// child's own keys; a figure outside its range is not written; a job's
// node keeps its own in its node's run.
func TestFinishRecordsFigures(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	ctx := context.Background()
	s := newSink(t, srv, nil)
	start(t, s)
	createRun(t, srv, "demo", s.Run().ID, true)
	body, _ := json.Marshal(map[string]any{
		"query":         "mutation UpsertBucket($name: String, $project: String, $summaryMetrics: JSONString) { upsertBucket { bucket { id } } }",
		"operationName": "UpsertBucket",
		"variables":     map[string]any{"name": s.Run().ID, "project": "demo", "summaryMetrics": `{"loss":0.25}`},
	})
	req, _ := http.NewRequest("POST", srv.URL()+"/graphql", bytes.NewReader(body))
	req.SetBasicAuth("api", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ws := &metrics.Desc{Name: "container_memory_peak_working_set_megabytes", Unit: metrics.UnitMegabytes}
	cpu := &metrics.Desc{Name: "container_cpu_seconds", Unit: metrics.UnitSeconds}
	end := tracker.EndInfo{Tags: map[string]string{"bridge.exit_code": "0"},
		Figures: []metrics.Point{metrics.At(ws, 512.5), metrics.At(cpu, 1e306)}}
	if err := s.Finish(ctx, end); err != nil {
		t.Fatal(err)
	}
	run, _ := srv.FindRun(s.Run().ID)
	if got := fmt.Sprint(run.Summary()); got != "map[bridge/container_memory_peak_working_set_megabytes:512.5 loss:0.25]" {
		t.Errorf("summary %s; want the child's loss and the figure in range, no bridge section", got)
	}

	node := newSink(t, srv, func(c *Config) { c.RunID, c.Shared, c.Label = "job-1", true, "node-0" })
	start(t, node)
	createRun(t, srv, "demo", "job-1", true)
	if err := node.Finish(ctx, end); err != nil {
		t.Fatal(err)
	}
	run, _ = srv.FindRun(node.cfg.NodeRun)
	if v := run.Summary()["bridge/container_memory_peak_working_set_megabytes"]; v != 512.5 {
		t.Errorf("the node's figure in its run's summary: %v (summary %v)", v, run.Summary())
	}
	if job, _ := srv.FindRun("job-1"); len(job.Summary()) != 1 || job.Summary()["bridge"] == nil {
		t.Errorf("the job's run's summary %v, want only the job's records", job.Summary())
	}
}

// A run the child never created gets nothing, and Finish does not fail.
func TestFinishWithoutRun(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	s := newSink(t, srv, nil)
	start(t, s)
	if err := s.Finish(context.Background(), tracker.EndInfo{ExitCode: 1, Tags: map[string]string{"bridge.exit_code": "1"}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := srv.FindRun(s.Run().ID); ok {
		t.Error("Finish created the run")
	}
}

// A job's W&B run id is a function of its key and generation: the same on
// every node, different for every key and every generation of one key,
// and one wandb accepts (validate_run_id: none of : ; , # ? / ' nor
// spaces, and at most 64 characters). Keys that differ only in characters
// the id cannot hold ("a:b", "a/b", "a-b") or after the 48 it shows keep
// apart.
func TestRunIDFor(t *testing.T) {
	keys := []string{"slurm:alps:4242.0", "slurm:alps:4242.1", "jobset:llm:9a8b", "torchrun:x/y@z", "torchrun:x:y@z", "torchrun:x-y@z",
		"torchrun:a_b", "torchrun:a_b--0123456789", strings.Repeat("k", 200), strings.Repeat("k", 199) + "j", "a", "a="}
	gens := []string{"", "1764900000", "1764900001", "17649000001"}
	seen := map[string]string{}
	for _, k := range keys {
		for _, g := range gens {
			id := RunIDFor(k, g)
			if id != RunIDFor(k, g) || len(id) > 64 || strings.ContainsAny(id, ":;,#?/' ") {
				t.Errorf("RunIDFor(%q, %q) = %q", k, g, id)
			}
			if other, dup := seen[id]; dup {
				t.Errorf("%s and %q %q share run id %q", other, k, g, id)
			}
			seen[id] = fmt.Sprintf("%q %q", k, g)
		}
	}
	if got := RunIDFor("slurm:alps:4242.0", "1764900000"); !strings.HasPrefix(got, "slurm-alps-4242.0-") {
		t.Errorf("RunIDFor keeps the key readable: %q", got)
	}
	// A key without a generation keeps the id bridge gave it before ids
	// carried the generation: such a job's later attempts find its run.
	if got := RunIDFor("slurm:alps:4242.0", ""); got != "slurm-alps-4242.0-584def97b3" {
		t.Errorf("RunIDFor without a generation = %q, want slurm-alps-4242.0-584def97b3", got)
	}
	// Ids as bridge has always made them: byte by byte, so a non-ASCII
	// rune gives one '-' a byte, and cut to 48 before the hash.
	for _, tc := range []struct{ key, gen, want string }{
		{"slurm:alps:4242.0", "1764900000", "slurm-alps-4242.0-94c961518c"},
		{"torchrun:héllo wörld/x?y#z", "7", "torchrun-h--llo-w--rld-x-y-z-b63f3b62ce"},
		{"k8s:ns/job-name_with.dots:abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", "", "k8s-ns-job-name_with.dots-abcdefghijklmnopqrstuv-0527580f5b"},
		{"a\x00b\xffc日本", "g", "a-b-c-------c8638eaffe"},
	} {
		if got := RunIDFor(tc.key, tc.gen); got != tc.want {
			t.Errorf("RunIDFor(%q, %q) = %q, want %q", tc.key, tc.gen, got, tc.want)
		}
	}
}

// A shared run: Start hands the child wandb's shared-mode settings, the
// job's group, the primary's on node 0 only.
func TestStartSharedEnv(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	cases := []struct {
		primary, known bool
		want           string
	}{
		{true, true, "WANDB_RUN_ID=job-1 WANDB_MODE=shared WANDB__LABEL=node-a WANDB_RUN_GROUP=job-1 WANDB__PRIMARY=true"},
		{false, true, "WANDB_RUN_ID=job-1 WANDB_MODE=shared WANDB__LABEL=node-a WANDB_RUN_GROUP=job-1 WANDB__PRIMARY=false WANDB__UPDATE_FINISH_STATE=false"},
		{false, false, "WANDB_RUN_ID=job-1 WANDB_MODE=shared WANDB__LABEL=node-a WANDB_RUN_GROUP=job-1"},
	}
	for _, c := range cases {
		s := newSink(t, srv, func(cfg *Config) {
			cfg.RunID, cfg.Shared, cfg.Primary, cfg.PrimaryKnown = "job-1", true, c.primary, c.known
		})
		env, err := s.Start(context.Background(), tracker.StartInfo{})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(env, " "); got != c.want {
			t.Errorf("primary %v known %v: env %q, want %q", c.primary, c.known, got, c.want)
		}
	}
}

// The W&B sink treats an untrusted certificate as MLflow's does: permanent
// at once, saying which variables set what is trusted.
func TestUntrustedCertificateIsPermanent(t *testing.T) {
	ts := httptest.NewTLSServer(http.NotFoundHandler())
	defer ts.Close()
	s, err := New(Config{BaseURL: ts.URL, APIKey: testKey, KeySource: "test", Project: "demo", Timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Start(context.Background(), tracker.StartInfo{})
	if !errors.Is(err, tracker.ErrPermanent) || !strings.Contains(err.Error(), "SSL_CERT_FILE") {
		t.Fatalf("Start = %v; want a permanent error naming SSL_CERT_FILE", err)
	}
}

// The run id bridge derives from a job key keeps the characters a key
// segment may hold as it is (jobkey.SegmentRune), byte by byte.
func TestRunIDBytesAreASegment(t *testing.T) {
	for c := range 256 {
		if runIDByte(byte(c)) != jobkey.SegmentRune(rune(c)) {
			t.Errorf("byte %#x: run id %v, key segment %v", c, runIDByte(byte(c)), jobkey.SegmentRune(rune(c)))
		}
	}
}
