package main

// bridge sync end to end: the real binary on spools real jobs left, against
// a real MLflow server.

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/mocks/faultproxy"
	"github.com/bridge-dev/bridge/tracker/mlflow"
	"github.com/bridge-dev/bridge/upload"
)

// advisedSync is the upload command bridge's end-of-run table advises,
// exactly as printed: `bridge sync PATH`, the path quoted where the shell
// needs it.
func advisedSync(t *testing.T, out string) string {
	t.Helper()
	_, table, ok := strings.Cut(out, "bridge: end of run")
	m := regexp.MustCompile(`bridge sync ('[^']*'|\S+)`).FindString(table)
	if !ok || !strings.HasPrefix(m, "bridge sync /") && !strings.HasPrefix(m, "bridge sync '/") {
		t.Fatalf("the end-of-run table advises no upload command with an absolute path:\n%s", out)
	}
	return m
}

// runAdvised runs the advised command as a user would paste it, from
// another directory, with only env (the tracker's address) set.
func runAdvised(t *testing.T, advice string, env ...string) (int, string) {
	t.Helper()
	sh := exec.Command("sh", "-c", advice)
	sh.Dir = t.TempDir()
	sh.Env = append(cleanEnv(env...), "PATH="+filepath.Dir(testbin.Bridge(t))+":"+os.Getenv("PATH"))
	out, err := sh.CombinedOutput()
	return exitCode(t, err), string(out)
}

// bridge sync never drops a sample it has yet to send, whatever the spool's
// size and whatever --spool-max-size the environment carries (a job's
// BRIDGE_ variables are usually still set where sync runs): a spool many
// times that cap, none of it sent, reaches MLflow whole, and the file keeps
// every sample.
func TestSyncLargerThanCapSendsEverything(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := uniqueName(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "big.jsonl")
	offline := bridgeIn(t, dir, srv, exp, "--interval=100ms", "--trackers=none", "--spool-max-size=0", "--spool="+path, "--", "sleep", "1.5")
	if out, err := offline.CombinedOutput(); exitCode(t, err) != 0 {
		t.Fatalf("offline job:\n%s", out)
	}
	const capBytes = 4 << 10
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < 4*capBytes {
		t.Fatalf("the spool holds %d bytes, want well over the %d-byte cap", fi.Size(), capBytes)
	}
	before := spooledSeqs(t, path)
	copied := filepath.Join(t.TempDir(), "before.jsonl") // what MLflow must hold
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(testbin.Bridge(t), "sync", path)
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp, "BRIDGE_SPOOL_MAX_SIZE=4KiB")
	out, err := cmd.CombinedOutput()
	if code := exitCode(t, err); code != 0 {
		t.Fatalf("sync: exit %d:\n%s", code, out)
	}
	if strings.Contains(string(out), "size cap") {
		t.Errorf("sync applied a size cap:\n%s", out)
	}
	if want := fmt.Sprintf("%d samples sent\n", len(before)); !strings.Contains(string(out), want) || strings.Contains(string(out), "acknowledged before") {
		t.Errorf("sync of a spool nothing acknowledged: want %q and nothing acknowledged before:\n%s", want, out)
	}
	if after := spooledSeqs(t, path); len(after) != len(before) {
		t.Errorf("the spool held %d samples before sync and %d after: sync removed samples", len(before), len(after))
	}
	_, _, attempts, err := spooltest.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	run := attempts[len(attempts)-1].Start.Runs["mlflow"]
	requireHistory(t, srv, &job{spool: copied}, run, memKey)
	if code, again := syncCmd(t, srv, exp, path); code != 0 || !strings.Contains(again, fmt.Sprintf("0 samples sent; those up to step %d were acknowledged before", before[len(before)-1])) {
		t.Errorf("second sync: exit %d, want 0 naming the step acknowledged before:\n%s", code, again)
	}
}

