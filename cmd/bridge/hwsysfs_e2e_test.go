package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/promtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/amdgpu"
	"github.com/bridge-dev/bridge/metrics/infiniband"
	"github.com/bridge-dev/bridge/metrics/rapl"
	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
)

// hwFixture is a node's /sys/class as the kernel lays it out, with what
// the RAPL, InfiniBand and AMD GPU collectors read (paths under the
// fixture's root: class/ goes over /sys/class, dev/ over /dev):
//   - powercap: two packages with a subzone, the MMIO mirror of package 0,
//     package 1's counter 2 J short of its range (the advance wraps it);
//   - infiniband: mlx5_0 (InfiniBand, 64-bit PMA counters) and mlx5_1
//     (RoCE, with the older counters_ext files);
//   - drm: card0 driven by amdgpu, its hwmon, render node renderD128 (and
//     dev/dri/renderD128, so the GPU is the job's), an i915 card beside;
//   - kfd: the topology (a CPU node, the GPU as gpu_id 1234) and another
//     job's process holding 1 GB of VRAM.
func hwFixture(t *testing.T) string {
	root := t.TempDir()
	f := map[string]string{
		"dev/dri/renderD128":                   "",
		"class/kfd/kfd/proc/4000000/vram_1234": "1000000000\n", "class/kfd/kfd/proc/4000000/pasid": "32771\n",
		"class/kfd/kfd/topology/nodes/0/gpu_id":     "0\n",
		"class/kfd/kfd/topology/nodes/0/properties": "cpu_cores_count 16\nsimd_count 0\ndrm_render_minor 0\n",
		"class/kfd/kfd/topology/nodes/1/gpu_id":     "1234\n",
		"class/kfd/kfd/topology/nodes/1/properties": "cpu_cores_count 0\nsimd_count 416\ndrm_render_minor 128\nlocation_id 768\ngfx_target_version 90010\n",
		"class/drm/card1/device/uevent":             "DRIVER=i915\nPCI_SLOT_NAME=0000:00:02.0\n",
		"class/drm/card0-DP-1/status":               "disconnected\n",
		"class/drm/renderD128/dev":                  "226:128\n",
		"class/powercap/intel-rapl/enabled":         "1\n",
	}
	zone := func(dir, name string, uj uint64) {
		f["class/powercap/"+dir+"/name"] = name + "\n"
		f["class/powercap/"+dir+"/energy_uj"] = strconv.FormatUint(uj, 10) + "\n"
		f["class/powercap/"+dir+"/max_energy_range_uj"] = "262143328850\n"
		f["class/powercap/"+dir+"/enabled"] = "1\n"
	}
	zone("intel-rapl:0", "package-0", 1_000_000)
	zone("intel-rapl:0:0", "core", 500_000)
	zone("intel-rapl:1", "package-1", 262143328850-2_000_000)
	zone("intel-rapl-mmio:0", "package-0", 1_000_000)
	ib := func(dev, rate, layer string, ext bool) {
		d := "class/infiniband/" + dev + "/"
		f[d+"fw_ver"], f[d+"node_type"], f[d+"board_id"] = "20.31.1014\n", "1: CA\n", "MT_0000000223\n"
		p := d + "ports/1/"
		f[p+"state"], f[p+"phys_state"], f[p+"rate"], f[p+"link_layer"] = "4: ACTIVE\n", "5: LinkUp\n", rate+"\n", layer+"\n"
		for _, c := range []string{"symbol_error", "link_downed", "port_rcv_errors", "port_xmit_discards", "port_xmit_wait",
			"port_rcv_data", "port_xmit_data", "port_rcv_packets", "port_xmit_packets", "VL15_dropped"} {
			f[p+"counters/"+c] = "0\n"
		}
		if ext {
			f[p+"counters_ext/port_rcv_data_64"], f[p+"counters_ext/port_xmit_data_64"] = "0\n", "0\n"
		}
	}
	ib("mlx5_0", "200 Gb/sec (4X HDR)", "InfiniBand", false)
	ib("mlx5_1", "100 Gb/sec (2X HDR)", "Ethernet", true)
	d := "class/drm/card0/device/"
	for k, v := range map[string]string{
		"uevent":           "DRIVER=amdgpu\nPCI_CLASS=38000\nPCI_ID=1002:740F\nPCI_SLOT_NAME=0000:03:00.0\n",
		"gpu_busy_percent": "0\n", "mem_busy_percent": "3\n", "unique_id": "2ea8c1e4a2b6f0d3\n", "product_name": "AMD Instinct MI210\n",
		"mem_info_vram_total": "68702699520\n", "mem_info_vram_used": "10485760\n", "drm/renderD128/dev": "226:128\n",
		"mem_info_gtt_total": "134180323328\n", "mem_info_gtt_used": "11464704\n",
		"hwmon/hwmon2/name": "amdgpu\n", "hwmon/hwmon2/temp1_input": "45000\n", "hwmon/hwmon2/temp1_label": "edge\n",
		"hwmon/hwmon2/temp2_input": "52000\n", "hwmon/hwmon2/temp2_label": "junction\n",
		"hwmon/hwmon2/power1_average": "40000000\n", "hwmon/hwmon2/power1_cap": "300000000\n",
		"hwmon/hwmon2/freq1_input": "500000000\n", "hwmon/hwmon2/freq1_label": "sclk\n",
		"hwmon/hwmon2/freq2_input": "1600000000\n", "hwmon/hwmon2/freq2_label": "mclk\n",
	} {
		f[d+k] = v
	}
	writeTree(t, root, f)
	return root
}

