package main

// Numbers with no range, through the real binary (docs/reliability.md,
// "The number rule" and "The counter rule"): a value outside its series'
// range never leaves its collector and is counted in its health; a number
// out of range in a tag is refused by the report; a counter that steps
// back is no wrap and no spike; and nothing of it costs the child's exit
// status.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/rapl"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/snapshot"
	"github.com/bridge-dev/bridge/tracker"
)

// dcgm1e306 is a dcgm-exporter whose GPU 0 says 1e306 for its utilization
// and power, beside a sane temperature, and another exporter's series of
// 1e306 (passed through: no unit, any finite value).
const dcgm1e306 = `# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",Hostname="node-a"} 1e306
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",Hostname="node-a"} 1e306
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",Hostname="node-a"} 41
# TYPE app_huge gauge
app_huge 1e306
`

// A scraped 1e306 in a multi-node job's node (whose end records its
// figures, where a mean of 1e306 once overflowed and panicked): the child's
// exit 5 is bridge's, the end record and table are written, the values out
// of range are refused, counted in the end-of-run table and said once a
// series, and the rest of the answer is sampled. `bridge sample` shows the
// same count.
func TestScraped1e306Refused(t *testing.T) {
	exporter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, dcgm1e306)
	}))
	defer exporter.Close()

	cmd, _, errb := bridgeCmd(t, "--interval=200ms", "--trackers=none", "--scrape="+exporter.URL, "--scrape-passthrough",
		"--", "sh", "-c", "sleep 1.5; exit 5")
	cmd.Env = append(cmd.Env, "BRIDGE_JOB_KEY=e2e:numbers", "BRIDGE_NODE_ID=node-0", "BRIDGE_NODES=1")
	if code := exitCode(t, cmd.Run()); code != 5 {
		t.Fatalf("bridge exited %d, want the child's 5\n%s", code, errb)
	}
	stderr := errb.String()
	if strings.Contains(stderr, "panic") || strings.Contains(stderr, "internal error") {
		t.Errorf("a panic in the end:\n%s", stderr)
	}
	if !strings.Contains(stderr, "end of run") || !strings.Contains(stderr, "collector scrape") || !strings.Contains(stderr, "outside the series' range") {
		t.Errorf("the end-of-run table does not count the values refused:\n%s", stderr)
	}
	for _, series := range []string{"gpu_0_utilization_percentage", "gpu_0_power_usage_watts"} {
		if n := strings.Count(stderr, "series="+series); n != 1 {
			t.Errorf("%d warnings name %s, want one:\n%s", n, series, stderr)
		}
	}
	samples, _, attempts, err := spooltest.ReadFile(spoolPath(t, cmd))
	if err != nil || len(attempts) != 1 || attempts[0].End == nil || attempts[0].End.ExitCode == nil || *attempts[0].End.ExitCode != 5 {
		t.Fatalf("the spool's end record: %v %+v", err, attempts)
	}
	if len(samples) < 2 {
		t.Fatalf("%d samples spooled", len(samples))
	}
	for _, s := range samples {
		for _, name := range []string{"gpu_0_utilization_percentage", "gpu_0_power_usage_watts"} {
			if v, ok := s.Value(name); ok {
				t.Errorf("sample %d holds %s = %v", s.Seq, name, v)
			}
		}
		if v, ok := s.Value("gpu_0_temperature_celsius"); !ok || v != 41 {
			t.Errorf("sample %d: the in-range temperature %v (%v)", s.Seq, v, ok)
		}
		if v, ok := s.Value("prom_app_huge"); !ok || v != 1e306 {
			t.Errorf("sample %d: the passed-through series %v (%v), want 1e306 (finite, no unit)", s.Seq, v, ok)
		}
	}

	// bridge sample goes through the same check.
	for _, asJSON := range []bool{false, true} {
		args := []string{"sample", "--trackers=none", "--window=100ms", "--scrape=" + exporter.URL}
		if asJSON {
			args = append(args, "--json")
		}
		sc, out, serr := bridgeCmd(t, args...)
		if code := exitCode(t, sc.Run()); code != 0 {
			t.Fatalf("bridge %v exited %d\n%s", args, code, serr)
		}
		if strings.Contains(out.String(), "gpu_0_utilization_percentage") {
			t.Errorf("bridge %v shows the refused value:\n%s", args, out)
		}
		if !asJSON {
			if !strings.Contains(out.String(), "scrape: ok in") || !strings.Contains(out.String(), "2 values out of range left out") {
				t.Errorf("bridge sample does not count the values refused:\n%s", out)
			}
			continue
		}
		var got snapshot.Output
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		i := slices.IndexFunc(got.Collectors, func(h snapshot.Health) bool { return h.Name == "scrape" })
		if i < 0 || got.Collectors[i].Refused != 2 || !strings.Contains(got.Collectors[i].RefusedLast, "outside its range") {
			t.Errorf("bridge sample --json collectors %+v: want scrape's 2 values refused", got.Collectors)
		}
	}
}

