package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/hostile"
	"github.com/bridge-dev/bridge/harness/promtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
)

// A hostile exporter cannot harm the job: the real binary (built without
// -race, as users run it), alone in a real memory cgroup of 128 MiB (it was
// OOM-killed there before: exit 137, the child orphaned, no end record in
// the spool), reads exporters that send 1e6 series, a gzip bomb, 10 MiB
// labels and an endless body, each answer several times; the child's exit
// status passes through, the spool gets its end record, the kernel killed
// nothing, and the bound is reported once.
func TestHostileScrapeInMemoryCgroup(t *testing.T) {
	for _, mode := range []string{"series", "gzip", "label", "endless"} {
		t.Run(mode, func(t *testing.T) {
			g := cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 128 * mib})
			h, err := hostile.Handler(mode)
			if err != nil {
				t.Fatal(err)
			}
			var hits atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				h.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)

			// A long --scrape-timeout: a bound on the answer, not the time,
			// ends each read, however loaded the machine.
			cmd, _, errb := bridgeCmd(t, "--interval=200ms", "--trackers=none", "--scrape="+srv.URL+"/metrics", "--scrape-passthrough", "--scrape-timeout=10m",
				"--", "sh", "-c", "while [ ! -e stop ]; do sleep 0.1; done; exit 7")
			// The binary users run: the race detector multiplies memory.
			cmd.Path = testbin.BridgePlain(t)
			cmd.Args[0] = cmd.Path
			j := (&job{cmd: cmd}).inCgroup(g)
			if err := j.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- j.cmd.Wait() }()
			stop := func() { os.WriteFile(filepath.Join(cmd.Dir, "stop"), nil, 0o600) }
			t.Cleanup(stop)
			// Three requests: bridge has read at least two whole answers.
			waitfor.Cond(t, 2*time.Minute, "three scrapes of the hostile exporter", func() bool {
				select {
				case err := <-exited:
					t.Fatalf("bridge exited while scraping: %v\nstderr:\n%s", err, errb)
				default:
				}
				return hits.Load() >= 3
			})
			stop()
			var code int
			select {
			case err := <-exited:
				code = exitCode(t, err)
			case <-time.After(2 * time.Minute):
				t.Fatalf("bridge did not exit 2 minutes after its child was told to; stderr:\n%s", errb)
			}
			if code != 7 {
				t.Errorf("exit %d, want the child's 7; stderr:\n%s", code, errb)
			}
			if n := oomKills(t, g); n != 0 {
				t.Errorf("the kernel OOM-killed %d processes in the cgroup", n)
			}
			_, _, attempts, err := spooltest.ReadFile(spoolOf(t, cmd))
			if err != nil || len(attempts) != 1 || attempts[0].End == nil || attempts[0].End.ExitCode == nil || *attempts[0].End.ExitCode != 7 {
				t.Errorf("spool: %d attempts, err %v: want one with the end record of exit 7", len(attempts), err)
			}
			if n := strings.Count(errb.String(), "scrape answer dropped whole"); n != 1 {
				t.Errorf("the bound was reported %d times, want once; stderr:\n%s", n, errb)
			}
			peak, _ := os.ReadFile(filepath.Join(g.Memory, "memory.max_usage_in_bytes"))
			t.Logf("%s: %d requests, cgroup peak %s bytes (bridge, its child, page cache)", mode, hits.Load(), strings.TrimSpace(string(peak)))
		})
	}
}

// oomKills is the oom_kill count of the group's memory cgroup (a v1 kernel
// that has no such line counts as none, as before it).
func oomKills(t *testing.T, g *cgrouptest.Group) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(g.Memory, "memory.oom_control"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var n int
		if _, err := fmt.Sscanf(line, "oom_kill %d", &n); err == nil {
			return n
		}
	}
	return 0
}

func spoolOf(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	for _, kv := range cmd.Env {
		if path, ok := strings.CutPrefix(kv, "BRIDGE_SPOOL="); ok {
			return path
		}
	}
	t.Fatal("the command has no BRIDGE_SPOOL")
	return ""
}

