package wandbserver

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var script, _ = filepath.Abs(filepath.Join("testdata", "log_run.py"))

// pythonOrSkip returns BRIDGE_TEST_PYTHON, a python with wandb installed.
func pythonOrSkip(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(script); err != nil {
		t.Fatal(err)
	}
	t.Helper()
	py := os.Getenv("BRIDGE_TEST_PYTHON")
	if py == "" {
		t.Skip("BRIDGE_TEST_PYTHON is unset: set it to a python with wandb==0.31.0 to check the mock against the real client; scripts/test.sh, the README's test command, creates .venv and sets it")
	}
	return py
}

// TestRealClient is the mock's faithfulness check: the real wandb client
// runs wandb.init, N wandb.log calls and wandb.finish against it and must
// finish cleanly (exit 0, no error or warning in its output or its debug
// logs), and the mock must hold exactly what was logged.
func TestRealClient(t *testing.T) {
	py := pythonOrSkip(t)
	srv := StartTest(t, Options{APIKey: testKey})
	dir := t.TempDir()
	const steps = 7
	const project, runID = "faithful", "fa17hfu1"

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script, project, runID, strconv.Itoa(steps))
	cmd.Dir = dir
	// The client's system monitor samples on its own clock: the script keeps
	// the run open until the mock holds a system-metrics line (the gate file
	// appears), so that a loaded machine cannot end the run before the first
	// sample.
	gate := filepath.Join(dir, "events-seen")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "BRIDGE_TEST_EVENTS_GATE=" + gate}, srv.ClientEnv(dir, "")...)
	go func() {
		for ctx.Err() == nil {
			if run, ok := srv.Run(srv.Entity(), project, runID); ok && len(run.File(Primary, EventsFile).Lines) > 0 {
				os.WriteFile(gate, nil, 0o600)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("client stderr:\n%s", stderr.String())
	if err != nil {
		t.Fatalf("wandb client failed: %v\nstdout:\n%s", err, stdout.String())
	}
	problems, err := ClientProblems(dir, stderr.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("client reported a problem: %s", p)
	}
	if u := srv.UnknownOperations(); len(u) > 0 {
		t.Errorf("client used GraphQL operations the mock lacks: %q", u)
	}
	for _, r := range srv.Requests() {
		if r.Status >= 400 && r.Operation != "otel" {
			t.Errorf("request %s %s (%s) got %d", r.Method, r.Path, r.Operation, r.Status)
		}
	}

	run, ok := srv.Run(srv.Entity(), project, runID)
	if !ok {
		t.Fatalf("mock has no run %s/%s/%s; runs: %+v", srv.Entity(), project, runID, srv.Runs())
	}
	hist := run.File(Primary, HistoryFile)
	if len(hist.Lines) != steps || !hist.Contiguous() || hist.Overwrites != 0 {
		t.Fatalf("history: %d lines (want %d), contiguous %v, overwrites %d", len(hist.Lines), steps, hist.Contiguous(), hist.Overwrites)
	}
	for i, line := range hist.Contents() {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("history line %d: %v: %s", i, err, line)
		}
		if m["loss"] != 1.0/float64(i+1) || m["step"] != float64(i) || m["_step"] != float64(i) {
			t.Errorf("history line %d = %s, want loss %v step %d", i, line, 1.0/float64(i+1), i)
		}
	}
	ev := run.File(Primary, EventsFile)
	if len(ev.Lines) == 0 || !ev.Contiguous() {
		t.Errorf("events: %d lines, contiguous %v", len(ev.Lines), ev.Contiguous())
	}
	for _, line := range ev.Contents() {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["_wandb"] != true || !hasSystemKey(m) {
			t.Errorf("events line is not a system-metrics line: %s", line)
		}
	}
	if s := run.Summary(); s["loss"] != 1.0/steps {
		t.Errorf("summary loss %v, want %v", s["loss"], 1.0/steps)
	}
	if !run.Complete || run.ExitCode == nil || *run.ExitCode != 0 || run.FinishedBy == nil || *run.FinishedBy != Primary {
		t.Errorf("finish: complete %v exit %v by %v", run.Complete, run.ExitCode, run.FinishedBy)
	}
	if len(run.Tags) != 1 || run.Tags[0] != "real-client" || run.Notes != "notes from the real client" {
		t.Errorf("tags %q, notes %q: want the client's", run.Tags, run.Notes)
	}
	if run.Config["lr"] == nil {
		t.Errorf("config lacks lr: %v", run.Config)
	}
	if len(run.Uploads) == 0 {
		t.Errorf("no file uploads recorded (CreateRunFiles %v)", run.RunFiles)
	}
}

func hasSystemKey(m map[string]any) bool {
	for k := range m {
		if strings.HasPrefix(k, "system.") {
			return true
		}
	}
	return false
}

// TestRealClientBadKey: the mock rejects a wrong key as W&B does, and the
// real client fails on it.
func TestRealClientBadKey(t *testing.T) {
	py := pythonOrSkip(t)
	srv := StartTest(t, Options{APIKey: testKey})
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script, "p", "badkey01", "1")
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, srv.ClientEnv(dir, strings.Repeat("x", 40))...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("client succeeded with a wrong key:\n%s", out)
	}
	if !strings.Contains(string(out), "not logged in") {
		t.Errorf("client output does not carry the server's message:\n%s", out)
	}
	if len(srv.Runs()) != 0 {
		t.Errorf("a run was created with a wrong key")
	}
}

