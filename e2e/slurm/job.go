package slurm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
)

// Spec is a job to run.
type Spec struct {
	Nodes        int           // -N; 0 means every node of the cluster
	TasksPerNode int           // --ntasks-per-node; 0 means 1
	Env          []string      // KEY=VALUE added to the submitting environment (tasks inherit it)
	Args         []string      // more srun or sbatch options
	Cmd          []string      // what every task runs (under task.sh as "task"); with Script, the script's arguments
	Script       string        // Submit and Sbatch: this batch script instead of one running `srun Cmd`
	Timeout      time.Duration // how long the job may take, each attempt; 0 means 2 minutes
}

// Job is what a job did.
type Job struct {
	ID     string
	Exit   int    // srun's exit status; for a batch job, the batch script's (scontrol's ExitCode)
	Output string // srun's own output, or the batch script's (its tasks' output is in Tasks)
	Tasks  []Task // by attempt, then rank
	Dir    string // E2E_SLURM_JOBDIR: the tasks' files, and the job's working directory
}

// Task is one task of one attempt of a job.
type Task struct {
	Attempt int // SLURM_RESTART_COUNT, 0 on the first run
	Rank    int // SLURM_PROCID
	// Procs are the processes recorded by task.sh, by name: "task" is the
	// task itself as the launcher started it, others are what the test
	// wrapped with Cluster.Wrap.
	Procs map[string]Proc
}

// Proc is one process recorded by task.sh.
type Proc struct {
	Host   string            // hostname where it ran
	Env    map[string]string // its environment
	Stdout string
	Stderr string
	Exit   int // -1 when none was recorded: still running, or task.sh itself was killed
}

// Attempt is the job's tasks of one attempt (SLURM_RESTART_COUNT), by rank.
func (j Job) Attempt(n int) []Task {
	return slices.DeleteFunc(slices.Clone(j.Tasks), func(k Task) bool { return k.Attempt != n })
}

// Launched is the task as the launcher started it: what bridge, as the
// task's command, reads.
func (t Task) Launched() Proc { return t.Procs["task"] }

// Srun runs spec with srun and waits for it.
func (c *Cluster) Srun(t testing.TB, spec Spec) Job {
	t.Helper()
	dir, timeout := t.TempDir(), spec.timeout()
	args := append(c.allocation(spec, dir), "--job-name", jobName(t))
	args = append(append(args, spec.Args...), c.Wrap("task", spec.Cmd...)...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	cmd := c.Command(ctx, "srun", args...)
	cmd.Env = c.Env(append(spec.Env, "E2E_SLURM_JOBDIR="+dir)...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("srun %s did not end within %v:\n%s\n%s", strings.Join(args, " "), timeout+time.Minute, &out, c.logTails())
	}
	j := Job{Exit: testbin.ExitCode(t, err), Output: out.String(), Dir: dir}
	j.Tasks = readTasks(t, dir)
	if len(j.Tasks) > 0 {
		j.ID = j.Tasks[0].Launched().Env["SLURM_JOB_ID"]
	}
	return j
}

// Sbatch submits spec as a batch job and waits until it has ended.
func (c *Cluster) Sbatch(t testing.TB, spec Spec) Job {
	t.Helper()
	return c.Submit(t, spec).Wait(t)
}

// Batch is a submitted batch job.
type Batch struct {
	ID      string
	Dir     string
	c       *Cluster
	timeout time.Duration
}

// Submit submits spec as a batch job and returns at once. Without
// spec.Script the batch script is `srun task.sh task Cmd...`; its output
// goes to Dir/batch.out (appended to on a requeue).
func (c *Cluster) Submit(t testing.TB, spec Spec) *Batch {
	t.Helper()
	dir := t.TempDir()
	script, scriptArgs := spec.Script, spec.Cmd
	if script == "" {
		script, scriptArgs = filepath.Join(dir, "batch.sh"), nil
		body := "#!/bin/sh\nexec srun " + shellQuote(c.Wrap("task", spec.Cmd...)) + "\n"
		if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	args := append(c.allocation(spec, dir), "--job-name", jobName(t), "--parsable",
		"--output", filepath.Join(dir, "batch.out"), "--open-mode", "append")
	args = append(append(append(args, spec.Args...), script), scriptArgs...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := c.Command(ctx, "sbatch", args...)
	cmd.Env = c.Env(append(spec.Env, "E2E_SLURM_JOBDIR="+dir)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	// --parsable: "ID" or "ID;CLUSTER".
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch printed %q, not a job id", out)
	}
	return &Batch{ID: id, Dir: dir, c: c, timeout: spec.timeout()}
}

// jobStates are the states of a job that has ended (squeue(1), JOB STATE
// CODES); a requeued job goes back to PENDING.
var jobStates = []string{"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
	"BOOT_FAIL", "DEADLINE", "PREEMPTED"}

// State is the job's JobState, Restarts and ExitCode as scontrol shows them.
func (b *Batch) State(t testing.TB) (state string, restarts int, exit int) {
	t.Helper()
	f := b.c.jobFields(t, b.ID)
	restarts, _ = strconv.Atoi(f["Restarts"])
	code, _, _ := strings.Cut(f["ExitCode"], ":")
	exit, _ = strconv.Atoi(code)
	return f["JobState"], restarts, exit
}

// Wait waits until the job has ended (after its last requeue) and returns
// what it did.
func (b *Batch) Wait(t testing.TB) Job {
	t.Helper()
	var state string
	var exit int
	waitfor.Cond(t, b.timeout+time.Minute, "batch job "+b.ID+" ending", func() bool {
		state, _, exit = b.State(t)
		return slices.Contains(jobStates, state)
	})
	out, _ := os.ReadFile(filepath.Join(b.Dir, "batch.out"))
	return Job{ID: b.ID, Exit: exit, Output: string(out), Tasks: readTasks(t, b.Dir), Dir: b.Dir}
}

// WaitStarted waits until n tasks of the attempt have started (task.sh has
// recorded their environment) and returns them.
func (b *Batch) WaitStarted(t testing.TB, attempt, n int) []Task {
	t.Helper()
	return b.WaitProc(t, attempt, n, "task")
}

// WaitProc waits until the process recorded as name (Cluster.Wrap) has
// started in n tasks of the attempt, and returns those tasks.
func (b *Batch) WaitProc(t testing.TB, attempt, n int, name string) []Task {
	t.Helper()
	var tasks []Task
	waitfor.Cond(t, b.timeout+time.Minute, fmt.Sprintf("%q in %d tasks of job %s, attempt %d, starting", name, n, b.ID, attempt), func() bool {
		tasks = slices.DeleteFunc(readTasks(t, b.Dir), func(k Task) bool {
			_, ok := k.Procs[name]
			return k.Attempt != attempt || !ok
		})
		return len(tasks) >= n
	})
	return tasks
}

// Requeue requeues the job (scontrol requeue): a running job is killed and
// runs again, with the same id and SLURM_RESTART_COUNT one higher.
func (b *Batch) Requeue(t testing.TB) {
	t.Helper()
	b.c.Scontrol(t, "requeue", b.ID)
}

// jobFields is `scontrol show job -o ID` as a map.
func (c *Cluster) jobFields(t testing.TB, id string) map[string]string {
	t.Helper()
	f := map[string]string{}
	for _, kv := range strings.Fields(c.Scontrol(t, "show", "job", "-o", id)) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			f[k] = v
		}
	}
	return f
}

// allocation is the options every job gets: nodes, tasks, working
// directory (the job's own, so that nothing lands in the repository) and a
// time limit, so that Slurm itself ends a job that hangs.
func (c *Cluster) allocation(spec Spec, dir string) []string {
	nodes, perNode := spec.Nodes, spec.TasksPerNode
	if nodes == 0 {
		nodes = len(c.Nodes)
	}
	if perNode == 0 {
		perNode = 1
	}
	minutes := int((spec.timeout() + time.Minute - 1) / time.Minute)
	return []string{"--nodes", strconv.Itoa(nodes), "--ntasks-per-node", strconv.Itoa(perNode),
		"--chdir", dir, "--time", strconv.Itoa(minutes)}
}

func (s Spec) timeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return 2 * time.Minute
}

