package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
)

// recipeChild is docs/multinode.md's "Try it on one machine" command, with
// a shorter sleep.
const recipeChild = "echo run $MLFLOW_RUN_ID node ${MLFLOW_SYSTEM_METRICS_NODE_ID:--}; sleep 1"

// recipeNode starts one node of the recipe: the variables srun gives a
// node's task, nothing else, and bridge's args.
func recipeNode(t *testing.T, uri, job string, node int, args ...string) (*exec.Cmd, *syncbuf.Buffer) {
	t.Helper()
	cmd := exec.Command(testbin.Bridge(t), append(args, "--", "sh", "-c", recipeChild)...)
	cmd.Dir = t.TempDir()
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+uri, "SLURM_CLUSTER_NAME=laptop", "SLURM_JOB_ID="+job, "SLURM_STEP_ID=0",
		"SLURM_STEP_NUM_NODES=2", "SLURM_NODEID="+string(rune('0'+node)))
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// The recipe of docs/multinode.md against a server started just before
// the nodes (it does not answer yet: a cold `mlflow server` takes seconds):
// with the --start-timeout the page says to raise, both children print the
// job's run id (and no node id: MLflow's own monitor would add keys a node
// to the job's run), the run is named after the job's command, each node
// has a run of its own under it, and it is FINISHED once both ended.
func TestMultinodeRecipeColdServer(t *testing.T) {
	t.Parallel()
	srv := mlflowtest.Launch(t)
	job := "cold" + time.Now().Format("150405.000000")
	job = strings.ReplaceAll(job, ".", "")
	var outs [2]*syncbuf.Buffer
	var cmds [2]*exec.Cmd
	for i := range 2 {
		cmds[i], outs[i] = recipeNode(t, srv.URL, job, i, "--start-timeout=2m")
	}
	var ids [2]string
	for i, cmd := range cmds {
		if code := exitCode(t, cmd.Wait()); code != 0 {
			t.Fatalf("node %d: exit %d\n%s", i, code, outs[i])
		}
		for line := range strings.Lines(outs[i].String()) {
			if f := strings.Fields(line); len(f) == 4 && f[0] == "run" && f[2] == "node" {
				ids[i] = f[1]
				if f[3] != "-" {
					t.Errorf("node %d's child got node id %q, want none", i, f[3])
				}
			} else if len(f) > 0 && f[0] == "run" {
				t.Errorf("node %d's child printed %q: no run id or node id\n%s", i, line, outs[i])
			}
		}
	}
	if ids[0] == "" || ids[0] != ids[1] {
		t.Fatalf("the children printed run ids %q and %q, want one run\n%s\n%s", ids[0], ids[1], outs[0], outs[1])
	}
	waitfor.Cond(t, time.Minute, "the job's run FINISHED", func() bool { return srv.GetRun(t, ids[0]).Info.Status == "FINISHED" })
	run := srv.GetRun(t, ids[0])
	if run.Info.RunName != "sleep 1" {
		t.Errorf("the job's run is named %q, want the job's command (sleep 1), not the shell", run.Info.RunName)
	}
	for k, v := range run.Params {
		if k != "bridge.election" {
			t.Errorf("param %s=%s on the job's run: only the election's compare-and-set is a param", k, v)
		}
	}
	if run.Tags["bridge.finished_by"] == "" {
		t.Errorf("no bridge.finished_by tag: %v", run.Tags)
	}
	for i := range 2 {
		node := "node-" + string(rune('0'+i))
		own := srv.SearchRuns(t, run.Info.ExperimentID, fmt.Sprintf("tags.`mlflow.parentRunId` = '%s' and tags.`bridge.node_id` = '%s'", ids[0], node), "ACTIVE_ONLY")
		if len(own) != 1 || own[0].Info.RunName != node || own[0].Info.Status != "FINISHED" {
			t.Errorf("%s's runs under the job's run: %+v; want one, named by it, FINISHED", node, own)
		}
	}
}

// A node whose election is not over within --start-timeout (here: nothing
// listens at the address) starts its child (no run, no node id for
// MLflow's monitor), and says what happened and what to raise.
func TestMultinodeNodeIDWithoutRun(t *testing.T) {
	t.Parallel()
	cmd, out := recipeNode(t, refusedURL(t), "norun0", 0, "--start-timeout=1s", "--flush-timeout=1s")
	if code := exitCode(t, cmd.Wait()); code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	s := out.String()
	if !strings.Contains(s, "run node -\n") {
		t.Errorf("the child did not start without a run (want \"run node -\"):\n%s", s)
	}
	for _, want := range []string{"tracker not reachable at start", "connection refused", "raise --start-timeout"} {
		if !strings.Contains(s, want) {
			t.Errorf("the log does not say %q:\n%s", want, s)
		}
	}
}
