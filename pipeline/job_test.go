package pipeline

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/internal/flock"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/jobkey"
	"github.com/bridge-dev/bridge/spool"
)

func getenv(kv ...string) func(string) string {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

// The node id: --node-id, then MLflow's own variable, then the launcher.
func TestDetectJobNodeID(t *testing.T) {
	slurm := []string{"SLURM_CLUSTER_NAME=c", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", "SLURM_NODEID=2", "SLURM_STEP_NUM_NODES=4"}
	cases := []struct {
		cfg  config.Config
		env  []string
		node string
	}{
		{config.Config{}, slurm, "node-2"},
		{config.Config{}, append(slurm, "MLFLOW_SYSTEM_METRICS_NODE_ID=gpu-a"), "gpu-a"},
		{config.Config{NodeID: "mine", NodeIDFrom: "--node-id"}, append(slurm, "MLFLOW_SYSTEM_METRICS_NODE_ID=gpu-a"), "mine"},
		// MLflow's variable is MLflow's: one it accepts that is no single
		// key segment is cleaned, with a hash of it, and said once.
		{config.Config{}, append(slurm, "MLFLOW_SYSTEM_METRICS_NODE_ID=gpu a/1"), "gpu_a_1--"},
	}
	for _, c := range cases {
		j := DetectJob(c.cfg, nil, getenv(c.env...))
		if j.Key != "slurm:c:7.0" || !strings.HasPrefix(j.NodeID, c.node) || !jobkey.ValidNodeID(j.NodeID) {
			t.Errorf("cfg %+v env %v: key %q node %q, want slurm:c:7.0 and %q", c.cfg.NodeID, c.env, j.Key, j.NodeID, c.node)
		}
		cleaned := strings.HasSuffix(c.node, "--")
		if n := len(j.Warnings); cleaned != (n == 1) || n > 1 || cleaned && !strings.Contains(j.Warnings[0], j.NodeID) {
			t.Errorf("env %v: warnings %q, want one naming %s only where the value was cleaned", c.env, j.Warnings, j.NodeID)
		}
		c.node = j.NodeID
		cfg := config.Config{Scopes: ScopesOf(Collectors())}
		j.Apply(&cfg)
		if cfg.NodeID != c.node {
			t.Errorf("Apply: node id %q, want %q", cfg.NodeID, c.node)
		}
	}
}

// The first bridge of a job on a node takes the node; a second of the same
// job and node does not, and keeps only its process series; another node
// or job is not affected; a released node is taken again.
func TestTakeNode(t *testing.T) {
	dir := t.TempDir()
	job := func(key, node string, local int) *Job {
		j := DetectJob(config.Config{JobKey: key, JobKeyFrom: "test", NodeID: node, NodeIDFrom: "test"}, nil, getenv(
			"SLURM_LOCALID="+string(rune('0'+local))))
		j.Local = local
		return j
	}
	take := func(j *Job) *Job {
		j.TakeNode(dir, quiet())
		t.Cleanup(j.Release)
		return j
	}
	a, b, c, d := take(job("k", "n0", 0)), take(job("k", "n0", 1)), take(job("k", "n1", 0)), take(job("other", "n0", 0))
	if a.Task != "" || b.Task != "task-1" || c.Task != "" || d.Task != "" {
		t.Fatalf("tasks %q %q %q %q, want only the second bridge of job k on n0 not to lead", a.Task, b.Task, c.Task, d.Task)
	}
	cfg := config.Config{Scopes: ScopesOf(Collectors())}
	b.Apply(&cfg)
	if !slices.Equal(cfg.Scopes, []string{"process"}) || b.Label() != "n0.task-1" {
		t.Errorf("the second bridge: scopes %v, label %q", cfg.Scopes, b.Label())
	}
	a.Release()
	if e := take(job("k", "n0", 2)); e.Task != "" {
		t.Errorf("after the lead released the node, a new bridge is %q, want the lead", e.Task)
	}
	none := DetectJob(config.Config{}, nil, getenv())
	none.TakeNode(dir, quiet())
	if none.Task != "" || none.lock != nil {
		t.Errorf("a single-node job took a node lock")
	}
	// Every lead removes its file when it leaves; a bridge that does not
	// lead leaves the lead's file alone.
	b.Release()
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 3 {
		t.Errorf("lock files of the three running leads: %q", left)
	}
	for _, j := range []*Job{c, d, a, b} {
		j.Release()
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 1 {
		t.Errorf("lock files with one lead left running: %q", left)
	}
}

// A bridge that wins the lock on a file its departing lead has just removed
// tries again on the file now at the path: two bridges never both lead.
func TestTakeNodeAfterLeadRemovedFile(t *testing.T) {
	dir := t.TempDir()
	job := func() *Job {
		return DetectJob(config.Config{JobKey: "k", JobKeyFrom: "test", NodeID: "n0", NodeIDFrom: "test"}, nil, getenv())
	}
	lead := job()
	lead.TakeNode(dir, quiet())
	t.Cleanup(lead.Release)
	// A stale lock file at the path: its inode is not the lead's.
	stale, err := os.Open(lead.lockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	if same, _ := flock.StillAt(stale, lead.lockPath); !same {
		t.Fatal("the lead's open file is not at its path")
	}
	if err := os.Remove(lead.lockPath); err != nil {
		t.Fatal(err)
	}
	if same, _ := flock.StillAt(stale, lead.lockPath); same {
		t.Fatal("a removed file is still reported at its path")
	}
	// The lead's file is gone from the path (as when it left, though it
	// still holds it): a new bridge makes a new file and leads; a third
	// does not.
	second, third := job(), job()
	second.TakeNode(dir, quiet())
	t.Cleanup(second.Release)
	third.TakeNode(dir, quiet())
	t.Cleanup(third.Release)
	if second.Task != "" || third.Task == "" {
		t.Errorf("after the lead's file was removed: second %q, third %q; want only the second to lead", second.Task, third.Task)
	}
}

// Each bridge of a job on one node gets its own default spool task: the
// launcher's task index when it gives one, whichever task leads the node
// (the same after a requeue), else the task name of a bridge that does not
// lead; the node's first or only bridge none.
func TestSpoolTask(t *testing.T) {
	dir := t.TempDir()
	bridge := func(job, local string) *Job {
		j := DetectJob(config.Config{}, nil, getenv("SLURM_CLUSTER_NAME=c", "SLURM_JOB_ID="+job, "SLURM_STEP_ID=0",
			"SLURM_NODEID=0", "SLURM_LOCALID="+local))
		j.TakeNode(dir, quiet())
		t.Cleanup(j.Release)
		return j
	}
	// Task 1 takes the node first: it leads, and still keeps task-1.
	one, zero, two := bridge("7", "1"), bridge("7", "0"), bridge("7", "2")
	if one.Task != "" || zero.Task != "task-0" {
		t.Fatalf("leads: task 1 %q, task 0 %q", one.Task, zero.Task)
	}
	for _, c := range []struct {
		j    *Job
		want string
	}{{zero, ""}, {one, "task-1"}, {two, "task-2"}} {
		if got := c.j.SpoolTask(); got != c.want {
			t.Errorf("SLURM_LOCALID=%d (task %q): spool task %q, want %q", c.j.Local, c.j.Task, got, c.want)
		}
	}
	// No task index (another job): the lead has none, the others their
	// task name.
	lead, other := bridge("8", ""), bridge("8", "")
	if lead.SpoolTask() != "" || other.SpoolTask() == "" || other.SpoolTask() != other.Task {
		t.Errorf("without SLURM_LOCALID: lead %q, other %q (task %q)", lead.SpoolTask(), other.SpoolTask(), other.Task)
	}
	var single *Job
	if single.SpoolTask() != "" || DetectJob(config.Config{}, nil, getenv()).SpoolTask() != "" {
		t.Error("a single-node job has a spool task")
	}
}

// What the spool's start record keeps is enough for `bridge sync` to find
// the job's run again.
func TestJobTagsRoundTrip(t *testing.T) {
	j := DetectJob(config.Config{JobKey: "jobset:x:1", JobKeyFrom: "test", Nodes: 4, NodesFrom: "test"}, nil,
		getenv("JOB_GLOBAL_INDEX=3", "JOBSET_NAME=x", "JOBSET_UID=1"))
	j.Task, j.Generation = "task-2", "1700000000"
	back := JobFromTags(j.Tags(), time.Second)
	if back == nil || back.Key != j.Key || back.NodeID != "node-3" || back.Nodes != 4 || back.Task != "task-2" || back.Settle != time.Second ||
		back.Generation != j.Generation {
		t.Fatalf("from %v: %+v", j.Tags(), back)
	}
	if JobFromTags(map[string]string{"bridge.job_key": "it's"}, 0) != nil || JobFromTags(nil, 0) != nil {
		t.Error("a start record without a valid key named a job")
	}
	if DetectJob(config.Config{}, nil, getenv()).Tags() != nil {
		t.Error("a single-node job has job tags")
	}
}

// Without the launcher's restart count, a node's attempt is the number of
// training attempts its spool holds.
func TestCountAttempts(t *testing.T) {
	j := DetectJob(config.Config{JobKey: "k", JobKeyFrom: "test", NodeID: "n", NodeIDFrom: "test"}, nil, getenv())
	j.CountAttempts([]spool.Attempt{{}, {Start: spool.Record{Info: map[string]string{"mode": "sync"}}}, {}})
	if j.Attempt != 2 {
		t.Errorf("attempt %d, want 2 (a sync is no attempt)", j.Attempt)
	}
	s := DetectJob(config.Config{}, nil, getenv("SLURM_CLUSTER_NAME=c", "SLURM_JOB_ID=1", "SLURM_NODEID=0", "SLURM_RESTART_COUNT=3"))
	s.CountAttempts([]spool.Attempt{{}})
	if s.Attempt != 3 {
		t.Errorf("attempt %d, want Slurm's 3", s.Attempt)
	}
	if d := s.Describe(); !strings.Contains(d["attempt"].(string), "SLURM_RESTART_COUNT") || !strings.Contains(d["key"].(string), "slurm:c:1") {
		t.Errorf("Describe: %v", d)
	}
}