// The same 1e306 in a tag of a real MLflow run: node-1 of a two-node job
// ends, its peak and its figures are then overwritten with 1e306 (as a
// broken or hostile writer would), and node-0, ending last with exit 5,
// writes the job's report: its exit status is bridge's, the report is on
// the run, and `bridge report` and `bridge report --json` print it, the
// values refused and counted.
func TestTagOf1e306Refused(t *testing.T) {
	j := newRJob(t, 2)
	start := func(id, child string) (*exec.Cmd, *syncbuf.Buffer) {
		dir := t.TempDir()
		cmd := exec.Command(j.bridge, "--interval", "500ms", "--start-timeout", "1m", "--flush-timeout", "1m", "--", "/bin/sh", "-c", child)
		cmd.Dir = dir
		cmd.Env = cleanEnv("MLFLOW_TRACKING_URI="+j.srv.URL, "MLFLOW_EXPERIMENT_NAME="+j.exp, "TMPDIR="+dir,
			"BRIDGE_JOB_KEY="+j.key, "BRIDGE_NODE_ID="+id, "BRIDGE_NODES=2", "SHARED="+j.sharedDir)
		var errb syncbuf.Buffer
		cmd.Stderr = &errb
		cmd.WaitDelay = 10 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			if t.Failed() {
				t.Logf("%s: bridge's stderr:\n%s", id, errb.String())
			}
		})
		return cmd, &errb
	}
	node0, err0 := start("node-0", `while [ ! -e "$SHARED/go" ]; do sleep 0.05; done; exit 5`)
	node1, _ := start("node-1", "sleep 1")
	if code := exitCode(t, node1.Wait()); code != 0 {
		t.Fatalf("node-1 exited %d", code)
	}
	run := j.run(t).Info.RunID
	// node-1's line on the job's run, three of its figures 1e306.
	fields := tracker.ParseLine(j.srv.GetRun(t, run).Tags[tracker.StateTag("node-1", "")])
	fields["ws_peak_mb"], fields["gpu_util_pct"], fields["cpu_mean"] = "1e306", "1e306", "1e306"
	var forged []tracker.Field
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		forged = append(forged, tracker.Field{Name: k, Value: fields[k]})
	}
	setTag(t, j.srv.URL, run, tracker.StateTag("node-1", ""), tracker.FormatLine(forged))
	if err := os.WriteFile(filepath.Join(j.sharedDir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, node0.Wait()); code != 5 {
		t.Fatalf("node-0 exited %d, want its child's 5\n%s", code, err0)
	}
	if s := err0.String(); strings.Contains(s, "panic") || strings.Contains(s, "internal error") {
		t.Errorf("node-0's end panicked:\n%s", s)
	}

	checkReport := func(what string, rep *report.Report) {
		t.Helper()
		n1 := rowsByNode(rep)["node-1"]
		if rep.ValuesRefused != 3 || n1.PeakWorkingSetMB != nil || n1.GPUUtilizationPercent != nil || n1.CPUMeanCores != nil ||
			!strings.Contains(strings.Join(rep.Notes, "\n"), "node-1: 3 out of range, left out") {
			t.Errorf("%s: want node-1's three values refused and named:\n%s", what, rep.JSON())
		}
	}
	b, ok := j.srv.Artifact(t, run, jobrun.ReportJSON)
	var onRun report.Report
	if !ok || json.Unmarshal(b, &onRun) != nil {
		t.Fatalf("node-0's end wrote no report on the run: %s", b)
	}
	checkReport("the run's "+jobrun.ReportJSON, &onRun)
	checkReport("bridge report --json", j.report(t, run))

	cmd := exec.Command(j.bridge, "report", run)
	cmd.Env = cleanEnv("MLFLOW_TRACKING_URI=" + j.srv.URL)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if code := exitCode(t, cmd.Run()); code != 0 || strings.Contains(errb.String(), "panic") {
		t.Fatalf("bridge report exited %d:\n%s", code, &errb)
	}
	if !strings.Contains(out.String(), "note: node-1: 3 out of range, left out") {
		t.Errorf("bridge report:\n%s", &out)
	}
}

