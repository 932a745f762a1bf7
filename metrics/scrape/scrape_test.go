package scrape

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/metrics"
)

// serve answers with a fixture file, as dcgm-exporter would.
func serve(t *testing.T, file string) string {
	t.Helper()
	body, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

func points(t *testing.T, c *Collector) map[string]float64 {
	t.Helper()
	pts, err := collecttest.Collect(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, p := range pts {
		if _, dup := out[p.Name()]; dup {
			t.Errorf("point %s twice", p.Name())
		}
		// A per-GPU series of a declared template or of a profiling
		// field, or a passed-through one.
		switch d := p.Desc; {
		case d.Of != nil && (slices.Contains(Series, d.Of) || strings.HasPrefix(d.Of.Name, "prof_")):
			if d.Name != metrics.GPUName(d.GPU, d.MIG, d.Of.Name) {
				t.Errorf("%s is bound to gpu %d mig %d of %s", d.Name, d.GPU, d.MIG, d.Of.Name)
			}
		case d.Of == nil && d.Scope == metrics.ScopeProm:
		default:
			t.Errorf("%s: undeclared %+v", p.Name(), *d)
		}
		out[p.Name()] = p.Value
	}
	return out
}

func requirePoints(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("missing %s (got %v)", k, got)
		case g != v:
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
}

func TestDCGMWithoutKubernetes(t *testing.T) {
	c := newTest(Options{URLs: []string{serve(t, "testdata/dcgm.txt")}})
	got := points(t, c)
	requirePoints(t, got, map[string]float64{
		"gpu_0_utilization_percentage":            97,
		"gpu_1_utilization_percentage":            0,
		"gpu_0_memory_used_megabytes":             61440 * (1 << 20) / 1e6, // MiB to 10^6 bytes
		"gpu_0_power_usage_watts":                 312.457,
		"gpu_0_temperature_celsius":               41,
		"gpu_1_temperature_celsius":               38,
		"gpu_0_sm_clock_mhz":                      1980,
		"gpu_1_last_xid_count":                    79,
		"gpu_0_prof_gr_engine_active_ratio":       0.912345,
		"gpu_0_prof_pipe_tensor_active_ratio":     0.5,
		"gpu_0_prof_pcie_tx_megabytes_per_second": 25,
	})
	for k := range got {
		if strings.Contains(k, "enc_util") || strings.HasPrefix(k, "prom_") {
			t.Errorf("unmapped series %s sent without --scrape-passthrough", k)
		}
	}
	if len(got) != 15 {
		t.Errorf("%d points, want 15: %v", len(got), got)
	}
}

func TestDCGMKubernetesOnlyThisPod(t *testing.T) {
	u := serve(t, "testdata/dcgm_k8s.txt")
	got := points(t, newTest(Options{URLs: []string{u}, Pod: "train-0", Namespace: "ml"}))
	requirePoints(t, got, map[string]float64{"gpu_0_utilization_percentage": 97, "gpu_0_temperature_celsius": 41})
	for k := range got {
		if strings.HasPrefix(k, "gpu_1_") {
			t.Errorf("%s: GPU 1 belongs to no pod (pod=\"\"), yet was kept", k)
		}
	}
	// Another pod's identity: none of these GPUs.
	if got := points(t, newTest(Options{URLs: []string{u}, Pod: "other", Namespace: "ml"})); len(got) != 0 {
		t.Errorf("pod other/ml got %v, want nothing", got)
	}
	// Identity unknown (not in Kubernetes): every GPU.
	if got := points(t, newTest(Options{URLs: []string{u}})); got["gpu_1_temperature_celsius"] != 38 {
		t.Errorf("without an identity GPU 1 is missing: %v", got)
	}
}

// Where NVML works in the container, a dcgm series is keyed by NVML's index
// for its UUID, and GPUs NVML does not see (other containers') are dropped.
func TestDCGMIndexFromNVML(t *testing.T) {
	nvml := map[string]int{"GPU-8f6f2c11-3b1a-4a77-9d27-1a2b3c4d5e6f": 0} // the node's GPU 1, this container's 0
	got := points(t, newTest(Options{URLs: []string{serve(t, "testdata/dcgm.txt")}, GPUIndexes: func() map[string]int { return nvml }}))
	want := map[string]float64{
		"gpu_0_temperature_celsius": 38, "gpu_0_power_usage_watts": 71.2, "gpu_0_sm_clock_mhz": 1410,
		"gpu_0_utilization_percentage": 0, "gpu_0_memory_used_megabytes": 0, "gpu_0_last_xid_count": 79,
	}
	requirePoints(t, got, want)
	if len(got) != len(want) {
		t.Errorf("got %v, want only the GPU NVML sees", got)
	}
	// NVML off (nil map): the node's indexes.
	got = points(t, newTest(Options{URLs: []string{serve(t, "testdata/dcgm.txt")}, GPUIndexes: func() map[string]int { return nil }}))
	requirePoints(t, got, map[string]float64{"gpu_1_temperature_celsius": 38, "gpu_0_temperature_celsius": 41})
}

func TestDCGMMIG(t *testing.T) {
	got := points(t, newTest(Options{URLs: []string{serve(t, "testdata/dcgm_mig.txt")}, Pod: "train-0", Namespace: "ml"}))
	want := map[string]float64{
		"gpu_0_mig_7_memory_used_megabytes":       3000 * (1 << 20) / 1e6,
		"gpu_0_mig_7_prof_gr_engine_active_ratio": 0.25,
	}
	requirePoints(t, got, want)
	if len(got) != len(want) {
		t.Errorf("got %v, want only this pod's slice 7", got)
	}
	all := points(t, newTest(Options{URLs: []string{serve(t, "testdata/dcgm_mig.txt")}}))
	requirePoints(t, all, map[string]float64{"gpu_0_mig_2_memory_used_megabytes": 12000 * (1 << 20) / 1e6})
}

func TestIncludeExcludePassthrough(t *testing.T) {
	u := serve(t, "testdata/dcgm.txt")
	got := points(t, newTest(Options{URLs: []string{u}, Include: regexp.MustCompile(`^DCGM_FI_DEV_`), Exclude: regexp.MustCompile(`TEMP|XID`), Passthrough: true}))
	requirePoints(t, got, map[string]float64{"gpu_0_utilization_percentage": 97})
	for k := range got {
		if strings.Contains(k, "temperature") || strings.Contains(k, "xid") || strings.Contains(k, "prof_") {
			t.Errorf("%s passed the filters", k)
		}
	}
	// DCGM series bridge does not map never pass through: they are GPU
	// series of the node, and prom_ is for other exporters.
	if _, ok := got["prom_DCGM_FI_DEV_ENC_UTIL__Hostname_node-a"]; ok {
		t.Error("unmapped DCGM series passed through")
	}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("# TYPE app_queue_length gauge\napp_queue_length{queue=\"in put\",shard=\"2\"} 17\n# TYPE app_latency_seconds histogram\napp_latency_seconds_bucket{le=\"+Inf\"} 3\napp_latency_seconds_sum 1\napp_latency_seconds_count 3\nnan_gauge NaN\n"))
	}))
	defer other.Close()
	got = points(t, newTest(Options{URLs: []string{other.URL}, Passthrough: true}))
	want := map[string]float64{"prom_app_queue_length__queue_in_put__shard_2": 17}
	requirePoints(t, got, want)
	// NaN leaves the collector, for the Sampler's check to refuse and count.
	if len(got) != 2 || !math.IsNaN(got["prom_nan_gauge"]) {
		t.Errorf("got %v, want only the gauges (histograms have no single value)", got)
	}
	if got := points(t, newTest(Options{URLs: []string{other.URL}})); len(got) != 0 {
		t.Errorf("without passthrough got %v", got)
	}
}

