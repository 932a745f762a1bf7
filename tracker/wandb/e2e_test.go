package wandb

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
	"github.com/bridge-dev/bridge/tracker"
)

// TestWithRealClient plays bridge around a real training process: the sink's
// Start gives WANDB_RUN_ID to a Python child that runs the real wandb
// client, and the sink sends while the child logs, through an outage of the
// server (stopped, then restarted on the same port). The mock must hold the
// child's history and system metrics and bridge's labelled lines, each
// writer's offsets monotonic, no line overwritten, nothing lost or doubled,
// and the run finished by the child with its exit code.
func TestWithRealClient(t *testing.T) {
	py, script := realClient(t, "run the W&B end-to-end test")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	s := newSink(t, srv, nil)
	env, err := s.Start(ctx, tracker.StartInfo{Command: []string{"python", "train.py"}})
	if err != nil {
		t.Fatal(err)
	}
	var pending []metrics.Sample
	seq := 0
	sample := func() {
		pending = append(pending, metrics.Sample{Seq: int64(seq), Time: time.Now(), Points: []metrics.Point{
			metrics.Named("container_memory_working_set_megabytes", float64(1000+seq)),
			metrics.Named("node_memory_used_megabytes", float64(seq)),
		}})
		seq++
	}
	// send is one forwarder attempt: acked samples leave the queue.
	send := func() error {
		n, err := s.Send(ctx, pending)
		pending = pending[n:]
		return err
	}

	sample()
	if err := send(); !errors.Is(err, tracker.ErrNotReady) {
		t.Fatalf("before the child runs: %v, want ErrNotReady", err)
	}

	dir := t.TempDir()
	const exitCode = 3
	cmd := exec.CommandContext(ctx, py, script, "demo", fmt.Sprint(exitCode))
	cmd.Dir = dir
	cmd.Env = append(append([]string{"PATH=" + os.Getenv("PATH")}, srv.ClientEnv(dir, "")...), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("child stderr:\n%s", stderr.String())
		}
	}()
	stdout := bufio.NewScanner(stdoutPipe)
	expect := func(want string) {
		t.Helper()
		if !stdout.Scan() {
			_ = cmd.Wait()
			t.Fatalf("child ended before printing %q: %v\n%s", want, stdout.Err(), stderr.String())
		}
		if got := stdout.Text(); got != want {
			t.Fatalf("child printed %q, want %q", got, want)
		}
	}
	steps := 0
	step := func() {
		t.Helper()
		if _, err := io.WriteString(stdin, "step\n"); err != nil {
			t.Fatal(err)
		}
		expect(fmt.Sprintf("logged %d", steps))
		steps++
	}

	expect("ready " + s.Run().ID)
	for range 3 {
		step()
		sample()
		if err := send(); err != nil {
			t.Fatalf("send while the child logs: %v", err)
		}
	}

	// Outage: the child keeps logging, bridge's sends fail retryably.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	before := attempts(t, dir)
	for range 3 {
		step()
		sample()
		err := send()
		if err == nil || errors.Is(err, tracker.ErrPermanent) || errors.Is(err, tracker.ErrNotReady) {
			t.Fatalf("send during the outage: %v, want a retryable error", err)
		}
	}
	if len(pending) != 3 {
		t.Fatalf("%d samples pending after the outage, want 3", len(pending))
	}
	// Wait until the child's wandb-core has tried to send during the
	// outage (it logs each attempt), so that the outage hits both writers.
	if err := wandbserver.Wait(ctx, func() bool { return attempts(t, dir) > before }); err != nil {
		t.Fatalf("the child never tried to send during the outage: %v", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := send(); err != nil || len(pending) != 0 {
		t.Fatalf("resend after the restart: %v, %d left", err, len(pending))
	}
	for range 3 {
		step()
		sample()
		if err := send(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Finish(ctx, tracker.EndInfo{ExitCode: exitCode}); err != nil {
		t.Fatal(err)
	}
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitCode {
		t.Fatalf("child: %v, want exit status %d", err, exitCode)
	}

	// The child is expected to complain about the outage, not about the
	// server's answers (the mock's own faithfulness test checks those).
	if problems, err := wandbserver.ClientProblems(dir, stderr.Bytes()); err == nil {
		t.Logf("the child reported %d error/warning lines", len(problems))
		for _, p := range problems {
			if !strings.Contains(p, "connection refused") && !strings.Contains(p, "HTTP error") && !strings.Contains(p, "retry") {
				t.Logf("  %s", p)
			}
		}
	}

	run, ok := srv.Run(srv.Entity(), "demo", s.Run().ID)
	if !ok {
		t.Fatalf("no run %s; runs %+v", s.Run().ID, srv.Runs())
	}
	if !run.Complete || run.ExitCode == nil || *run.ExitCode != exitCode || run.FinishedBy == nil || *run.FinishedBy != wandbserver.Primary {
		t.Errorf("finish: complete %v exit %v by %v", run.Complete, run.ExitCode, run.FinishedBy)
	}
	if len(run.Writers) != 2 {
		t.Errorf("writers %d, want the child and bridge", len(run.Writers))
	}

	// The child's history: every step once, in order.
	hist := run.File(wandbserver.Primary, wandbserver.HistoryFile)
	if len(hist.Lines) != steps || !hist.Contiguous() || hist.Overwrites != 0 {
		t.Errorf("child history: %d lines (want %d), contiguous %v, overwrites %d", len(hist.Lines), steps, hist.Contiguous(), hist.Overwrites)
	}
	for i, line := range hist.Contents() {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["loss"] != 1.0/float64(i+1) {
			t.Errorf("history line %d: %s", i, line)
		}
	}
	// The child's own system metrics, unlabelled, untouched by bridge.
	childEv := run.File(wandbserver.Primary, wandbserver.EventsFile)
	if len(childEv.Lines) == 0 || !childEv.Contiguous() || childEv.Overwrites != 0 {
		t.Errorf("child events: %d lines, contiguous %v, overwrites %d", len(childEv.Lines), childEv.Contiguous(), childEv.Overwrites)
	}
	for _, line := range childEv.Contents() {
		if strings.Contains(line, "/l:") {
			t.Errorf("a labelled key in the child's events: %s", line)
		}
	}
	// Bridge's lines: every sample exactly once, in order, labelled.
	ours := run.File(s.ClientID(), wandbserver.EventsFile)
	if len(ours.Lines) != seq || !ours.Contiguous() || ours.Overwrites != 0 || ours.Resent != 0 {
		t.Errorf("bridge events: %d lines (want %d), contiguous %v, overwrites %d, resent %d",
			len(ours.Lines), seq, ours.Contiguous(), ours.Overwrites, ours.Resent)
	}
	labelled := regexp.MustCompile(`^system\.[a-z0-9_]+/l:node-a$`)
	for i, line := range ours.Contents() {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if m["system.node_memory_used_megabytes/l:node-a"] != float64(i) {
			t.Errorf("bridge line %d holds another sample: %s", i, line)
		}
		for k := range m {
			if k != "_wandb" && k != "_timestamp" && k != "_runtime" && !labelled.MatchString(k) {
				t.Errorf("bridge line %d: key %q", i, k)
			}
		}
	}

	// Offsets per writer never go back; bridge's never repeat (its failed
	// requests never reached the server) and it never finishes the run.
	last := map[string]int{}
	for _, r := range srv.Requests() {
		if r.Operation != "file_stream" || r.Status != 200 {
			continue
		}
		var body struct {
			Files map[string]struct {
				Offset int `json:"offset"`
			} `json:"files"`
			Complete *bool `json:"complete"`
			ExitCode *int  `json:"exitcode"`
		}
		if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
			t.Fatal(err)
		}
		ev, ok := body.Files[wandbserver.EventsFile]
		if r.Writer == s.ClientID() && (body.Complete != nil || body.ExitCode != nil) {
			t.Errorf("bridge sent complete/exitcode: %s", r.Body)
		}
		if !ok {
			continue
		}
		prev, seen := last[r.Writer]
		if seen && (ev.Offset < prev || (r.Writer == s.ClientID() && ev.Offset == prev)) {
			t.Errorf("writer %q: events offset %d after %d", r.Writer, ev.Offset, prev)
		}
		last[r.Writer] = ev.Offset
	}
}

func attempts(t *testing.T, dir string) int {
	t.Helper()
	n, err := wandbserver.ClientStreamRequests(dir)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNodeRunUpsertLikeRealClient: bridge creates a job's node's run with
// UpsertBucket as the real wandb client creates a run in a group
// (wandb.init's group, job_type and name, here from WANDB_RUN_GROUP,
// WANDB_JOB_TYPE and WANDB_NAME): the same input fields bound to the same
// variables of the same declared types, and the mock holds the same group
// and job type for both runs.
func TestNodeRunUpsertLikeRealClient(t *testing.T) {
	py, script := realClient(t, "compare bridge's UpsertBucket with the real client's")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	dir := t.TempDir()
	const real = "realrun1"
	cmd := exec.CommandContext(ctx, py, script, "demo", "0")
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "WANDB_RUN_ID=" + real, "WANDB_RUN_GROUP=job-1", "WANDB_JOB_TYPE=" + JobTypeNode,
		"WANDB_NAME=node-0"}, srv.ClientEnv(dir, "")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the real client: %v\n%s", err, out)
	}
	s := newSink(t, srv, func(c *Config) { c.RunID, c.Shared, c.Label = "job-1", true, "node-1" })
	start(t, s)
	if n, err := s.Send(ctx, samples(0, 1)); n != 1 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	upsert := func(run string) (fields map[string]string, types map[string]string, vars map[string]any) {
		t.Helper()
		for _, r := range srv.Requests() {
			var q struct {
				Query     string         `json:"query"`
				Variables map[string]any `json:"variables"`
			}
			if r.Operation != "UpsertBucket" || json.Unmarshal([]byte(r.Body), &q) != nil || q.Variables["name"] != run || q.Variables["groupName"] == nil {
				continue
			}
			flat := strings.Join(strings.Fields(q.Query), "")
			fields, types = map[string]string{}, map[string]string{}
			head, body, _ := strings.Cut(flat, "{")
			for _, m := range regexp.MustCompile(`\$(\w+):([\w!\[\]]+)`).FindAllStringSubmatch(head, -1) {
				types[m[1]] = strings.TrimSuffix(m[2], ",")
			}
			_, input, _ := strings.Cut(body, "input:{")
			input, _, _ = strings.Cut(input, "}")
			for _, m := range regexp.MustCompile(`(\w+):\$(\w+)`).FindAllStringSubmatch(input, -1) {
				fields[m[1]] = m[2]
			}
			return fields, types, q.Variables
		}
		t.Fatalf("no UpsertBucket of run %s with a group", run)
		return nil, nil, nil
	}
	rf, rt, rv := upsert(real)
	bf, bt, bv := upsert(s.cfg.NodeRun)
	for _, f := range []string{"name", "modelName", "entityName", "groupName", "jobType", "displayName"} {
		if rf[f] == "" || rf[f] != bf[f] || rt[rf[f]] != bt[bf[f]] {
			t.Errorf("input field %s: the real client binds $%s (%s), bridge $%s (%s)", f, rf[f], rt[rf[f]], bf[f], bt[bf[f]])
			continue
		}
		if fmt.Sprintf("%T", rv[rf[f]]) != fmt.Sprintf("%T", bv[bf[f]]) && bv[bf[f]] != nil {
			t.Errorf("variable %s: the real client sends a %T, bridge a %T", rf[f], rv[rf[f]], bv[bf[f]])
		}
	}
	for _, id := range []string{real, s.cfg.NodeRun} {
		if run, ok := srv.Run(srv.Entity(), "demo", id); !ok || run.Group != "job-1" || run.JobType != JobTypeNode {
			t.Errorf("run %s: group %q job type %q", id, run.Group, run.JobType)
		}
	}
}

// realClient is the python with the real wandb client (BRIDGE_TEST_PYTHON)
// and the training script it runs; the test skips, saying why, without it.
func realClient(t *testing.T, why string) (py, script string) {
	t.Helper()
	py = os.Getenv("BRIDGE_TEST_PYTHON")
	if py == "" {
		t.Skip("BRIDGE_TEST_PYTHON is unset: set it to a python with wandb==0.31.0 to " + why + "; scripts/test.sh, the README's test command, creates .venv and sets it")
	}
	script, err := filepath.Abs(filepath.Join("testdata", "train.py"))
	if err != nil {
		t.Fatal(err)
	}
	return py, script
}
