package main

// What the end of a job does with a tracker that was never reached, or was
// reached without giving a run: the real binary against a refused port, a
// real MLflow server and mocks/faultproxy.

import (
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/mocks/faultproxy"
	"github.com/bridge-dev/bridge/tracker/mlflow"
)

// refusedURL is an http:// address on 127.0.0.1 where nothing listens
// (connection refused).
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// A tracker never reached during the job (connection refused from start to
// end) does not hold bridge for the flush timeout: with --flush-timeout 60s
// bridge exits long before it, its end-of-run table says the tracker was
// never reached and advises the upload command, and that command, run as
// printed once the server is up with only MLFLOW_TRACKING_URI set, puts
// every sample into a run of the job's experiment (recorded in the spool)
// and ends it as the job ended. For a single-node job and for a node of a
// multi-node one (whose run is elected by the sync).
func TestTrackerNeverReachedEndsQuickly(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.Shared(t)
	const flush = 60 * time.Second
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"single node", nil},
		{"multi-node", []string{"--job-key", "never-reached-" + fmt.Sprint(time.Now().UnixNano()), "--nodes", "1", "--node-id", "n0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := uniqueName(t)
			dir := t.TempDir()
			exited := filepath.Join(dir, "exiting")
			args := append([]string{"--interval=200ms", "--start-timeout=1s", "--flush-timeout=" + flush.String()}, tc.args...)
			cmd := exec.Command(testbin.Bridge(t), append(args, "--", "sh", "-c", `sleep 1; touch "$0"`, exited)...)
			cmd.Dir = dir
			cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+refusedURL(t), "MLFLOW_EXPERIMENT_NAME="+exp)
			var errb strings.Builder
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			at := waitfor.File(t, time.Minute, exited)
			code := exitCode(t, cmd.Wait())
			took := time.Since(at)
			t.Logf("bridge exited %v after the child (tracker never reached, --flush-timeout=%s)", took, flush)
			if code != 0 {
				t.Fatalf("exit %d, want the child's 0:\n%s", code, errb.String())
			}
			if took > flush/2 {
				t.Errorf("bridge exited %v after the child with a tracker never reached, want long before --flush-timeout=%s:\n%s", took, flush, errb.String())
			}
			if !regexp.MustCompile(`mlflow +never reached, so no run was created; \d+ not sent: upload them with: bridge sync `).MatchString(errb.String()) {
				t.Errorf("the table does not say the tracker was never reached and how to upload:\n%s", errb.String())
			}

			code, out := runAdvised(t, advisedSync(t, errb.String()), "MLFLOW_TRACKING_URI="+srv.URL)
			if code != 0 {
				t.Fatalf("the advised sync: exit %d:\n%s", code, out)
			}
			// A multi-node job's: its run, and its node's run under it
			// with the node's series.
			ids := srv.RunIDs(t, exp)
			if want := map[bool]int{true: 2, false: 1}[tc.args != nil]; len(ids) != want {
				t.Fatalf("runs %v in the job's experiment after the sync, want %d:\n%s", ids, want, out)
			}
			slices.SortFunc(ids, func(a, b string) int {
				return strings.Compare(srv.GetRun(t, b).Tags[mlflow.TagJobKey], srv.GetRun(t, a).Tags[mlflow.TagJobKey])
			})
			series := ids[len(ids)-1]
			spools, _ := filepath.Glob(filepath.Join(dir, "bridge-spool-*.jsonl"))
			if len(spools) != 1 {
				t.Fatalf("default spools %v, want one", spools)
			}
			requireHistory(t, srv, &job{spool: spools[0]}, series, memKey)
			if st := srv.GetRun(t, ids[0]).Info.Status; st != mlflow.StatusFinished {
				t.Errorf("the run is %s after the sync, want FINISHED (the job exited 0):\n%s", st, out)
			}
		})
	}
}

// A tracker that answers but never gives a run (every runs/create answered
// 500) was reached: the end-of-run table says so instead of "never
// reached", and the end keeps the flush timeout for it.
func TestTrackerReachedWithoutRunSaysSo(t *testing.T) {
	srv := mlflowtest.Shared(t)
	p, err := faultproxy.Start(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.Schedule(faultproxy.Fault{Path: "runs/create", Kind: faultproxy.Status, Code: http.StatusInternalServerError})
	dir := t.TempDir()
	cmd := exec.Command(testbin.Bridge(t), "--interval=200ms", "--start-timeout=1s", "--flush-timeout=3s", "--", "sleep", "1")
	cmd.Dir = dir
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+p.URL(), "MLFLOW_EXPERIMENT_NAME="+uniqueName(t))
	out, err := cmd.CombinedOutput()
	if code := exitCode(t, err); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if !regexp.MustCompile(`mlflow +reached, but no run was found or created before bridge exited; \d+ not sent: upload them with: bridge sync `).Match(out) ||
		strings.Contains(string(out), "never reached") {
		t.Errorf("the table does not say the tracker answered without a run:\n%s", out)
	}
}