// newTest waits for every request (Grace a minute): these tests check what
// is mapped, not when it arrives.
func newTest(o Options) *Collector {
	if o.Grace == 0 {
		o.Grace = time.Minute
	}
	return New(o)
}

// A failing target adds nothing, is counted, and is logged once per failure
// streak, and once when it answers again; Collect never fails.
func TestFailuresCountedLoggedOnce(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	body, _ := os.ReadFile("testdata/dcgm.txt")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	u := srv.URL + "/metrics"
	c := newTest(Options{URLs: []string{u}, Log: log})
	for range 3 {
		if got := points(t, c); len(got) != 0 {
			t.Fatalf("failing target gave %v", got)
		}
	}
	down.Store(false)
	if got := points(t, c); got["gpu_0_utilization_percentage"] != 97 {
		t.Fatalf("recovered target gave %v", got)
	}
	down.Store(true)
	points(t, c)
	if f := c.Failures(); f[u] != 4 {
		t.Errorf("failures %v, want 4", f)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if n := strings.Count(out, "cannot scrape"); n != 2 {
		t.Errorf("logged %d failure warnings, want 2 (one per streak):\n%s", n, out)
	}
	if !strings.Contains(out, "answers again") {
		t.Errorf("recovery not logged:\n%s", out)
	}
}

// A hung target never gets a second request while one is in flight, and
// never keeps another target's series out of the samples.
func TestHungTargetDoesNotHoldOthers(t *testing.T) {
	var hungCalls atomic.Int32
	hang := make(chan struct{})
	body, _ := os.ReadFile("testdata/dcgm.txt")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			hungCalls.Add(1)
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hang) })
	c := New(Options{URLs: []string{srv.URL + "/hang", srv.URL + "/metrics"}, Timeout: 10 * time.Minute, Grace: 20 * time.Millisecond})
	end := time.Now().Add(time.Minute)
	for n := 0; ; n++ {
		if got := points(t, c); got["gpu_0_utilization_percentage"] == 97 && n >= 3 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the healthy target's series never arrived beside a hung one")
		}
	}
	if n := hungCalls.Load(); n != 1 {
		t.Errorf("the hung target got %d requests, want 1 (no second while one is in flight)", n)
	}
	if f := c.Failures(); f[srv.URL+"/hang"] != 0 {
		t.Errorf("failures %v: the hung request has not ended, nothing to count yet", f)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

var _ metrics.Collector = (*Collector)(nil)
