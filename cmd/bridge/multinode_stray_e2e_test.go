package main

// A creator that dies in the middle of the election, through the real
// binary (round 4, faults 3 and 4): its bridge is killed after its
// candidate became eligible, or before. The other nodes and the restarted
// node, with a key that has no generation (a JobSet's), still give their
// children the job's run. (--start-timeout is generous here, for a busy
// machine; that the default covers clearing a stray is checked in
// tracker/mlflow/election, TestStartTimeoutCoversStray.)

import (
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/mocks/faultproxy"
	"github.com/bridge-dev/bridge/tracker/mlflow"
)

// jobSet is the environment a JobSet's downward API gives pod i of n.
func jobSet(uid string, n int) func(i int) []string {
	return func(i int) []string {
		return []string{"JOBSET_NAME=train", "JOBSET_UID=" + uid, "JOB_GLOBAL_INDEX=" + strconv.Itoa(i),
			"JOBSET_GLOBAL_REPLICAS=" + strconv.Itoa(n)}
	}
}

func TestMultinodeKilledCreator(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.SharedPostgres(t)
	for _, tc := range []struct {
		name     string
		fault    faultproxy.Kind // on node 0's log-parameter
		eligible bool            // node 0's candidate is eligible when it dies
	}{
		{"after its candidate became eligible", faultproxy.SlowAnswer, true},
		{"before its candidate became eligible", faultproxy.Hang, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("%d%d", time.Now().UnixNano(), mnJobs.Add(1))
			exp, key := "killed-creator-"+id, "jobset:train:"+id
			env := jobSet(id, 3)
			p, err := faultproxy.Start(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			p.Schedule(faultproxy.Fault{Path: "runs/log-parameter", Kind: tc.fault, Delay: 10 * time.Minute})
			dir0 := t.TempDir()
			n0 := startMNIn(t, p.URL(), exp, dir0, env(0))
			n0.id = "node-0"
			expID := ""
			var stray mlflowtest.Run
			waitfor.Cond(t, 2*time.Minute, "node 0's candidate run at the point of the fault", func() bool {
				if expID == "" {
					expID = srv.ExperimentID(t, exp)
				}
				if expID == "" || p.Count("runs/log-parameter") == 0 {
					return false
				}
				runs := srv.SearchRuns(t, expID, fmt.Sprintf("tags.`%s` = '%s'", mlflow.TagJobKey, key), "ACTIVE_ONLY")
				if len(runs) != 1 {
					return false
				}
				stray = runs[0]
				return !tc.eligible || stray.Params[mlflow.ParamElection] != ""
			})
			// The creator dies with its child unstarted.
			if err := n0.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			n0.cmd.Wait()
			p.Close()
			// The others, and node 0 again (its pod's container restarted:
			// same spool), with the defaults.
			again := startMNIn(t, srv.URL, exp, dir0, env(0))
			again.id = "node-0"
			nodes := []*mnNode{again}
			for i := 1; i < 3; i++ {
				n := startMNIn(t, srv.URL, exp, t.TempDir(), env(i))
				n.id = fmt.Sprintf("node-%d", i)
				nodes = append(nodes, n)
			}
			wait(t, nodes...)
			for _, n := range nodes {
				if n.code != 0 {
					t.Errorf("%s's bridge exited %d", n.id, n.code)
				}
			}
			run := checkJob(t, srv, exp, key, nodes)
			if (run.Info.RunID == stray.Info.RunID) != tc.eligible {
				t.Errorf("the job's run is %s, the dead creator's candidate %s: want the candidate elected: %v", run.Info.RunID, stray.Info.RunID, tc.eligible)
			}
		})
	}
}