// TestRealClientNotes: the real client's public API (wandb.Api) writes a
// run's notes as a person does (run.notes, run.update(): UpsertBucket by
// the run's storage id, then its summary) and reads them back (query Run);
// the mock holds them, with nothing it does not speak and no error.
func TestRealClientNotes(t *testing.T) {
	py := pythonOrSkip(t)
	srv := StartTest(t, Options{APIKey: testKey})
	srv.CreateStartedRun("", "notes", "n0tes001")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const notes = "a person's *notes*\nsecond line"
	notesPy, _ := filepath.Abs(filepath.Join("testdata", "set_notes.py"))
	cmd := exec.CommandContext(ctx, py, notesPy, srv.Entity()+"/notes/n0tes001", notes)
	dir := t.TempDir()
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, srv.ClientEnv(dir, "")...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "notes:\n"+notes) {
		t.Fatalf("set_notes.py: %v\n%s", err, out)
	}
	if run, ok := srv.Run(srv.Entity(), "notes", "n0tes001"); !ok || run.Notes != notes {
		t.Errorf("the mock holds notes %q, want %q", run.Notes, notes)
	}
	if u := srv.UnknownOperations(); len(u) > 0 {
		t.Errorf("client used GraphQL operations the mock lacks: %q", u)
	}
	for _, r := range srv.Requests() {
		if r.Status >= 400 {
			t.Errorf("request %s %s (%s) got %d", r.Method, r.Path, r.Operation, r.Status)
		}
	}
}

// TestRealClientGroup: a run the real client creates in a group
// (WANDB_RUN_GROUP, WANDB_JOB_TYPE: wandb.init's group and job_type) has
// them in the mock, sent as wandb-core's UpsertBucket sends them
// (groupName and jobType, core/api/graphql/mutation_run.graphql), and the
// public API reads them back (query Run).
func TestRealClientGroup(t *testing.T) {
	py := pythonOrSkip(t)
	srv := StartTest(t, Options{APIKey: testKey})
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const project, runID, group = "grouped", "gr0up001", "job-1"
	cmd := exec.CommandContext(ctx, py, script, project, runID, "1")
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "WANDB_RUN_GROUP=" + group, "WANDB_JOB_TYPE=node"}, srv.ClientEnv(dir, "")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("wandb client failed: %v\n%s\n%s", err, out, stderr.String())
	}
	problems, err := ClientProblems(dir, stderr.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("client reported a problem: %s", p)
	}
	run, ok := srv.Run(srv.Entity(), project, runID)
	if !ok || run.Group != group || run.JobType != "node" {
		t.Fatalf("run %s: group %q job type %q; want %s and node", runID, run.Group, run.JobType, group)
	}
	sent := false
	for _, r := range srv.Requests() {
		var q struct {
			Query     string         `json:"query"`
			Variables map[string]any `json:"variables"`
		}
		if r.Operation != "UpsertBucket" || json.Unmarshal([]byte(r.Body), &q) != nil || q.Variables["groupName"] == nil {
			continue
		}
		sent = true
		flat := strings.Join(strings.Fields(q.Query), "")
		if q.Variables["groupName"] != group || q.Variables["jobType"] != "node" ||
			!strings.Contains(flat, "groupName:$groupName") || !strings.Contains(flat, "jobType:$jobType") {
			t.Errorf("the client's UpsertBucket: variables %v\n%s", q.Variables, q.Query)
		}
	}
	if !sent {
		t.Error("the client sent no UpsertBucket with groupName")
	}
	read := exec.CommandContext(ctx, py, "-c", "import sys, wandb; r = wandb.Api().run(sys.argv[1]); print(r.group, r.job_type)",
		srv.Entity()+"/"+project+"/"+runID)
	read.Env = append([]string{"PATH=" + os.Getenv("PATH")}, srv.ClientEnv(dir, "")...)
	if out, err := read.CombinedOutput(); err != nil || !strings.HasSuffix(string(out), group+" node\n") {
		t.Errorf("the public API reads: %v\n%s", err, out)
	}
	if u := srv.UnknownOperations(); len(u) > 0 {
		t.Errorf("client used GraphQL operations the mock lacks: %q", u)
	}
}
