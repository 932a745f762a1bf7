package jobrun

// The job's report in a W&B shared run's summary: a run store whose status
// is not bridge's (tracker.RunStore, not tracker.RunOwner), against the
// W&B mock.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/wandb"
)

const wbKey = "testtesttesttesttesttesttesttesttesttest"

// wandbNode is one node's W&B sink of the shared run job-1, as
// pipeline.BuildSinks wraps it.
func wandbNode(t *testing.T, srv *wandbserver.Server, label string) tracker.Sink {
	t.Helper()
	s, err := wandb.New(wandb.Config{BaseURL: srv.URL(), APIKey: wbKey, KeySource: "test", Project: "demo", Label: label,
		RunID: "job-1", Shared: true, Timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := Wrap(s, NodeOf(&tracker.Job{Node: label}), quiet(t))
	if _, err := w.Start(context.Background(), tracker.StartInfo{}); err != nil {
		t.Fatal(err)
	}
	return w
}

// createWandbRun does what the child's wandb.init does first: UpsertBucket
// with wandb's _wandb.t in the config.
func createWandbRun(t *testing.T, srv *wandbserver.Server, project, id string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"query":         "mutation UpsertBucket($name: String, $project: String, $config: JSONString) { upsertBucket { bucket { id } } }",
		"operationName": "UpsertBucket",
		"variables":     map[string]any{"name": id, "project": project, "config": `{"_wandb":{"value":{"t":{"1":[1,55]}}}}`},
	})
	req, _ := http.NewRequest("POST", srv.URL()+"/graphql", bytes.NewReader(body))
	req.SetBasicAuth("api", wbKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("UpsertBucket: %s", resp.Status)
	}
}

// childSummary streams a summary line as the child's wandb (the primary
// writer) does.
func childSummary(t *testing.T, srv *wandbserver.Server, project, run, line string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"files": map[string]any{wandbserver.SummaryFile: map[string]any{"offset": 0, "content": []string{line}}}})
	req, _ := http.NewRequest("POST", fmt.Sprintf("%s/files/%s/%s/%s/file_stream", srv.URL(), srv.Entity(), project, run), bytes.NewReader(body))
	req.SetBasicAuth("api", wbKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("file_stream: %s", resp.Status)
	}
}

// A job's shared run gets the job's report in its summary, under
// "bridge": every node's end, the first failure (never replaced by a
// later one), the report's lines; the child's own summary is kept.
func TestJobReportInSummary(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: wbKey})
	ctx := context.Background()
	nodes := make([]tracker.Sink, 3)
	for i := range nodes {
		nodes[i] = wandbNode(t, srv, fmt.Sprintf("node-%d", i))
	}
	createWandbRun(t, srv, "demo", "job-1")
	childSummary(t, srv, "demo", "job-1", `{"loss": 0.5}`)
	t1 := time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC)
	end := func(at time.Duration, code, sig int, status, reason string) tracker.EndInfo {
		return tracker.EndInfo{ExitCode: code, Signal: sig, Status: status, Time: t1.Add(at),
			Tags: map[string]string{"bridge.exit_code": fmt.Sprint(code), "bridge.exit_reason": reason, "bridge.exit_reason_detail": reason + "!"}}
	}
	for _, f := range []struct {
		node int
		end  tracker.EndInfo
	}{
		{1, end(0, 137, 9, tracker.StatusFailed, "cgroup_oom_kill")},
		{0, end(time.Second, 143, 15, tracker.StatusKilled, "killed_by_signal")},
		{2, end(-time.Minute, 1, 0, tracker.StatusFailed, "app_error")},  // earlier, by its clock: it takes the place
		{2, end(time.Minute, 1, 0, tracker.StatusFailed, "app_error")},   // a later end of node-2 does not
		{2, end(2*time.Minute, 0, 0, tracker.StatusFinished, "success")}, // nor its clean restart
	} {
		if err := nodes[f.node].Finish(ctx, f.end); err != nil {
			t.Fatal(err)
		}
	}
	run, _ := srv.FindRun("job-1")
	sum := run.Summary()
	b, _ := sum["bridge"].(map[string]any)
	if sum["loss"] != 0.5 || b == nil {
		t.Fatalf("summary %v: want the child's loss kept and bridge's report", sum)
	}
	if ff, _ := b["first_failure"].(string); !strings.HasPrefix(ff, "node-2: app_error at 2026-12-06T17:59:00.000Z") {
		t.Errorf("first_failure %q, want node-2's earlier failure kept", ff)
	}
	nodesSeen, _ := b["nodes"].(map[string]any)
	n1, _ := nodesSeen["node-1"].(map[string]any)
	if len(nodesSeen) != 3 || n1["status"] != tracker.StatusFailed || n1["exit_reason"] != "cgroup_oom_kill" {
		t.Errorf("nodes %v", nodesSeen)
	}
	rep, _ := b["report"].(string)
	if lines := strings.Split(strings.TrimSpace(rep), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[0], "Status FAILED; first failure: node-2") {
		t.Errorf("report:\n%s", rep)
	}
	// The child's summary line that comes after is the summary (the
	// child's own); bridge's next end writes its report into it again.
	childSummary(t, srv, "demo", "job-1", `{"loss": 0.25}`)
	if err := nodes[0].Finish(ctx, end(2*time.Second, 143, 15, tracker.StatusKilled, "killed_by_signal")); err != nil {
		t.Fatal(err)
	}
	run, _ = srv.FindRun("job-1")
	if sum := run.Summary(); sum["loss"] != 0.25 || sum["bridge"] == nil {
		t.Errorf("summary after the child's next line and a node's end: %v", sum)
	}
}

