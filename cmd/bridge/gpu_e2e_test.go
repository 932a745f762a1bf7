package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/promtest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
	"github.com/bridge-dev/bridge/snapshot"
)

// fakeGPU are the series bridge reads from testbin.FakeNVML's GPU through
// GPM and the energy counter, with their units: the fake's percentages as
// ratios, its MiB/s as 10^6 bytes/s. NVLink it does not count: absent.
var fakeGPU = map[string]struct {
	v    float64
	unit string
}{
	"gpu_0_prof_gr_engine_active_ratio":         {0.9, "ratio"},
	"gpu_0_prof_sm_active_ratio":                {0.375, "ratio"},
	"gpu_0_prof_sm_occupancy_ratio":             {0.2, "ratio"},
	"gpu_0_prof_pipe_int_active_ratio":          {0.075, "ratio"},
	"gpu_0_prof_pipe_tensor_active_ratio":       {0.25, "ratio"},
	"gpu_0_prof_pipe_tensor_hmma_active_ratio":  {0.25, "ratio"},
	"gpu_0_prof_pipe_tensor_dfma_active_ratio":  {0, "ratio"},
	"gpu_0_prof_pipe_tensor_dmma_active_ratio":  {0, "ratio"},
	"gpu_0_prof_pipe_tensor_imma_active_ratio":  {0, "ratio"},
	"gpu_0_prof_dram_active_ratio":              {0.625, "ratio"},
	"gpu_0_prof_pipe_fp64_active_ratio":         {0, "ratio"},
	"gpu_0_prof_pipe_fp32_active_ratio":         {0.125, "ratio"},
	"gpu_0_prof_pipe_fp16_active_ratio":         {0.05, "ratio"},
	"gpu_0_prof_pcie_tx_megabytes_per_second":   {1048.576, "megabytes_per_second"},
	"gpu_0_prof_pcie_rx_megabytes_per_second":   {2097.152, "megabytes_per_second"},
	"gpu_0_prof_nvlink_tx_megabytes_per_second": {-1, ""},
	"gpu_0_prof_nvlink_rx_megabytes_per_second": {-1, ""},
}

func closeTo(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// fakeNVMLLib builds the stand-in NVML for bin and returns the variable
// that loads it.
func fakeNVMLLib(t *testing.T, bin string) string {
	t.Helper()
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("needs a C compiler (cc) to build the stand-in libnvidia-ml.so.1: " + err.Error())
	}
	return "LD_LIBRARY_PATH=" + testbin.FakeNVML(t, bin, []string{"cc"})
}

// fakeNVMLEnv returns the variables that load lib (fakeNVMLLib's) and
// the file, t's own, its nvmlShutdown reports GPM counts to: a test that
// shared another's would pass on the other's report.
func fakeNVMLEnv(t *testing.T, lib string) ([]string, string) {
	t.Helper()
	report := filepath.Join(t.TempDir(), "nvml-report")
	return []string{lib, testbin.FakeNVMLReport + "=" + report}, report
}

// wantGPMReport checks the fake NVML's counts: every sample buffer bridge
// allocated freed before nvmlShutdown, none misused, metrics computed.
func wantGPMReport(t *testing.T, report string) {
	t.Helper()
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("the fake NVML wrote no report (nvmlShutdown not called?): %v", err)
	}
	var allocs, frees, misuse, samples, computed int
	if _, err := fmt.Sscanf(string(b), "allocs=%d frees=%d misuse=%d samples=%d computed=%d", &allocs, &frees, &misuse, &samples, &computed); err != nil {
		t.Fatalf("report %q: %v", b, err)
	}
	if allocs != 2 || frees != 2 || misuse != 0 || computed < 1 || samples < 2 {
		t.Errorf("fake NVML: %s; want 2 sample buffers allocated and freed, none misused", strings.TrimSpace(string(b)))
	}
}