// jobName is the test's name, as Slurm shows it in scontrol and logs.
func jobName(t testing.TB) string { return strings.ReplaceAll(t.Name(), "/", "-") }

// shellQuote quotes words for /bin/sh.
func shellQuote(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// taskFile is task.sh's a<attempt>.t<rank>.<name>.<what>.
var taskFile = regexp.MustCompile(`^a(\d+)\.t(\d+)\.([A-Za-z0-9_-]+)\.(host|env|out|err|exit)$`)

// readTasks reads what task.sh recorded in dir, sorted by attempt and rank.
// A process counts once its environment is complete.
func readTasks(t testing.TB, dir string) []Task {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ attempt, rank int }
	byKey := map[key]*Task{}
	for _, e := range entries {
		m := taskFile.FindStringSubmatch(e.Name())
		if m == nil || m[4] != "env" {
			continue
		}
		k := key{}
		k.attempt, _ = strconv.Atoi(m[1])
		k.rank, _ = strconv.Atoi(m[2])
		task := byKey[k]
		if task == nil {
			task = &Task{Attempt: k.attempt, Rank: k.rank, Procs: map[string]Proc{}}
			byKey[k] = task
		}
		task.Procs[m[3]] = readProc(t, filepath.Join(dir, strings.TrimSuffix(e.Name(), ".env")))
	}
	var tasks []Task
	for _, task := range byKey {
		tasks = append(tasks, *task)
	}
	slices.SortFunc(tasks, func(a, b Task) int {
		if a.Attempt != b.Attempt {
			return a.Attempt - b.Attempt
		}
		return a.Rank - b.Rank
	})
	return tasks
}

func readProc(t testing.TB, prefix string) Proc {
	t.Helper()
	read := func(what string) string {
		b, err := os.ReadFile(prefix + "." + what)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return string(b)
	}
	p := Proc{Host: strings.TrimSpace(read("host")), Env: map[string]string{}, Stdout: read("out"), Stderr: read("err"), Exit: -1}
	for kv := range strings.SplitSeq(read("env"), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			p.Env[k] = v
		}
	}
	if s := strings.TrimSpace(read("exit")); s != "" {
		p.Exit, _ = strconv.Atoi(s)
	}
	return p
}