// hwAdvance moves the fixture's counters on, in place: package 0 by
// 120 J, package 1 by 5 J across its wrap; mlx5_0 sends 10^9 bytes and
// receives 5×10^8 (4-byte words), with errors; mlx5_1 sends 10^8 bytes on
// counters_ext (its counters/ file moves by a different amount, which must
// not be read); the GPU gets busy.
func hwAdvance(t *testing.T, root string) {
	p0, p1 := "class/infiniband/mlx5_0/ports/1/", "class/infiniband/mlx5_1/ports/1/"
	writeTree(t, root, map[string]string{
		"class/powercap/intel-rapl:0/energy_uj": "121000000\n",
		"class/powercap/intel-rapl:1/energy_uj": "3000000\n",
		p0 + "counters/port_xmit_data":          "250000000\n",
		p0 + "counters/port_rcv_data":           "125000000\n",
		p0 + "counters/symbol_error":            "3\n", p0 + "counters/link_downed": "1\n", p0 + "counters/port_rcv_errors": "2\n",
		p0 + "counters/port_xmit_discards": "4\n", p0 + "counters/port_xmit_wait": "1000\n",
		p1 + "counters_ext/port_xmit_data_64":                "25000000\n",
		p1 + "counters/port_xmit_data":                       "7\n",
		"class/drm/card0/device/gpu_busy_percent":            "88\n",
		"class/drm/card0/device/hwmon/hwmon2/power1_average": "250000000\n",
		"class/drm/card0/device/hwmon/hwmon2/freq1_input":    "1700000000\n",
		"class/drm/card0/device/mem_info_vram_used":          "2157969408\n",
	})
}