// The real binary on a stand-in libnvidia-ml.so.1 (no GPU here): GPU
// activity from GPM and the energy since start, through go-nvml's cgo calls,
// in `bridge sample --json`, and in a job's spool, /metrics, MLflow and W&B
// requests, under the descriptors' names and units; every GPM buffer freed
// before nvmlShutdown.
func TestGPUActivityEndToEnd(t *testing.T) {
	bin := testbin.Bridge(t)
	lib := fakeNVMLLib(t, bin)

	t.Run("sample", func(t *testing.T) {
		env, report := fakeNVMLEnv(t, lib)
		cmd := exec.Command(bin, "sample", "--json", "--scopes=gpu", "--window=300ms")
		cmd.Env = testbin.CleanEnv(env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		began := time.Now()
		err := cmd.Run()
		took := time.Since(began)
		if err != nil {
			t.Fatalf("bridge sample: %v\n%s", err, &errb)
		}
		var got snapshot.Output
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%v\n%s", err, &out)
		}
		byName := map[string]snapshot.Point{}
		for _, p := range got.Metrics {
			byName[p.Name] = p
		}
		for name, want := range fakeGPU {
			p, ok := byName[name]
			switch {
			case want.v < 0 && ok:
				t.Errorf("%s = %v, want absent (the GPU does not count it)", name, p.Value)
			case want.v < 0:
			case !ok:
				t.Errorf("%s missing", name)
			case !closeTo(p.Value.(float64), want.v) || p.Unit != want.unit || p.Scope != "gpu" || !strings.HasPrefix(p.Source, "nvmlGpmMetricsGet(NVML_GPM_METRIC_"):
				t.Errorf("%s = %+v, want %v %s", name, p, want.v, want.unit)
			}
		}
		// The fake's counter grows at its 123.456 W: from the baseline at
		// start to the printed sample's reading, at least the 300 ms
		// window and at most the whole run.
		if p := byName["gpu_0_energy_joules"]; p.Unit != "joules" || p.Value == nil ||
			p.Value.(float64) < 123.456*0.3-0.2 || p.Value.(float64) > 123.456*took.Seconds()+0.2 {
			t.Errorf("gpu_0_energy_joules = %+v, want 123.456 W over 0.3 s to %v", p, took)
		}
		dev := got.Detected["gpu"].(map[string]any)["devices"].([]any)[0].(map[string]any)
		if dev["activity"] != "GPM on" || !strings.HasPrefix(dev["energy"].(string), "since bridge started") {
			t.Errorf("detected GPU %v", dev)
		}
		wantGPMReport(t, report)
	})

	t.Run("job", func(t *testing.T) {
		env, report := fakeNVMLEnv(t, lib)
		srv := mlflowtest.Shared(t)
		exp := uniqueName(t)
		wb := wandbserver.StartTest(t, wandbserver.Options{APIKey: wbKey})
		wb.CreateStartedRun("", "gpu", "gpurun01")
		addr := promtest.FreeAddr(t)
		cmd, _, errb := bridgeCmd(t, "--interval=300ms", "--start-timeout=10m", "--flush-timeout=10m",
			"--trackers=mlflow,wandb", "--keep-spool", "--scopes=gpu", "--metrics-addr="+addr,
			"--", "sh", "-c", "while [ ! -e stop ]; do sleep 0.05; done")
		cmd.Env = append(cmd.Env, env...)
		cmd.Env = append(cmd.Env, "HOME="+cmd.Dir, "MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp,
			"WANDB_BASE_URL="+wb.URL(), "WANDB_API_KEY="+wbKey, "WANDB_PROJECT=gpu", "WANDB_RUN_ID=gpurun01")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stop := func() { _ = os.WriteFile(filepath.Join(cmd.Dir, "stop"), nil, 0o600) }
		waited := false
		t.Cleanup(func() {
			if !waited { // failed before its wait: end the child, then bridge
				stop()
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})

		var fams map[string]*dto.MetricFamily
		waitfor.Cond(t, 2*time.Minute, "GPU activity on /metrics", func() bool {
			f, _, err := promtest.Families(addr)
			fams = f
			return err == nil && f["bridge_gpu_prof_sm_active_ratio"] != nil
		})
		for name, want := range map[string]float64{
			"bridge_gpu_prof_sm_active_ratio":               0.375,
			"bridge_gpu_prof_pipe_tensor_active_ratio":      0.25,
			"bridge_gpu_prof_dram_active_ratio":             0.625,
			"bridge_gpu_prof_pcie_tx_bytes_per_second":      1048576000,
			"bridge_gpu_prof_pcie_rx_bytes_per_second":      2097152000,
			"bridge_gpu_prof_pipe_tensor_hmma_active_ratio": 0.25,
		} {
			f := fams[name]
			if f == nil || len(f.Metric) != 1 || f.GetType() != dto.MetricType_GAUGE || !closeTo(f.Metric[0].GetGauge().GetValue(), want) || familyMetric(f, map[string]string{"gpu": "0"}) == nil {
				t.Errorf("/metrics %s = %v, want one gauge %v with gpu=\"0\"", name, f, want)
			}
		}
		if f := fams["bridge_gpu_energy_joules_total"]; f == nil || f.GetType() != dto.MetricType_COUNTER || f.Metric[0].GetCounter().GetValue() <= 0 {
			t.Errorf("/metrics bridge_gpu_energy_joules_total = %v, want a counter above 0", f)
		}

		// inMLflow reports whether bridge's run in exp holds key, with
		// value want unless want < 0.
		inMLflow := func(key string, want float64) bool {
			ids := srv.RunIDs(t, exp)
			if len(ids) != 1 {
				return false
			}
			for _, m := range srv.History(t, ids[0], key) {
				if want < 0 || closeTo(m.Value, want) {
					return true
				}
			}
			return false
		}
		waitfor.Cond(t, 2*time.Minute, "MLflow and W&B receiving GPU activity", func() bool {
			return inMLflow("system/gpu_0_prof_sm_active_ratio", 0.375) && wandbHas(wb, "system.gpu_0_prof_sm_active_ratio", 0.375)
		})
		if !inMLflow("system/gpu_0_energy_joules", -1) || !wandbHas(wb, "system.gpu_0_energy_joules", -1) {
			t.Error("gpu_0_energy_joules not sent to MLflow and W&B")
		}
		stop()
		waited = true
		if code := exitCode(t, waitExit(t, cmd, errb, 2*time.Minute)); code != 0 {
			t.Fatalf("bridge exited %d\n%s", code, errb)
		}
		var spooledGPM int
		for _, s := range spooled(t, cmd) {
			if v, ok := s.Value("gpu_0_prof_sm_active_ratio"); ok {
				spooledGPM++
				if v != 0.375 {
					t.Errorf("spooled gpu_0_prof_sm_active_ratio = %v", v)
				}
			}
		}
		if spooledGPM == 0 {
			t.Error("no GPU activity in the spool")
		}
		// The job's GPU figures, one value each: on the run as metrics,
		// the energy the same as its tag, and in W&B's summary.
		run := srv.GetRun(t, srv.RunIDs(t, exp)[0])
		for _, k := range []string{"system/gpu_hours", "system/gpu_memory_peak_megabytes", "system/energy_gpus_joules"} {
			if m, ok := run.Latest[k]; !ok || m.Value <= 0 || m.Step != 0 {
				t.Errorf("figure %s = %+v (present %v), want one value above 0 at step 0", k, m, ok)
			}
		}
		if e := run.Latest["system/energy_gpus_joules"].Value; strconv.FormatFloat(e, 'f', 1, 64) != run.Tags["bridge.energy_gpus_joules"] {
			t.Errorf("energy figure %v, tag %q", e, run.Tags["bridge.energy_gpus_joules"])
		}
		if wr, ok := wb.Run(wb.Entity(), "gpu", "gpurun01"); !ok || wr.Summary()["bridge/gpu_hours"] == nil {
			t.Errorf("W&B run's summary lacks the job's GPU-hours: %v", wr.Summary())
		}
		wantGPMReport(t, report)
	})
}

// wandbHas reports whether bridge's events file in the W&B run (bridge
// writes as a second writer) holds key, with its node label
// (key/l:<node>), and value want unless want < 0.
func wandbHas(s *wandbserver.Server, key string, want float64) bool {
	run, ok := s.Run(s.Entity(), "gpu", "gpurun01")
	if !ok {
		return false
	}
	var lines []string
	for _, w := range run.Writers {
		lines = append(lines, run.File(w.ID, wandbserver.EventsFile).Contents()...)
	}
	for _, line := range lines {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		for k, v := range m {
			f, isNum := v.(float64)
			if isNum && strings.HasPrefix(k, key+"/l:") && (want < 0 || closeTo(f, want)) {
				return true
			}
		}
	}
	return false
}