// A --scrape URL's password and token never appear in anything bridge
// writes: stderr (at debug level), /metrics (the url label of
// bridge_scrape_failures_total), the spool, and `bridge sample`'s table,
// JSON and detection; each URL is shown redacted instead. The URLs fail
// every way a scrape can (an HTTP error, a refused connection, a redirect
// to another host, an answer over a bound) beside one that answers.
func TestScrapeURLSecretsNeverShown(t *testing.T) {
	const pw, tok = "s3cretpw", "t0kval"
	secrets := func(u string) string {
		return strings.Replace(u, "http://", "http://user:"+pw+"@", 1) + "?token=" + tok
	}
	other := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(other.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/status":
			http.Error(w, "no", http.StatusInternalServerError)
		case "/elsewhere":
			http.Redirect(w, r, secrets(other.URL+"/metrics"), http.StatusFound)
		case "/big":
			for i := range 3000 {
				fmt.Fprintf(w, "big{i=\"%d\"} 1\n", i)
			}
		default:
			io.WriteString(w, "# TYPE app_up gauge\napp_up 1\n")
		}
	}))
	t.Cleanup(srv.Close)
	refused := "http://" + promtest.FreeAddr(t) + "/metrics"
	args := []string{"--log-level=debug", "--scrape-passthrough"}
	for _, u := range []string{srv.URL + "/metrics", srv.URL + "/status", srv.URL + "/elsewhere", srv.URL + "/big", refused} {
		args = append(args, "--scrape="+secrets(u))
	}
	check := func(what, out string, wantShown bool) {
		t.Helper()
		if strings.Contains(out, pw) || strings.Contains(out, tok) {
			t.Errorf("%s shows a secret:\n%s", what, out)
		}
		if wantShown && (!strings.Contains(out, "user:***@") || !strings.Contains(out, "token=***")) {
			t.Errorf("%s does not show the URLs redacted:\n%s", what, out)
		}
	}

	addr := promtest.FreeAddr(t)
	cmd, out, errb := bridgeCmd(t, append(args, "--interval=200ms", "--trackers=none", "--metrics-addr="+addr,
		"--", "sh", "-c", "while [ ! -e stop ]; do sleep 0.1; done")...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(filepath.Join(cmd.Dir, "stop"), nil, 0o600) })
	var metrics string
	waitfor.Cond(t, 2*time.Minute, "/metrics counting a failure of each failing URL, and the answering one's series", func() bool {
		fams, text, err := promtest.Families(addr)
		if err != nil {
			return false
		}
		metrics = text
		failing := 0
		for _, m := range fams["bridge_scrape_failures_total"].GetMetric() {
			if m.GetCounter().GetValue() >= 1 {
				failing++
			}
		}
		return failing == 4 && fams["bridge_prom_app_up"] != nil
	})
	os.WriteFile(filepath.Join(cmd.Dir, "stop"), nil, 0o600)
	if code := exitCode(t, cmd.Wait()); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errb)
	}
	check("/metrics", metrics, true)
	check("stderr", errb.String(), true)
	check("stdout", out.String(), false)
	b, err := os.ReadFile(spoolOf(t, cmd))
	if err != nil {
		t.Fatal(err)
	}
	check("the spool", string(b), false)

	for _, json := range []bool{false, true} {
		sargs := append([]string{"sample", "--trackers=none", "--window=0s"}, args...)
		if json {
			sargs = append(sargs, "--json")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
		sc := exec.CommandContext(ctx, testbin.Bridge(t), sargs...)
		sc.Env = cleanEnv()
		var sout, serr strings.Builder
		sc.Stdout, sc.Stderr = &sout, &serr
		err := sc.Run()
		cancel()
		if code := exitCode(t, err); code != 0 {
			t.Fatalf("bridge sample: exit %d; stderr:\n%s", code, &serr)
		}
		what := fmt.Sprintf("bridge sample (json %v)", json)
		// The detection lists every URL (and the table names the source of
		// each series that arrived within the sample).
		check(what+" stdout", sout.String(), true)
		check(what+" stderr", serr.String(), true)
	}
}
