package main

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/waitfor"
)

// A tracker whose TLS certificate bridge does not trust is a configuration
// error, not an outage: bridge says so at once, naming what to set, does
// not retry, the child starts without waiting out --start-timeout (10m
// here), and bridge does not linger after it (--flush-timeout 10m here).
// The deadlines below are generous bounds far under those timeouts, not
// speed claims.
func TestUntrustedCertificateIsConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name, hint string
		env        func(url string) []string
	}{
		{"mlflow", "MLFLOW_TRACKING_SERVER_CERT_PATH", func(url string) []string { return []string{"MLFLOW_TRACKING_URI=" + url} }},
		{"wandb", "SSL_CERT_FILE", func(url string) []string {
			return []string{"WANDB_BASE_URL=" + url, "WANDB_API_KEY=" + strings.Repeat("k", 40), "WANDB_PROJECT=p"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conns atomic.Int32
			ts := httptest.NewUnstartedServer(http.NotFoundHandler())
			ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
			ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake errors bridge causes
			ts.StartTLS()
			t.Cleanup(ts.Close)

			cmd, _, errb := bridgeCmd(t, "--start-timeout=10m", "--flush-timeout=10m", "--interval=200ms", "--",
				"sh", "-c", "touch started; sleep 0.5; exit 3")
			cmd.Env = append(cmd.Env, tc.env(ts.URL)...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			waitfor.File(t, time.Minute, filepath.Join(cmd.Dir, "started"))
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatalf("bridge still runs a minute after the child started:\n%s", errb)
			}
			if code := exitCode(t, err); code != 3 {
				t.Fatalf("exit %d, want the child's 3; stderr:\n%s", code, errb)
			}
			// Said once in the log (and again in the end-of-run table).
			out, said := errb.String(), 0
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "level=") && strings.Contains(l, "not trusted") && strings.Contains(l, tc.hint) {
					said++
				}
			}
			if said != 1 {
				t.Errorf("%d log lines say the certificate is not trusted naming %s, want 1; stderr:\n%s", said, tc.hint, out)
			}
			if n := conns.Load(); n != 1 {
				t.Errorf("%d connections to the tracker, want 1: a certificate error is not retried", n)
			}
		})
	}
}