// notesScript reads (and with notes, first writes) a run's notes with the
// real wandb client's public API, as a person would; it returns what the
// client reads. It skips the test, saying why, without BRIDGE_TEST_PYTHON.
func notesScript(t *testing.T, srv *wandbserver.Server, path string, notes ...string) string {
	t.Helper()
	py := os.Getenv("BRIDGE_TEST_PYTHON")
	if py == "" {
		t.Skip("SKIPPED: BRIDGE_TEST_PYTHON is unset: set it to a python with wandb==0.31.0 (scripts/test.sh creates .venv and sets it) to write a run's notes with the real client")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join("..", "mocks", "wandb", "wandbserver", "testdata", "set_notes.py"), path}, notes...)...)
	dir := t.TempDir()
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, srv.ClientEnv(dir, wbKey)...)
	out, err := cmd.CombinedOutput()
	_, got, ok := strings.Cut(string(out), "notes:\n")
	if err != nil || !ok {
		t.Fatalf("set_notes.py: %v\n%s", err, out)
	}
	return got
}

// The run's note in a W&B run: a person writes the run's notes with the
// real wandb client (wandb.Api: run.notes, run.update(), whose GraphQL the
// mock speaks); bridge's tick on the run (a single run's W&B sink, wrapped
// as pipeline.BuildSinks wraps it) reads the step the child's wandb
// reached (the summary's _step) for the energy per step, and appends its
// section to the notes once; the real client reads back the person's
// notes, then bridge's section. The end's tick replaces the section.
func TestWandbNoteKeepsAPersonsNote(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: wbKey})
	createWandbRun(t, srv, "demo", "run-1")
	childSummary(t, srv, "demo", "run-1", `{"_step": 40, "loss": 0.1}`)
	const person = "Try the *bigger* batch | next: lr 3e-4"
	path := srv.Entity() + "/demo/run-1"
	if got := notesScript(t, srv, path, person); got != person {
		t.Fatalf("the real client reads back %q, want %q", got, person)
	}
	s, err := wandb.New(wandb.Config{BaseURL: srv.URL(), APIKey: wbKey, KeySource: "test", Project: "demo", RunID: "run-1",
		Timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, ok := Wrap(s, nil, quiet(t)).(*Sink)
	if !ok || !w.TicksLive() {
		t.Fatal("a W&B run's sink is not wrapped for its ticks")
	}
	if _, err := w.Start(context.Background(), tracker.StartInfo{}); err != nil {
		t.Fatal(err)
	}
	live := Live{Tags: map[string]string{"bridge.energy_node_cpu_joules": "400.0", "bridge.peak_working_set_megabytes": "1000"}, Note: true}
	p, err := w.Tick(context.Background(), "run-1", live)
	if err != nil || p.Steps != 40 || p.EnergyPerStepJoules != 10 {
		t.Fatalf("tick: %+v, %v; want 400 J over 40 steps", p, err)
	}
	check := func(when, status string) {
		got := notesScript(t, srv, path)
		if !strings.HasPrefix(got, person+"\n\n"+noteBegin) || strings.Count(got, noteBegin) != 1 || !strings.HasSuffix(got, noteEnd) ||
			!strings.Contains(got, "**Status:** "+status) || !strings.Contains(got, "400 J over 40 steps, 10 J a step") {
			t.Errorf("%s: the notes the real client reads:\n%s", when, got)
		}
	}
	check("during the run", "RUNNING")
	live.End, live.Status = true, tracker.StatusFinished
	if _, err := w.Tick(context.Background(), "run-1", live); err != nil {
		t.Fatal(err)
	}
	check("at the end", "FINISHED")
	if u := srv.UnknownOperations(); len(u) > 0 {
		t.Errorf("GraphQL operations the mock lacks: %q", u)
	}
}
