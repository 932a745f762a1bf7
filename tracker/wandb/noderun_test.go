package wandb

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
	"github.com/bridge-dev/bridge/tracker"
)

// nodeSink is node label's sink of the job whose run is job-1.
func nodeSink(t *testing.T, srv *wandbserver.Server, label string) *Sink {
	t.Helper()
	s := newSink(t, srv, func(c *Config) { c.RunID, c.Shared, c.Label = "job-1", true, label })
	start(t, s)
	return s
}

// nodeEvents are the events lines s wrote to its node's run.
func nodeEvents(t *testing.T, srv *wandbserver.Server, s *Sink) wandbserver.File {
	t.Helper()
	r, ok := srv.Run(srv.Entity(), "demo", s.cfg.NodeRun)
	if !ok {
		t.Fatalf("no node run %s", s.cfg.NodeRun)
	}
	return r.File(s.ClientID(), wandbserver.EventsFile)
}

// A job's node writes its series to a run of its own, which it creates
// before the child's wandb.init created the job's run: in the job's group,
// job type "node", named by the node; its keys unlabelled, the same on
// every node's run. bridge does not create the job's run nor write a line
// to it.
func TestNodeRunSeries(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	ctx := context.Background()
	nodes := []*Sink{nodeSink(t, srv, "node-0"), nodeSink(t, srv, "node-1")}
	for _, s := range nodes {
		if n, err := s.Send(ctx, samples(0, 3)); n != 3 || err != nil {
			t.Fatalf("%s: Send = %d, %v", s.label, n, err)
		}
	}
	if _, ok := srv.FindRun("job-1"); ok {
		t.Error("bridge created the job's run: it is the training process's")
	}
	if nodes[0].cfg.NodeRun == nodes[1].cfg.NodeRun {
		t.Fatalf("two nodes share run %s", nodes[0].cfg.NodeRun)
	}
	for _, s := range nodes {
		run, ok := srv.Run(srv.Entity(), "demo", s.cfg.NodeRun)
		if !ok {
			t.Fatalf("no run %s", s.cfg.NodeRun)
		}
		if run.Group != "job-1" || run.JobType != JobTypeNode || run.DisplayName != s.label {
			t.Errorf("%s's run: group %q, job type %q, name %q; want job-1, node, %s", s.label, run.Group, run.JobType, run.DisplayName, s.label)
		}
		f := nodeEvents(t, srv, s)
		if len(f.Lines) != 3 || !f.Contiguous() {
			t.Fatalf("%s: %d lines, contiguous %v", s.label, len(f.Lines), f.Contiguous())
		}
		for i, l := range f.Lines {
			var m map[string]any
			if err := json.Unmarshal([]byte(l.Content), &m); err != nil {
				t.Fatal(err)
			}
			if m["system.gpu_0_utilization_percentage"] != float64(i) || m["system.container_memory_working_set_megabytes"] != float64(100+i) {
				t.Errorf("%s line %d: %v; want the unlabelled keys", s.label, i, m)
			}
			if strings.Contains(l.Content, "/l:") {
				t.Errorf("%s line %d is labelled: %s", s.label, i, l.Content)
			}
		}
	}
	// The fields wandb-core's UpsertBucket names them by
	// (mutation_run.graphql), as the real client sends them
	// (TestRealClientGroup).
	n := 0
	for _, r := range srv.Requests() {
		if r.Operation != "UpsertBucket" {
			continue
		}
		var q struct {
			Query     string         `json:"query"`
			Variables map[string]any `json:"variables"`
		}
		if err := json.Unmarshal([]byte(r.Body), &q); err != nil {
			t.Fatal(err)
		}
		n++
		for _, f := range []string{"groupName: $groupName", "jobType: $jobType", "displayName: $displayName", "modelName: $project", "entityName: $entity"} {
			if !strings.Contains(q.Query, f) {
				t.Errorf("bridge's UpsertBucket lacks %q: %s", f, q.Query)
			}
		}
		if q.Variables["groupName"] != "job-1" || q.Variables["jobType"] != JobTypeNode {
			t.Errorf("bridge's UpsertBucket variables %v", q.Variables)
		}
		if _, ok := q.Variables["config"]; ok {
			t.Errorf("bridge's UpsertBucket sent a config: %v", q.Variables)
		}
	}
	if n != 2 {
		t.Errorf("%d UpsertBucket requests, want one a node", n)
	}
}