// inFixtureNS is bridge run with args in a private mount namespace whose
// /sys/class is root/class and whose /dev is root/dev (with the device
// files bridge and the child use bound in).
func inFixtureNS(t *testing.T, root string, args ...string) *exec.Cmd {
	script := `set -e
mount --bind "$FIX/class" /sys/class
for n in null zero full random urandom; do
	touch "$FIX/dev/$n"
	mount --bind "/dev/$n" "$FIX/dev/$n"
done
mount --rbind "$FIX/dev" /dev
exec "$@"`
	cmd := exec.Command("sh", append([]string{"-c", script, "sh", testbin.Bridge(t)}, args...)...)
	cmd.Env = cleanEnv("FIX=" + root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	return cmd
}

// hwSeries are every series the fixture gives, by the descriptors: the
// RAPL, InfiniBand and AMD GPU ones, then the child's GPU memory (only in
// a job).
func hwSeries() (node, proc []*metrics.Desc) {
	node = []*metrics.Desc{rapl.Power, metrics.NodeCPUEnergy}
	for _, pkg := range []string{"0", "1"} {
		node = append(node, rapl.PackagePower.For(pkg), rapl.PackageEnergy.For(pkg))
	}
	for _, dev := range []string{"mlx5_0", "mlx5_1"} {
		for _, d := range infiniband.Series {
			node = append(node, d.For(dev, "1"))
		}
	}
	for _, d := range amdgpu.Series {
		if d.PerGPU {
			node = append(node, d.ForGPU(0))
		} else {
			proc = append(proc, d)
		}
	}
	return node, proc
}

// The RAPL, InfiniBand and AMD GPU collectors end to end, through the real
// binary on a node whose /sys/class is a fixture tree (a private mount
// namespace; bridge reads the default paths): every series they give is in
// `bridge sample --json`; in a job whose counters the test advances while
// bridge samples, the rates and totals the advance implies land in the
// spool, on /metrics (each under its descriptor's name, labels and base
// unit), in a real MLflow server and the W&B mock, with the ports' state as
// start tags and the job's energy in the end-of-run table and tags.
func TestHardwareFixtureEndToEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it mounts a fixture tree over /sys/class in a private mount namespace (scripts/test.sh runs as root)")
	}
	if _, err := exec.LookPath("mount"); err != nil {
		t.Skip("needs mount(8) (util-linux) to set up the fixture's mount namespace")
	}
	root := hwFixture(t)
	nodeSeries, procSeries := hwSeries()

	// bridge sample --json sees every series (the rates over --window, 0).
	cmd := inFixtureNS(t, root, "sample", "--json", "--trackers=none", "--window=200ms")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("bridge sample in the fixture's namespace: %v\n%s", err, &errb)
	}
	var sample struct {
		Detected map[string]any `json:"detected"`
		Metrics  []struct {
			Name  string  `json:"name"`
			Value float64 `json:"value"`
			Unit  string  `json:"unit"`
		} `json:"metrics"`
	}
	if err := json.Unmarshal(out.Bytes(), &sample); err != nil {
		t.Fatalf("%v\n%s", err, &out)
	}
	for _, d := range nodeSeries {
		i := slices.IndexFunc(sample.Metrics, func(m struct {
			Name  string  `json:"name"`
			Value float64 `json:"value"`
			Unit  string  `json:"unit"`
		}) bool {
			return m.Name == d.Name
		})
		if i < 0 || sample.Metrics[i].Unit != string(d.Unit) {
			t.Errorf("bridge sample --json: %s (%s) missing or in another unit", d.Name, d.Unit)
		}
	}
	for _, c := range []string{"rapl", "infiniband", "amdgpu"} {
		if _, ok := sample.Detected[c].(map[string]any); !ok {
			t.Errorf("bridge sample detected %s: %v", c, sample.Detected[c])
		}
	}
	if t.Failed() {
		t.Fatalf("bridge sample --json:\n%s\n%s", &out, &errb)
	}

	// A job, sampled every second, reported to MLflow, W&B and /metrics.
	srv := mlflowtest.Shared(t)
	wb := wandbserver.StartTest(t, wandbserver.Options{APIKey: wbKey})
	const wbRun = "hwfixture"
	wb.CreateStartedRun("", wbProject, wbRun)
	dir := t.TempDir()
	spoolFile := filepath.Join(dir, "spool.jsonl")
	addr := promtest.FreeAddr(t)
	child := `mkdir -p /sys/class/kfd/kfd/proc/$$ && echo 2147483648 > /sys/class/kfd/kfd/proc/$$/vram_1234 && ` +
		`echo 0 > /sys/class/kfd/kfd/proc/$$/sdma_1234 && while [ ! -e stop ]; do sleep 0.05; done`
	job := inFixtureNS(t, root, "--interval=1s", "--trackers=mlflow,wandb", "--metrics-addr="+addr,
		"--start-timeout=1m", "--flush-timeout=1m", "--", "sh", "-c", child)
	job.Dir = dir
	job.Env = append(job.Env, "BRIDGE_SPOOL="+spoolFile, "HOME="+dir,
		"MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME=bridge-e2e-"+t.Name(),
		"WANDB_BASE_URL="+wb.URL(), "WANDB_API_KEY="+wbKey, "WANDB_PROJECT="+wbProject, "WANDB_RUN_ID="+wbRun)
	var jobErr syncbuf.Buffer
	job.Stdout, job.Stderr = &jobErr, &jobErr
	j := startStoppable(t, job, dir, nil)
	stop, exited := j.stop, j.exited

	samples := func() []metrics.Sample { return spoolSamples(t, spoolFile) }
	// A sample after the baseline: the series are there (the rates 0).
	waitfor.Cond(t, 2*time.Minute, "a spooled sample with the node's CPU energy", func() bool {
		return slices.ContainsFunc(samples(), func(s metrics.Sample) bool { _, ok := s.Value(metrics.NodeCPUEnergy.Name); return ok })
	})
	hwAdvance(t, root)
	// The sample by which every moved counter has been read: the advance's
	// writes are not one atomic step, so a sample may fall among them and
	// see some counters moved and others not yet.
	exact := map[string]float64{
		rapl.PackageEnergy.For("0").Name: 120, rapl.PackageEnergy.For("1").Name: 5, metrics.NodeCPUEnergy.Name: 125,
		infiniband.SymbolErrors.For("mlx5_0", "1").Name: 3, infiniband.LinkDowned.For("mlx5_0", "1").Name: 1,
		infiniband.ReceiveErrors.For("mlx5_0", "1").Name: 2, infiniband.XmitDiscards.For("mlx5_0", "1").Name: 4,
		infiniband.XmitWait.For("mlx5_0", "1").Name: 1000,
		metrics.GPUUtilization.ForGPU(0).Name:       88, metrics.GPUPowerUsage.ForGPU(0).Name: 250, metrics.GPUPowerUsagePercent.ForGPU(0).Name: 250.0 / 3,
		metrics.GPUSMClock.ForGPU(0).Name: 1700, metrics.GPUMemoryUsed.ForGPU(0).Name: 2157.969408, metrics.GPUTemperature.ForGPU(0).Name: 45,
		metrics.ProcessGPUMemory.Name: 2147.483648, metrics.ProcessGPUProcesses.Name: 1, metrics.ProcessGPUUnmatchedProcesses.Name: 1,
	}
	matches := func(s metrics.Sample) bool {
		for name, want := range exact {
			if v, ok := s.Value(name); !ok || !closeTo(v, want) {
				return false
			}
		}
		return true
	}
	var upTo []metrics.Sample
	waitfor.Cond(t, 2*time.Minute, "a spooled sample with every moved counter read", func() bool {
		ss := samples()
		i := slices.IndexFunc(ss, matches)
		upTo = ss[:i+1]
		return i >= 0
	})
	// Rates: over the samples up to that one, each rate times the time
	// since the sample before adds up to what moved (each collector reads
	// its own clock within the sample: a quarter's slack).
	for name, moved := range map[string]float64{
		rapl.PackagePower.For("0").Name: 120, rapl.PackagePower.For("1").Name: 5, rapl.Power.Name: 125,
		metrics.InfinibandTransmitRate.For("mlx5_0", "1").Name: 1000, metrics.InfinibandReceiveRate.For("mlx5_0", "1").Name: 500,
		metrics.InfinibandTransmitRate.For("mlx5_1", "1").Name: 100, metrics.InfinibandReceiveRate.For("mlx5_1", "1").Name: 0,
	} {
		sum := 0.0
		for i := 1; i < len(upTo); i++ {
			v, _ := upTo[i].Value(name)
			sum += v * upTo[i].Time.Sub(upTo[i-1].Time).Seconds()
		}
		if math.Abs(sum-moved) > 0.25*moved || (moved == 0 && sum != 0) {
			t.Errorf("spool: %s × the time between samples adds up to %v over samples 0..%d, want about %v", name, sum, len(upTo)-1, moved)
		}
	}
	// /metrics: each series under its descriptor's name, labels and base
	// unit, with the value the spool holds for the sample it exposes.
	fams := scrapeFamilies(t, addr)
	seq := fams["bridge_sample_seq"].GetMetric()[0].GetGauge().GetValue()
	var exposed metrics.Sample
	waitfor.Cond(t, time.Minute, fmt.Sprintf("sample %v in the spool", seq), func() bool {
		i := slices.IndexFunc(samples(), func(s metrics.Sample) bool { return float64(s.Seq) == seq })
		if i >= 0 {
			exposed = samples()[i]
		}
		return i >= 0
	})
	for _, d := range append(slices.Clone(nodeSeries), procSeries...) {
		labels := map[string]string{}
		for i := 0; i+1 < len(d.Labels); i += 2 {
			labels[d.Labels[i]] = d.Labels[i+1]
		}
		if d.Of != nil && d.Of.PerGPU {
			labels["gpu"] = strconv.Itoa(d.GPU)
		}
		m := familyMetric(fams[d.PromName()], labels)
		want, ok := exposed.Value(d.Name)
		if m == nil || !ok {
			t.Errorf("/metrics: no %s%v (spool has it: %v)", d.PromName(), labels, ok)
			continue
		}
		got := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		if !closeTo(got, d.Unit.Base(want)) {
			t.Errorf("/metrics %s%v = %v, want %v (%v %s in the spool)", d.PromName(), labels, got, d.Unit.Base(want), want, d.Unit)
		}
		if (d.Kind == metrics.Counter) != (fams[d.PromName()].GetType() == dto.MetricType_COUNTER) {
			t.Errorf("/metrics %s is a %v, its descriptor's kind %v", d.PromName(), fams[d.PromName()].GetType(), d.Kind)
		}
	}
	if c := familyMetric(fams[metrics.NodeCPUEnergy.PromName()], nil); c == nil || c.GetCounter().GetValue() != 125 {
		t.Errorf("/metrics %s = %v, want 125 J", metrics.NodeCPUEnergy.PromName(), c)
	}

	stop()
	select {
	case <-exited:
		if code := exitCode(t, j.err); code != 0 {
			t.Fatalf("bridge exited %d, want the child's 0\n%s", code, &jobErr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("bridge did not exit 2 minutes after its child was told to stop\n%s", &jobErr)
	}
	// The AMD GPU has no energy series: the table says nothing of it.
	if s := jobErr.String(); !regexp.MustCompile(`(?m)^  energy +the node's CPU packages 125.0 J \(0.035 Wh\) while bridge sampled$`).MatchString(s) || strings.Contains(s, "GPU energy") {
		t.Errorf("the end-of-run table lacks the job's energy, or speaks of a GPU energy no collector reads:\n%s", s)
	}

	// MLflow: every series, the spool's values, the start and end tags.
	_, _, attempts, err := spooltest.ReadFile(spoolFile)
	if err != nil || len(attempts) == 0 || attempts[0].Start.Runs["mlflow"] == "" {
		t.Fatalf("no MLflow run in the spool: %v\n%s", err, &jobErr)
	}
	runID := attempts[0].Start.Runs["mlflow"]
	keys := srv.MetricKeys(t, runID, "system/")
	for _, d := range append(slices.Clone(nodeSeries), procSeries...) {
		if !slices.Contains(keys, "system/"+d.Name) {
			t.Errorf("MLflow run %s has no system/%s", runID, d.Name)
		}
	}
	// A rate, a total and the child's VRAM: MLflow holds the spool's value
	// at every step.
	final := samples()
	for _, name := range []string{rapl.PackagePower.For("0").Name, metrics.InfinibandTransmitRate.For("mlx5_0", "1").Name,
		metrics.NodeCPUEnergy.Name, metrics.ProcessGPUMemory.Name} {
		hist := srv.History(t, runID, "system/"+name)
		for _, smp := range final {
			want, ok := smp.Value(name)
			if ok && !slices.ContainsFunc(hist, func(m mlflowtest.Metric) bool { return m.Step == smp.Seq && m.Value == want }) {
				t.Errorf("MLflow system/%s has no %v at step %d: %v", name, want, smp.Seq, hist)
			}
		}
	}
	tags := srv.GetRun(t, runID).Tags
	for k, v := range map[string]string{
		"bridge.energy_node_cpu_joules": "125.0", "bridge.energy_gpus_joules": "not sampled",
		"bridge.infiniband.mlx5_0.1.state": "ACTIVE", "bridge.infiniband.mlx5_0.1.rate": "200 Gb/s",
		"bridge.infiniband.mlx5_1.1.link_layer": "Ethernet", "bridge.gpu.0.vendor": "amd", "bridge.gpu.0.uuid": "GPU-2ea8c1e4a2b6f0d3",
	} {
		if tags[k] != v {
			t.Errorf("MLflow tag %s = %q, want %q", k, tags[k], v)
		}
	}

	// W&B: every series in bridge's system-metrics lines, the advance's
	// values among them.
	host, _ := os.Hostname()
	seen := map[string][]float64{}
	run, ok := wb.FindRun(wbRun)
	if !ok {
		t.Fatalf("no W&B run %s", wbRun)
	}
	for _, w := range run.Writers {
		for _, line := range run.File(w.ID, wandbserver.EventsFile).Contents() {
			var ev map[string]any
			if json.Unmarshal([]byte(line), &ev) != nil {
				continue
			}
			for k, v := range ev {
				if f, ok := v.(float64); ok {
					seen[k] = append(seen[k], f)
				}
			}
		}
	}
	for _, d := range append(slices.Clone(nodeSeries), procSeries...) {
		if _, ok := seen["system."+d.Name+"/l:"+host]; !ok {
			t.Errorf("W&B has no system.%s/l:%s (keys: %d)", d.Name, host, len(seen))
		}
	}
	if !slices.Contains(seen["system."+metrics.NodeCPUEnergy.Name+"/l:"+host], 125) {
		t.Errorf("W&B %s: %v, want 125 among them", metrics.NodeCPUEnergy.Name, seen["system."+metrics.NodeCPUEnergy.Name+"/l:"+host])
	}
}

// scrapeFamilies reads bridge's /metrics at addr.
func scrapeFamilies(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// familyMetric is f's metric with every label in labels (nil: the first).
func familyMetric(f *dto.MetricFamily, labels map[string]string) *dto.Metric {
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}