// setTag sets a tag on an MLflow run through the REST API.
func setTag(t *testing.T, server, run, key, value string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"run_id": run, "key": key, "value": value})
	resp, err := http.Post(server+"/api/2.0/mlflow/runs/set-tag", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("set-tag %s: %s %s", key, resp.Status, b)
	}
}

// RAPL and InfiniBand counters that step back by 1, in a fixture /sys:
// package 0's energy_uj 1 µJ lower, far from its maximum (once read as a
// wrap: 261,827 W, 262 kJ), and mlx5_0's receive counter 1 word lower
// (once read as a reset: a 16 GB/s spike). No sample holds a power or a
// rate above what did not move, the end-of-run table's energy stays near
// 0 J, each step is logged, and the child's exit 7 is bridge's.
func TestCountersStepBackByOne(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it mounts a fixture tree over /sys/class in a private mount namespace (scripts/test.sh runs as root)")
	}
	if _, err := exec.LookPath("mount"); err != nil {
		t.Skip("needs mount(8) (util-linux) to set up the fixture's mount namespace")
	}
	root := hwFixture(t)
	const rcv = "class/infiniband/mlx5_0/ports/1/counters/port_rcv_data"
	const uj = "class/powercap/intel-rapl:0/energy_uj"
	writeTree(t, root, map[string]string{rcv: "4000000000\n"})
	dir := t.TempDir()
	spoolFile := filepath.Join(dir, "spool.jsonl")
	job := inFixtureNS(t, root, "--interval=300ms", "--trackers=none", "--scopes=node", "--",
		"sh", "-c", "while [ ! -e stop ]; do sleep 0.05; done; exit 7")
	job.Dir = dir
	job.Env = append(job.Env, "BRIDGE_SPOOL="+spoolFile)
	var jobErr syncbuf.Buffer
	job.Stdout, job.Stderr = &jobErr, &jobErr
	j := startStoppable(t, job, dir, nil)
	stop, exited := j.stop, j.exited
	samples := func() []metrics.Sample { return spoolSamples(t, spoolFile) }
	recv := metrics.InfinibandReceiveRate.For("mlx5_0", "1").Name
	counted := func(n int) func() bool {
		return func() bool {
			k := 0
			for _, s := range samples() {
				_, e := s.Value(metrics.NodeCPUEnergy.Name)
				_, r := s.Value(recv)
				if e && r {
					k++
				}
			}
			return k >= n
		}
	}
	waitfor.Cond(t, 2*time.Minute, "a sample with the node's CPU energy and mlx5_0's rate", counted(1))
	writeTree(t, root, map[string]string{uj: "999999\n", rcv: "3999999999\n"})
	// Two more counted samples: the step back was read, and the next
	// interval counted from it.
	before := len(samples())
	waitfor.Cond(t, 2*time.Minute, "two samples after the step back", func() bool {
		ss := samples()
		return len(ss) >= before+3 && counted(3)()
	})
	stop()
	select {
	case <-exited:
		if code := exitCode(t, j.err); code != 7 {
			t.Fatalf("bridge exited %d, want the child's 7\n%s", code, &jobErr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("bridge did not exit\n%s", &jobErr)
	}
	for _, s := range samples() {
		for _, name := range []string{rapl.Power.Name, rapl.PackagePower.For("0").Name, recv} {
			if v, ok := s.Value(name); ok && v != 0 {
				t.Errorf("sample %d: %s = %v, want 0: nothing moved but the step back", s.Seq, name, v)
			}
		}
		if v, ok := s.Value(metrics.NodeCPUEnergy.Name); ok && v != 0 {
			t.Errorf("sample %d: %s = %v J, want 0", s.Seq, metrics.NodeCPUEnergy.Name, v)
		}
	}
	out := jobErr.String()
	if !strings.Contains(out, "the node's CPU packages 0.0 J ") {
		t.Errorf("the end-of-run table's energy is not the 0 J the job used:\n%s", out)
	}
	for _, want := range []string{"went back from 1000000 to 999999", "went back from 4000000000 to 3999999999"} {
		if !strings.Contains(out, want) {
			t.Errorf("no note says the counter %s:\n%s", want, out)
		}
	}
}

// amdgpu's out-of-range files in a fixture /sys: `bridge sample` (table
// and JSON) shows none of those values, the in-range ones, and the count
// in the collector's line.
func TestAMDGPUOutOfRangeSample(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it mounts a fixture tree over /sys/class in a private mount namespace (scripts/test.sh runs as root)")
	}
	if _, err := exec.LookPath("mount"); err != nil {
		t.Skip("needs mount(8) (util-linux) to set up the fixture's mount namespace")
	}
	root := hwFixture(t)
	d := "class/drm/card0/device/"
	writeTree(t, root, map[string]string{
		d + "gpu_busy_percent":            "9223372036854775807\n",
		d + "hwmon/hwmon2/power1_average": "-5000000\n",
		d + "mem_info_vram_used":          strconv.Itoa(2*68702699520) + "\n",
		d + "hwmon/hwmon2/temp1_input":    "-300000\n",
	})
	refused := []string{"gpu_0_utilization_percentage", "gpu_0_power_usage_watts", "gpu_0_power_usage_percentage",
		"gpu_0_memory_used_megabytes", "gpu_0_memory_usage_percentage", "gpu_0_temperature_celsius"}
	kept := []string{"gpu_0_memory_total_megabytes", "gpu_0_power_limit_watts", "gpu_0_memory_controller_utilization_percentage", "gpu_0_sm_clock_mhz"}
	for _, asJSON := range []bool{false, true} {
		args := []string{"sample", "--trackers=none", "--window=100ms", "--scopes=gpu"}
		if asJSON {
			args = append(args, "--json")
		}
		cmd := inFixtureNS(t, root, args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("bridge %v: %v\n%s", args, err, &errb)
		}
		shown := map[string]bool{} // the sample's series
		if asJSON {
			var got snapshot.Output
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("%v\n%s", err, &out)
			}
			for _, m := range got.Metrics {
				shown[m.Name] = true
			}
		} else {
			for _, line := range strings.Split(out.String(), "\n") {
				if f := strings.Fields(line); len(f) > 1 {
					shown[f[0]] = true
				}
			}
		}
		for _, name := range refused {
			if shown[name] {
				t.Errorf("bridge %v shows %s:\n%s", args, name, &out)
			}
		}
		for _, name := range kept {
			if !shown[name] {
				t.Errorf("bridge %v lacks the in-range %s:\n%s", args, name, &out)
			}
		}
		want := fmt.Sprintf("%d values out of range left out", len(refused))
		if asJSON {
			want = fmt.Sprintf(`"values_refused": %d`, len(refused))
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("bridge %v does not say %q:\n%s", args, want, &out)
		}
		if n := strings.Count(errb.String(), "out of its series' range"); n != len(refused) {
			t.Errorf("%d warnings, want one a series:\n%s", n, &errb)
		}
	}
}