// A node of a multi-node job whose samples and end never reached the job's
// run (MLflow refused every runs/log-batch of it): the upload command its
// end-of-run table advises, run as printed with only MLFLOW_TRACKING_URI
// set (no MLFLOW_EXPERIMENT_NAME), puts its samples into the job's run in
// the job's experiment, which the spool recorded, and records its end
// there: the run ends FINISHED, and no run of the job appears anywhere
// else (the Default experiment).
func TestSyncMultinodeUsesRecordedRun(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.SharedPostgres(t)
	p, err := faultproxy.Start(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.Schedule(faultproxy.Fault{Path: "runs/log-batch", Kind: faultproxy.Status, Code: http.StatusServiceUnavailable})
	id, exp := fmt.Sprint(mnJobs.Add(1)), fmt.Sprintf("sync-recorded-%d", mnJobs.Add(1))
	env := slurmJob(id, time.Now().Unix(), 2, 0)
	n0 := startMN(t, srv.URL, exp, env(0))
	n0.id = "node-0"
	n1 := startMNIn(t, p.URL(), exp, t.TempDir(), env(1), "--flush-timeout", "3s")
	n1.id = "node-1"
	wait(t, n0, n1)
	if n0.code != 0 || n1.code != 0 {
		t.Fatalf("exit codes %d %d, want the children's 0", n0.code, n1.code)
	}
	key := "slurm:e2e:" + id + ".0"
	run := checkJobRun(t, srv, exp, key)
	if got, _, _ := n1.seen(t); got != run {
		t.Fatalf("node 1's child saw run %s, want the job's %s", got, run)
	}
	if st := srv.GetRun(t, run).Info.Status; st != mlflow.StatusRunning {
		t.Fatalf("with node 1's end unrecorded the run is %s, want RUNNING", st)
	}

	code, out := runAdvised(t, advisedSync(t, n1.stderr.String()), "MLFLOW_TRACKING_URI="+srv.URL)
	if code != 0 {
		t.Fatalf("the advised sync: exit %d:\n%s\nnode 1's bridge:\n%s", code, out, n1.stderr.String())
	}
	if r := checkJob(t, srv, exp, key, []*mnNode{n0, n1}); r.Info.Status != mlflow.StatusFinished || line(r, "node-1")["status"] != mlflow.StatusFinished {
		t.Errorf("after the sync the run is %s, node 1's line %v; want FINISHED\n%s", r.Info.Status, line(r, "node-1"), out)
	}
	if runs := srv.SearchRuns(t, mlflow.DefaultExperimentID, fmt.Sprintf("tags.`%s` = '%s'", mlflow.TagJobKey, key), "ALL"); len(runs) > 0 {
		t.Errorf("sync made %d runs of the job in the Default experiment", len(runs))
	}
}

// A job that ended cleanly with its end recorded on MLflow, whose spool's
// disk filled before the end record could be written: bridge sync, once
// space is back, keeps the end the tracker holds instead of recording the
// attempt as lost (a KILLED node of a FINISHED job's run). For a
// single-node job and for a node of a multi-node one.
func TestSyncKeepsEndAfterDiskFull(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.Shared(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"single node", nil},
		{"multi-node", []string{"--job-key", "disk-full-" + fmt.Sprint(time.Now().UnixNano()), "--nodes", "1", "--node-id", "n0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := uniqueName(t)
			mnt := mountTmpfs(t, "256k")
			path := filepath.Join(mnt, "spool.jsonl")
			work := t.TempDir()
			args := append([]string{"--interval=200ms", "--spool=" + path}, tc.args...)
			cmd := exec.Command(testbin.Bridge(t), append(args, "--", "sh", "-c", "while [ ! -e go ]; do sleep 0.1; done")...)
			cmd.Dir = work
			cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp)
			var out syncbuf.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })
			waitfor.Cond(t, time.Minute, "samples in the spool", func() bool {
				_, err := os.Stat(path)
				return err == nil && len(spooledSeqs(t, path)) >= 2
			})
			// Full, and staying so: bridge's failed writes are cut back to
			// the last whole record, which can give back a page a write
			// took while the disk filled; fill again until none is free
			// after bridge said it cannot write.
			fillers, full := 0, 0
			waitfor.Cond(t, time.Minute, "the spool's disk full", func() bool {
				failed := strings.Contains(out.String(), "cannot write the spool")
				fill(t, filepath.Join(mnt, fmt.Sprintf("filler-%d", fillers)))
				fillers++
				var st syscall.Statfs_t
				if err := syscall.Statfs(mnt, &st); err != nil {
					t.Fatal(err)
				}
				if full = full + 1; !failed || st.Bavail > 0 {
					full = 0
				}
				return full >= 3
			})
			os.WriteFile(filepath.Join(work, "go"), nil, 0o600)
			if code := exitCode(t, cmd.Wait()); code != 0 {
				t.Fatalf("exit %d:\n%s", code, &out)
			}
			if _, _, attempts, err := spooltest.ReadFile(path); err != nil || len(attempts) != 1 || attempts[0].End != nil {
				raw, _ := os.ReadFile(path)
				t.Fatalf("attempts %+v (%v): want one, without its end record (the disk was full)\n%s\n%s", len(attempts), err, raw, &out)
			}
			// A multi-node job's: its run and its node's run under it.
			ids := srv.RunIDs(t, exp)
			if want := map[bool]int{true: 2, false: 1}[tc.args != nil]; len(ids) != want {
				t.Fatalf("runs %v, want %d", ids, want)
			}
			slices.SortFunc(ids, func(a, b string) int {
				return strings.Compare(srv.GetRun(t, b).Tags[mlflow.TagJobKey], srv.GetRun(t, a).Tags[mlflow.TagJobKey])
			})
			before := srv.GetRun(t, ids[0])
			if before.Info.Status != mlflow.StatusFinished {
				t.Fatalf("the job's run is %s before the sync, want FINISHED (its end was recorded)", before.Info.Status)
			}
			for i := range fillers {
				if err := os.Remove(filepath.Join(mnt, fmt.Sprintf("filler-%d", i))); err != nil {
					t.Fatal(err)
				}
			}

			code, sout := syncCmd(t, srv, exp, path)
			if code != 0 || !strings.Contains(sout, "kept the end its bridge recorded on the run: exit code 0") {
				t.Fatalf("sync: exit %d, want 0 keeping the recorded end:\n%s", code, sout)
			}
			after := srv.GetRun(t, ids[0])
			if after.Info.Status != mlflow.StatusFinished {
				t.Errorf("the run is %s after the sync, want FINISHED kept:\n%s", after.Info.Status, sout)
			}
			for _, id := range ids {
				for k, v := range srv.GetRun(t, id).Tags {
					if strings.Contains(v, "lost") || strings.HasPrefix(k, "bridge.failed.") {
						t.Errorf("the sync recorded a lost attempt on run %s: %s=%q\n%s", id, k, v, sout)
					}
				}
			}
		})
	}
}

