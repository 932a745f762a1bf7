// Package promtest starts the real Prometheus server and node-exporter
// (Debian packages prometheus and prometheus-node-exporter) on 127.0.0.1
// for tests, and stops them in t.Cleanup.
package promtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Binaries, overridable for a non-Debian layout.
var (
	PrometheusBin   = envOr("BRIDGE_TEST_PROMETHEUS", "/usr/bin/prometheus")
	NodeExporterBin = envOr("BRIDGE_TEST_NODE_EXPORTER", "/usr/bin/prometheus-node-exporter")
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// require skips loudly when bin is missing, naming the Debian package.
func require(t testing.TB, bin, pkg, env string) {
	t.Helper()
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("SKIP: %s not found (%v): install the Debian package %q (apt-get install %s) or set %s", bin, err, pkg, pkg, env)
	}
}

// FreeAddr is a free 127.0.0.1 port, as host:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// start runs a server and waits (up to 60 s, polling) until ready answers 200.
func start(t testing.TB, name, ready string, args ...string) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("%s exited before it was ready: %v\n%s", name, err, &out)
		default:
		}
		if resp, err := http.Get(ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready at %s after 60 s\n%s", name, ready, &out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// NodeExporter starts node-exporter with the meminfo and loadavg
// collectors only and returns its /metrics URL.
func NodeExporter(t testing.TB) string {
	t.Helper()
	require(t, NodeExporterBin, "prometheus-node-exporter", "BRIDGE_TEST_NODE_EXPORTER")
	addr := FreeAddr(t)
	u := "http://" + addr + "/metrics"
	start(t, NodeExporterBin, u, "--web.listen-address="+addr,
		"--collector.disable-defaults", "--collector.meminfo", "--collector.loadavg")
	return u
}

// Server is a running Prometheus.
type Server struct{ URL string }

// Prometheus starts Prometheus scraping target (host:port) every second,
// with its storage in a temporary directory.
func Prometheus(t testing.TB, target string) *Server {
	t.Helper()
	require(t, PrometheusBin, "prometheus", "BRIDGE_TEST_PROMETHEUS")
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: bridge\n    static_configs:\n      - targets: [%q]\n", target)
	file := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := FreeAddr(t)
	s := &Server{URL: "http://" + addr}
	start(t, PrometheusBin, s.URL+"/-/ready", "--config.file="+file, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	return s
}

// Sample is one stored value of a series.
type Sample struct {
	Labels map[string]string
	TimeMs int64
	Value  float64
}

// Raw returns every stored value of the series selected by selector in the
// last window (an instant query of a range vector returns raw samples).
func (s *Server) Raw(t testing.TB, selector string, window time.Duration) []Sample {
	t.Helper()
	q := fmt.Sprintf("%s[%ds]", selector, int(window.Seconds()))
	resp, err := http.Get(s.URL + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatalf("querying Prometheus: %v", err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("decoding Prometheus' answer to %s: %v", q, err)
	}
	if body.Status != "success" {
		t.Fatalf("Prometheus query %s: %s", q, body.Error)
	}
	var out []Sample
	for _, r := range body.Data.Result {
		for _, v := range r.Values {
			ts, _ := v[0].(float64)
			str, _ := v[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			if err != nil {
				t.Fatalf("value %q of %s: %v", str, selector, err)
			}
			// Prometheus returns seconds with millisecond decimals.
			out = append(out, Sample{Labels: r.Metric, TimeMs: int64(ts*1000 + 0.5), Value: f})
		}
	}
	return out
}

// Families GETs http://addr/metrics and parses the text format; it returns
// the body too. An error means no answer yet, or one that does not parse.
func Families(addr string) (map[string]*dto.MetricFamily, string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, string(b), fmt.Errorf("parsing /metrics: %w", err)
	}
	return fams, string(b), nil
}
