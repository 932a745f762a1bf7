package slurm

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// requireLauncherFacts checks, for the tasks of one attempt of a job over
// every node with perNode tasks each, the variables bridge relies on to name
// the job and the node: one SLURM_JOB_ID and SLURM_CLUSTER_NAME for all,
// SLURM_JOB_NUM_NODES the node count, SLURM_NODEID 0..N-1 matching the
// node's own hostname, SLURM_PROCID the task's rank, SLURM_LOCALID 0..perNode-1
// on each node.
func requireLauncherFacts(t *testing.T, c *Cluster, jobID string, tasks []Task, perNode int) {
	t.Helper()
	if want := len(c.Nodes) * perNode; len(tasks) != want {
		t.Fatalf("job %s: %d tasks recorded, want %d (%d nodes x %d)", jobID, len(tasks), want, len(c.Nodes), perNode)
	}
	locals := map[string][]int{} // SLURM_NODEID -> SLURM_LOCALIDs
	for i, task := range tasks {
		p := task.Launched()
		env := p.Env
		where := fmt.Sprintf("task %d (attempt %d) on %s", task.Rank, task.Attempt, p.Host)
		for k, want := range map[string]string{
			"SLURM_JOB_ID":        jobID,
			"SLURM_CLUSTER_NAME":  c.Name,
			"SLURM_JOB_NUM_NODES": strconv.Itoa(len(c.Nodes)),
			"SLURM_PROCID":        strconv.Itoa(i),
		} {
			if env[k] != want {
				t.Errorf("%s: %s=%q, want %q", where, k, env[k], want)
			}
		}
		node, err := strconv.Atoi(env["SLURM_NODEID"])
		if err != nil || node < 0 || node >= len(c.Nodes) {
			t.Errorf("%s: SLURM_NODEID=%q, want 0..%d", where, env["SLURM_NODEID"], len(c.Nodes)-1)
			continue
		}
		// Nodes are allocated in order: node index i is the i-th host, and
		// each host is its own UTS namespace.
		if p.Host != c.Nodes[node] || env["SLURMD_NODENAME"] != c.Nodes[node] {
			t.Errorf("%s: SLURM_NODEID=%d, SLURMD_NODENAME=%q, want host %s", where, node, env["SLURMD_NODENAME"], c.Nodes[node])
		}
		local, err := strconv.Atoi(env["SLURM_LOCALID"])
		if err != nil {
			t.Errorf("%s: SLURM_LOCALID=%q", where, env["SLURM_LOCALID"])
		}
		locals[env["SLURM_NODEID"]] = append(locals[env["SLURM_NODEID"]], local)
	}
	for node, ids := range locals {
		slices.Sort(ids)
		if want := seq(perNode); !slices.Equal(ids, want) {
			t.Errorf("node %s: SLURM_LOCALID %v, want %v", node, ids, want)
		}
	}
	if len(locals) != len(c.Nodes) {
		t.Errorf("tasks ran on %d distinct SLURM_NODEIDs, want %d", len(locals), len(c.Nodes))
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func TestSrunOneTaskPerNode(t *testing.T) {
	c := Shared(t)
	j := c.Srun(t, Spec{Cmd: []string{"true"}})
	RequireExits(t, j, 0, "task")
	if j.Exit != 0 {
		t.Fatalf("srun exited %d:\n%s", j.Exit, j.Output)
	}
	requireLauncherFacts(t, c, j.ID, j.Tasks, 1)
}

func TestSrunTwoTasksPerNode(t *testing.T) {
	c := Shared(t)
	j := c.Srun(t, Spec{TasksPerNode: 2, Cmd: []string{"true"}})
	RequireExits(t, j, 0, "task")
	requireLauncherFacts(t, c, j.ID, j.Tasks, 2)
}

func TestSbatchOneTaskPerNode(t *testing.T) {
	c := Shared(t)
	j := c.Sbatch(t, Spec{Cmd: []string{"true"}})
	RequireExits(t, j, 0, "task")
	if j.Exit != 0 {
		t.Fatalf("batch job %s exited %d:\n%s", j.ID, j.Exit, j.Output)
	}
	requireLauncherFacts(t, c, j.ID, j.Tasks, 1)
	for _, task := range j.Tasks {
		if v, ok := task.Launched().Env["SLURM_RESTART_COUNT"]; ok {
			t.Errorf("task %d: SLURM_RESTART_COUNT=%q on the first run, want it unset", task.Rank, v)
		}
	}
}

// A requeued batch job (scontrol requeue, as after a node failure or a
// preemption) runs again under the same job id, SLURM_RESTART_COUNT=1 on
// every node; the first attempt's tasks get SIGTERM.
func TestSbatchRequeue(t *testing.T) {
	c := Shared(t)
	// The first attempt runs until it is requeued; the second ends at once.
	b := c.Submit(t, Spec{Cmd: []string{"sh", "-c", `[ -n "${SLURM_RESTART_COUNT:-}" ] || exec sleep 600`}})
	first := b.WaitStarted(t, 0, len(c.Nodes))
	requireLauncherFacts(t, c, b.ID, first, 1)
	b.Requeue(t)
	j := b.Wait(t)
	if j.Exit != 0 {
		t.Fatalf("batch job %s exited %d:\n%s", j.ID, j.Exit, j.Output)
	}
	for _, task := range j.Tasks {
		switch task.Attempt {
		case 0:
			// Slurm's SIGTERM reaches the command (128+15) and, racing
			// with it, perhaps task.sh too (no exit recorded).
			if e := task.Launched().Exit; e != 143 && e != -1 {
				t.Errorf("first attempt, task %d exited %d: want it killed by SIGTERM from the requeue", task.Rank, e)
			}
		case 1:
		default:
			t.Errorf("task %d ran as attempt %d: only one requeue was asked for", task.Rank, task.Attempt)
		}
	}
	again := j.Attempt(1)
	requireLauncherFacts(t, c, b.ID, again, 1)
	for _, task := range again {
		if got := task.Launched().Env["SLURM_RESTART_COUNT"]; got != "1" {
			t.Errorf("second attempt, task %d: SLURM_RESTART_COUNT=%q, want 1", task.Rank, got)
		}
	}
	if _, restarts, _ := b.State(t); restarts != 1 {
		t.Errorf("scontrol shows Restarts=%d, want 1", restarts)
	}
}