// bridge sync is patient: finding the job's run may take longer than
// --start-timeout (a slow server, an election still under way), and sync
// waits for it within its own --timeout, saying what it waits for, then
// uploads. When it does give up, it says what happened: the server
// answered but the run was not found, or the server never answered.
func TestSyncPatientWhileFindingRun(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.Shared(t)
	exp := uniqueName(t)
	key := "patient-" + fmt.Sprint(time.Now().UnixNano())
	node := func(id, uri string) (*exec.Cmd, string) {
		dir := t.TempDir()
		path := filepath.Join(dir, "spool.jsonl")
		cmd := exec.Command(testbin.Bridge(t), "--interval=200ms", "--start-timeout=1s", "--scopes=node", "--spool="+path,
			"--job-key", key, "--nodes", "2", "--node-id", id, "--", "sleep", "1")
		cmd.Dir = dir
		cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+uri, "MLFLOW_EXPERIMENT_NAME="+exp, "TMPDIR="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, path
	}
	// Node 0 elects the job's run; node 1 never reaches the server, so
	// its spool knows the key and not the run.
	n0, _ := node("n0", srv.URL)
	n1, path := node("n1", refusedURL(t))
	if c0, c1 := exitCode(t, n0.Wait()), exitCode(t, n1.Wait()); c0 != 0 || c1 != 0 {
		t.Fatalf("exit codes %d %d, want 0", c0, c1)
	}
	p, err := faultproxy.Start(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	syncVia := func(uri string, args ...string) (int, string) {
		cmd := exec.Command(testbin.Bridge(t), append([]string{"sync", path}, args...)...)
		cmd.Env = cleanEnv("MLFLOW_TRACKING_URI=" + uri)
		out, err := cmd.CombinedOutput()
		return exitCode(t, err), string(out)
	}

	code, out := syncVia(refusedURL(t), "--timeout=2s")
	if code != 1 || !strings.Contains(out, "the server did not answer in 2s") {
		t.Errorf("sync against a refused port: exit %d, want 1 saying the server did not answer:\n%s", code, out)
	}
	p.Schedule(faultproxy.Fault{Path: "runs/search", Kind: faultproxy.Hang})
	code, out = syncVia(p.URL(), "--timeout=3s")
	if code != 1 || !strings.Contains(out, "the server answers, but the job's run (key "+key+") was not found or elected") ||
		strings.Contains(out, "unreachable") || strings.Contains(out, "refused") {
		t.Errorf("sync while the run cannot be found: exit %d, want 1 saying the server answers and the run was not found:\n%s", code, out)
	}

	p.Clear()
	p.Schedule(faultproxy.Fault{Path: "runs/search", Kind: faultproxy.Slow, Delay: upload.ProgressEvery + 2*time.Second, Times: 1})
	code, out = syncVia(p.URL())
	if code != 0 {
		t.Fatalf("sync with a slow search: exit %d, want 0:\n%s", code, out)
	}
	if !strings.Contains(out, "still looking for the job's run (key "+key+") after ") {
		t.Errorf("sync did not say what it waits for:\n%s", out)
	}
	expID := srv.ExperimentID(t, exp)
	jobs := srv.SearchRuns(t, expID, fmt.Sprintf("tags.`%s` = '%s'", mlflow.TagJobKey, key), "ALL")
	if len(jobs) != 1 || len(srv.RunIDs(t, exp)) != 3 {
		t.Fatalf("runs of the job %d, runs %v; want the job's one and a run a node", len(jobs), srv.RunIDs(t, exp))
	}
	if r := jobs[0]; r.Info.Status != mlflow.StatusFinished || line(r, "n1")["status"] != mlflow.StatusFinished {
		t.Errorf("the job's run is %s, node n1's line %v; want FINISHED:\n%s", r.Info.Status, line(r, "n1"), out)
	}
	requireHistory(t, srv, &job{spool: path}, nodeRun(t, srv, expID, jobs[0].Info.RunID, "n1").Info.RunID, "system/node_memory_used_megabytes")
}
