package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/promtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
)

// A real Prometheus (Debian package prometheus) scrapes bridge's /metrics
// while bridge posts to a real MLflow server: for the same sample (same
// timestamp, to the millisecond) both hold the same working set, to the
// byte once MLflow's megabytes are multiplied by 10^6.
func TestPrometheusAndMLflowAgree(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	g := cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 512 << 20})
	srv := mlflowtest.Shared(t)
	addr := promtest.FreeAddr(t)
	prom := promtest.Prometheus(t, addr)

	j := newJob(t, srv.URL, "--interval=1s", "--metrics-addr="+addr, "--",
		"sh", "-c", "while [ ! -e stop ]; do sleep 0.2; done")
	j.inCgroup(g)
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- j.cmd.Wait() }()
	stop := func() {
		os.WriteFile(filepath.Join(j.dir, "stop"), nil, 0o600)
	}
	t.Cleanup(stop)

	// The run id is in the spool's start record once bridge has started.
	var runID string
	deadline := time.Now().Add(2 * time.Minute)
	for runID == "" {
		if _, _, attempts, err := spooltest.ReadFile(j.spool); err == nil && len(attempts) > 0 {
			runID = attempts[0].Start.Runs["mlflow"]
		}
		if runID == "" {
			select {
			case err := <-exited:
				t.Fatalf("bridge exited early: %v\nstderr:\n%s", err, &j.err)
			case <-time.After(200 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no MLflow run in the spool after 2 minutes; stderr:\n%s", &j.err)
			}
		}
	}

	// Poll both until they share at least three samples: no assumption on
	// where Prometheus' scrapes fall.
	var matched int
	for {
		hist := srv.History(t, runID, "system/container_memory_working_set_megabytes")
		byTime := map[int64]float64{}
		for _, m := range hist {
			byTime[m.Timestamp] = m.Value
		}
		matched = 0
		for _, p := range prom.Raw(t, `container_memory_working_set_bytes{job="bridge"}`, 10*time.Minute) {
			if p.Labels["run_id"] != runID {
				t.Fatalf("Prometheus series labelled run_id=%q, want %q", p.Labels["run_id"], runID)
			}
			mb, ok := byTime[p.TimeMs]
			if !ok {
				continue
			}
			if bytes := math.Round(mb * 1e6); bytes != p.Value {
				t.Fatalf("sample at %d ms: MLflow %v MB (%v bytes), Prometheus %v bytes", p.TimeMs, mb, bytes, p.Value)
			}
			if p.Value <= 0 || p.Value != math.Trunc(p.Value) {
				t.Fatalf("working set %v is not a positive whole number of bytes", p.Value)
			}
			matched++
		}
		if matched >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes only %d samples are in both MLflow (%d values) and Prometheus; stderr:\n%s", matched, len(hist), &j.err)
		}
		time.Sleep(time.Second)
	}
	// bridge's own health reached Prometheus too, and the cgroup's CPU
	// counter under cAdvisor's name.
	for {
		sent := prom.Raw(t, `bridge_sink_samples_sent_total{sink="mlflow"}`, 10*time.Minute)
		cpu := prom.Raw(t, `container_cpu_usage_seconds_total{job="bridge"}`, 10*time.Minute)
		if len(sent) > 0 && sent[len(sent)-1].Value > 0 && len(cpu) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridge_sink_samples_sent_total{sink=\"mlflow\"} never above 0 (%v), or no container_cpu_usage_seconds_total (%v)", sent, cpu)
		}
		time.Sleep(time.Second)
	}
	stop()
	select {
	case err := <-exited:
		if code := exitCode(t, err); code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("bridge did not exit 2 minutes after its child was told to stop; stderr:\n%s", &j.err)
	}
	t.Logf("%d samples matched to the byte", matched)
}

// --scrape through the whole pipeline: the real node-exporter's series
// reach the spool (what the trackers get) under prom_, filtered by name; a
// dead target beside it is never fatal.
func TestScrapeRealNodeExporterIntoSpool(t *testing.T) {
	u := promtest.NodeExporter(t)
	dead := "http://" + promtest.FreeAddr(t) + "/metrics"
	cmd, _, errb := bridgeCmd(t, "--interval=300ms", "--trackers=none", "--scrape="+u, "--scrape="+dead,
		"--scrape-include=^node_memory_MemTotal_bytes$", "--scrape-passthrough", "--", "sleep", "1.5")
	if code := exitCode(t, cmd.Run()); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errb)
	}
	found := 0
	for _, s := range spooled(t, cmd) {
		if v, ok := s.Value("prom_node_memory_MemTotal_bytes"); ok {
			if v <= 0 {
				t.Fatalf("prom_node_memory_MemTotal_bytes = %v", v)
			}
			found++
		}
		if _, ok := s.Value("prom_node_load1"); ok {
			t.Fatal("prom_node_load1 passed --scrape-include")
		}
	}
	if found == 0 {
		t.Fatalf("no spooled sample holds prom_node_memory_MemTotal_bytes; stderr:\n%s", errb)
	}
	if n := strings.Count(errb.String(), "cannot scrape"); n != 1 {
		t.Errorf("the dead target was reported %d times, want once per failure streak; stderr:\n%s", n, errb)
	}
}