// A node's end: its verdict on its run as a single run's (tags, a notes
// section, its figures in the summary), the run marked complete with the
// child's exit code; on the job's run only its record among the job's, in
// the summary, which GetRun gives back. The job's run gets no tag, note or
// line from bridge; the child's record there is kept.
func TestNodeRunFinish(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	ctx := context.Background()
	nodes := []*Sink{nodeSink(t, srv, "node-0"), nodeSink(t, srv, "node-1")}
	createRun(t, srv, "demo", "job-1", true)
	before, _ := srv.FindRun("job-1")
	end := func(code int, reason string) tracker.EndInfo {
		return tracker.EndInfo{ExitCode: code, Tags: map[string]string{"bridge.exit_code": fmt.Sprint(code), "bridge.exit_reason": reason}}
	}
	for _, f := range []struct {
		node int
		end  tracker.EndInfo
	}{{0, end(0, "success")}, {1, end(1, "error")}, {1, end(3, "error")}} {
		if err := nodes[f.node].Finish(ctx, f.end); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []struct {
		tags  string
		notes string
		code  int
	}{
		{"[bridge-exit-0 bridge-success]", "\n\n---\nbridge (end of job):\nbridge.exit_code: 0\nbridge.exit_reason: success\n", 0},
		{"[bridge-exit-3 bridge-error]", "\n\n---\nbridge (end of job):\nbridge.exit_code: 3\nbridge.exit_reason: error\n", 3},
	} {
		run, _ := srv.FindRun(nodes[i].cfg.NodeRun)
		if fmt.Sprint(run.Tags) != want.tags || run.Notes != want.notes {
			t.Errorf("node-%d's run: tags %q notes %q; want %q %q", i, run.Tags, run.Notes, want.tags, want.notes)
		}
		if !run.Complete || run.ExitCode == nil || *run.ExitCode != want.code || run.FinishedBy == nil || *run.FinishedBy != nodes[i].ClientID() {
			t.Errorf("node-%d's run: complete %v exit code %v by %v; want complete with %d by bridge", i, run.Complete, run.ExitCode, run.FinishedBy, want.code)
		}
	}
	job, _ := srv.FindRun("job-1")
	if len(job.Tags) != 0 || job.Notes != "" || len(job.Writers) != 0 || job.Complete {
		t.Errorf("bridge wrote to the job's run: tags %q notes %q writers %d complete %v", job.Tags, job.Notes, len(job.Writers), job.Complete)
	}
	if fmt.Sprint(job.Config) != fmt.Sprint(before.Config) {
		t.Errorf("the job's config changed: %v -> %v", before.Config, job.Config)
	}
	got, err := nodes[0].GetRun(ctx, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Tags["bridge.node.node-0.status"] != tracker.StatusFinished || got.Tags["bridge.node.node-1.exit_code"] != "3" ||
		got.Tags["bridge.failed.node-1"] != tracker.StatusFailed || got.Status != tracker.StatusFailed {
		t.Errorf("the job's records as read: status %q, tags %v", got.Status, got.Tags)
	}
}

// A restarted node (a new bridge, the same job and node) writes the same
// run again, as a new writer: the earlier attempt's lines stay.
func TestNodeRunRestart(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: testKey})
	ctx := context.Background()
	first := nodeSink(t, srv, "node-0")
	if n, err := first.Send(ctx, samples(0, 2)); n != 2 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	again := nodeSink(t, srv, "node-0")
	if again.cfg.NodeRun != first.cfg.NodeRun {
		t.Fatalf("the restarted node writes %s, the first %s", again.cfg.NodeRun, first.cfg.NodeRun)
	}
	if n, err := again.Send(ctx, samples(2, 3)); n != 3 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	if a, b := nodeEvents(t, srv, first), nodeEvents(t, srv, again); len(a.Lines) != 2 || len(b.Lines) != 3 || a.Overwrites+b.Overwrites != 0 {
		t.Errorf("first attempt %d lines, second %d, overwrites %d; want 2 and 3, none", len(a.Lines), len(b.Lines), a.Overwrites+b.Overwrites)
	}
	if n := len(srv.Runs()); n != 1 {
		t.Errorf("%d runs, want the node's one", n)
	}
}

// A node's run id: the same for the same job and label, distinct for
// distinct ones, one wandb accepts (at most 64 characters, none of
// : ; , # ? / ' nor spaces), readable.
func TestNodeRunID(t *testing.T) {
	jobs := []string{RunIDFor("slurm:alps:4242.0", "1"), RunIDFor("slurm:alps:4242.0", "2"), RunIDFor(strings.Repeat("k", 200), ""), "abc"}
	labels := []string{"node-0", "node-1", "node-0.task-1", strings.Repeat("n", 100), strings.Repeat("n", 99) + "m", "a b/c"}
	seen := map[string]string{}
	for _, j := range jobs {
		for _, l := range labels {
			id := NodeRunID(j, l)
			if id != NodeRunID(j, l) || len(id) > 64 || strings.ContainsAny(id, ":;,#?/' ") {
				t.Errorf("NodeRunID(%q, %q) = %q", j, l, id)
			}
			if other, dup := seen[id]; dup {
				t.Errorf("%s and %q %q share %q", other, j, l, id)
			}
			seen[id] = j + " " + l
		}
	}
	if got := NodeRunID("slurm-alps-4242.0-94c961518c", "node-17"); !strings.HasPrefix(got, "slurm-alps-4242.0-94c961518c-node-17-") {
		t.Errorf("NodeRunID keeps the job and node readable: %q", got)
	}
}
