package main

// Issue 40's AMD and RAPL edge cases through the real binary, on a node
// whose /sys is a fixture in a private mount namespace: an MI300X in a
// two-partition mode, whose second partition is the job's GPU, and CPU
// packages of two dies each.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/amdgpu"
	"github.com/bridge-dev/bridge/metrics/rapl"
)

// edgeFixture is a node's /sys as the kernel lays it out, under root/sys
// (class/ and devices/platform/ go over the real ones), with root/dev over
// /dev:
//   - drm: two MI300X. card0 (0000:03:00.0, renderD128) is in DPX, two
//     partitions; card8 (0000:23:00.0, renderD136) whole. Each card has the
//     seven amdgpu_xcp platform devices amdgpu_xcp_drv.c registers in every
//     mode (devices/platform/amdgpu_xcp_N, no driver), each with a card and
//     a render node that /sys/class/drm links to;
//   - kfd: node 0 the CPU; node 1 card0's first partition (its own render
//     node, gpu_id 41000), node 2 its second (amdgpu_xcp_0's renderD129,
//     gpu_id 41001, location_id the card's | 1), node 3 card8 (gpu_id
//     52000); another job's process holds 8 GB on card8 and 4 GB on card0's
//     first partition, a third 0.5 GB on its second;
//   - powercap: one package of two dies (package-0-die-0 and -die-1, each a
//     zone with its own counter and a dram subzone), and the MMIO mirror.
func edgeFixture(t *testing.T) string {
	root := t.TempDir()
	f := map[string]string{
		"sys/class/kfd/kfd/proc/4000000/vram_52000": "8000000000\n", "sys/class/kfd/kfd/proc/4000000/vram_41000": "4000000000\n",
		"sys/class/kfd/kfd/proc/4000000/pasid":      "32771\n",
		"sys/class/kfd/kfd/proc/4000001/vram_41001": "500000000\n", "sys/class/kfd/kfd/proc/4000001/pasid": "32772\n",
		"sys/class/kfd/kfd/topology/nodes/0/gpu_id":     "0\n",
		"sys/class/kfd/kfd/topology/nodes/0/properties": "cpu_cores_count 96\nsimd_count 0\nlocation_id 0\ndomain 0\ndrm_render_minor 0\n",
		"sys/class/powercap/intel-rapl/enabled":         "1\n",
	}
	links := map[string]string{}
	mi300 := func(num, render int, pci string, firstXCP int) {
		d := "sys/class/drm/card" + strconv.Itoa(num) + "/device/"
		for k, v := range map[string]string{
			"uevent":           "DRIVER=amdgpu\nPCI_CLASS=12000\nPCI_ID=1002:74A1\nPCI_SLOT_NAME=" + pci + "\n",
			"gpu_busy_percent": "0\n", "mem_busy_percent": "0\n", "unique_id": strconv.FormatInt(int64(0x5ea8c1e4a2b6f000+num), 16) + "\n",
			"product_name": "AMD Instinct MI300X\n", "mem_info_vram_total": "205822885888\n", "mem_info_vram_used": "300000000\n",
			"mem_info_gtt_total": "1081211846656\n", "mem_info_gtt_used": "20000000\n",
			"drm/renderD" + strconv.Itoa(render) + "/dev": "226:" + strconv.Itoa(render) + "\n",
			"hwmon/hwmon" + strconv.Itoa(num) + "/name":   "amdgpu\n", "hwmon/hwmon" + strconv.Itoa(num) + "/temp2_input": "40000\n",
			"hwmon/hwmon" + strconv.Itoa(num) + "/temp2_label":  "junction\n",
			"hwmon/hwmon" + strconv.Itoa(num) + "/power1_input": "150000000\n",
			"hwmon/hwmon" + strconv.Itoa(num) + "/power1_cap":   "750000000\n",
			"hwmon/hwmon" + strconv.Itoa(num) + "/freq1_input":  "2100000000\n",
			"hwmon/hwmon" + strconv.Itoa(num) + "/freq1_label":  "sclk\n",
			"hwmon/hwmon" + strconv.Itoa(num) + "/freq2_input":  "1300000000\n",
			"hwmon/hwmon" + strconv.Itoa(num) + "/freq2_label":  "mclk\n",
		} {
			f[d+k] = v
		}
		f["sys/class/drm/renderD"+strconv.Itoa(render)+"/dev"] = "226:" + strconv.Itoa(render) + "\n"
		f["dev/dri/renderD"+strconv.Itoa(render)] = ""
		for i := range 7 {
			xcp := "amdgpu_xcp_" + strconv.Itoa(firstXCP+i)
			p := "sys/devices/platform/" + xcp + "/"
			c, r := "card"+strconv.Itoa(num+1+i), "renderD"+strconv.Itoa(render+1+i)
			f[p+"uevent"] = "MODALIAS=platform:" + xcp + "\n"
			f[p+"drm/"+c+"/dev"] = "226:" + strconv.Itoa(num+1+i) + "\n"
			f[p+"drm/"+r+"/dev"] = "226:" + strconv.Itoa(render+1+i) + "\n"
			f["dev/dri/"+r] = ""
			links["sys/class/drm/"+c] = "../../devices/platform/" + xcp + "/drm/" + c
			links["sys/class/drm/"+r] = "../../devices/platform/" + xcp + "/drm/" + r
			links[p+"drm/"+c+"/device"] = "../../../" + xcp
			links[p+"drm/"+r+"/device"] = "../../../" + xcp
		}
	}
	mi300(0, 128, "0000:03:00.0", 0)
	mi300(8, 136, "0000:23:00.0", 7)
	for n, node := range []struct{ gpuID, render, loc int }{{41000, 128, 0x300}, {41001, 129, 0x300 | 1}, {52000, 136, 0x2300}} {
		d := "sys/class/kfd/kfd/topology/nodes/" + strconv.Itoa(n+1) + "/"
		f[d+"gpu_id"] = strconv.Itoa(node.gpuID) + "\n"
		f[d+"properties"] = "cpu_cores_count 0\nsimd_count 608\ngfx_target_version 90402\nvendor_id 4098\ndevice_id 29857\n" +
			"location_id " + strconv.Itoa(node.loc) + "\ndomain 0\ndrm_render_minor " + strconv.Itoa(node.render) + "\nnum_xcc 4\n"
	}
	zone := func(dir, name string, uj uint64) {
		p := "sys/class/powercap/" + dir + "/"
		f[p+"name"], f[p+"energy_uj"] = name+"\n", strconv.FormatUint(uj, 10)+"\n"
		f[p+"max_energy_range_uj"], f[p+"enabled"] = "262143328850\n", "1\n"
	}
	zone("intel-rapl:0", "package-0-die-0", 1_000_000)
	zone("intel-rapl:0:0", "dram", 500_000)
	zone("intel-rapl:1", "package-0-die-1", 262143328850-2_000_000) // 2 J short of its wrap
	zone("intel-rapl:1:0", "dram", 500_000)
	zone("intel-rapl-mmio:0", "package-0-die-0", 1_000_000)
	writeTree(t, root, f)
	for at, to := range links {
		p := filepath.Join(root, at)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// inSysNS is bridge run with args in a private mount namespace whose
// /sys/class and /sys/devices/platform are root/sys's (the partitions'
// links resolve into the fixture, as on a real node) and whose /dev is
// root/dev (with the device files bridge and the child use bound in).
func inSysNS(t *testing.T, root string, args ...string) *exec.Cmd {
	script := `set -e
mount --bind "$FIX/sys/class" /sys/class
mount --bind "$FIX/sys/devices/platform" /sys/devices/platform
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

// The MI300 partition and the multi-die package, end to end. With
// ROCR_VISIBLE_DEVICES=1 the job's GPU is card0's second partition (KFD
// node 2), whose render node is amdgpu_xcp_0's: bridge sample shows it so,
// and in a job the child's 1 GiB on that partition's gpu_id is its GPU
// memory (it was 0, card8 taken instead), another job's process on it
// unmatched, those on the other partition and card not counted, and
// card0's readings are gpu_0's.
// The package's two dies are summed: its energy and the node's are the
// dies' (RAPL found "no package zone" and was off). Checked in the spool,
// in a real MLflow server's run (metrics and tags) and in the end table.
func TestPartitionAndDiesEndToEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it mounts a fixture tree over /sys/class and /sys/devices/platform in a private mount namespace (scripts/test.sh runs as root)")
	}
	if _, err := exec.LookPath("mount"); err != nil {
		t.Skip("needs mount(8) (util-linux) to set up the fixture's mount namespace")
	}
	root := edgeFixture(t)

	cmd := inSysNS(t, root, "sample", "--json", "--trackers=none", "--window=200ms")
	cmd.Env = append(cmd.Env, "ROCR_VISIBLE_DEVICES=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("bridge sample in the fixture's namespace: %v\n%s", err, &errb)
	}
	var sample struct {
		Detected struct {
			AMD struct {
				GPUs []map[string]any `json:"gpus"`
			} `json:"amdgpu"`
			RAPL struct {
				Packages []map[string]any `json:"packages"`
			} `json:"rapl"`
		} `json:"detected"`
	}
	if err := json.Unmarshal(out.Bytes(), &sample); err != nil {
		t.Fatalf("%v\n%s", err, &out)
	}
	if g := sample.Detected.AMD.GPUs; len(g) != 1 || g[0]["card"] != "card0" || g[0]["render_node"] != "renderD129" ||
		g[0]["partition"] != 1.0 || g[0]["kfd_gpu_id"] != "41001" {
		t.Errorf("bridge sample's AMD GPUs %v: want card0's partition 1 (renderD129, gpu_id 41001)\n%s", g, &out)
	}
	if p := sample.Detected.RAPL.Packages; len(p) != 1 || len(p[0]["dies"].([]any)) != 2 {
		t.Errorf("bridge sample's RAPL packages %v: want package 0 of two dies\n%s", p, &out)
	}

	srv := mlflowtest.Shared(t)
	dir := t.TempDir()
	spoolFile := filepath.Join(dir, "spool.jsonl")
	child := `mkdir -p /sys/class/kfd/kfd/proc/$$ && echo 1073741824 > /sys/class/kfd/kfd/proc/$$/vram_41001 && ` +
		`echo 0 > /sys/class/kfd/kfd/proc/$$/sdma_41001 && while [ ! -e stop ]; do sleep 0.05; done`
	job := inSysNS(t, root, "--interval=1s", "--trackers=mlflow", "--start-timeout=1m", "--flush-timeout=1m", "--", "sh", "-c", child)
	job.Dir = dir
	job.Env = append(job.Env, "BRIDGE_SPOOL="+spoolFile, "HOME="+dir, "ROCR_VISIBLE_DEVICES=1",
		"MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME=bridge-e2e-"+t.Name())
	var jobOut syncbuf.Buffer
	job.Stdout, job.Stderr = &jobOut, &jobOut
	j := startStoppable(t, job, dir, nil)
	stop, exited := j.stop, j.exited
	samples := func() []metrics.Sample { return spoolSamples(t, spoolFile) }
	childMB := metrics.MB(1 << 30)
	waitfor.Cond(t, 2*time.Minute, "a spooled sample with the child's GPU memory and the node's CPU energy", func() bool {
		return slices.ContainsFunc(samples(), func(s metrics.Sample) bool {
			v, ok := s.Value(metrics.ProcessGPUMemory.Name)
			_, e := s.Value(metrics.NodeCPUEnergy.Name)
			return ok && closeTo(v, childMB) && e
		})
	})
	// Die 0 uses 30 J, die 1 20 J across its wrap: the package and the
	// node 50 J.
	writeTree(t, root, map[string]string{
		"sys/class/powercap/intel-rapl:0/energy_uj":      "31000000\n",
		"sys/class/powercap/intel-rapl:1/energy_uj":      "18000000\n",
		"sys/class/powercap/intel-rapl:0:0/energy_uj":    "900000000\n", // a subzone: not added
		"sys/class/powercap/intel-rapl-mmio:0/energy_uj": "900000000\n",
	})
	want := map[string]float64{
		rapl.PackageEnergy.For("0").Name: 50, metrics.NodeCPUEnergy.Name: 50,
		metrics.ProcessGPUMemory.Name: childMB, metrics.ProcessGPUProcesses.Name: 1, metrics.ProcessGPUUnmatchedProcesses.Name: 1,
		metrics.GPUMemoryUsed.ForGPU(0).Name: 300, metrics.GPUPowerUsage.ForGPU(0).Name: 150, metrics.GPUMemoryClock.ForGPU(0).Name: 1300,
		amdgpu.GTTUsed.ForGPU(0).Name: 20,
	}
	var last metrics.Sample
	waitfor.Cond(t, 2*time.Minute, "a spooled sample with both dies' energy read", func() bool {
		ss := samples()
		i := slices.IndexFunc(ss, func(s metrics.Sample) bool {
			v, ok := s.Value(metrics.NodeCPUEnergy.Name)
			return ok && closeTo(v, 50)
		})
		if i >= 0 {
			last = ss[i]
		}
		return i >= 0
	})
	for name, v := range want {
		if got, ok := last.Value(name); !ok || !closeTo(got, v) {
			t.Errorf("spool sample %d: %s = %v (present %v), want %v", last.Seq, name, got, ok, v)
		}
	}
	for _, name := range []string{metrics.GPUMemoryUsed.ForGPU(1).Name, rapl.PackageEnergy.For("1").Name} {
		if _, ok := last.Value(name); ok {
			t.Errorf("spool sample %d has %s: only one GPU and one package are the job's", last.Seq, name)
		}
	}

	stop()
	select {
	case <-exited:
		if code := exitCode(t, j.err); code != 0 {
			t.Fatalf("bridge exited %d, want the child's 0\n%s", code, &jobOut)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("bridge did not exit 2 minutes after its child was told to stop\n%s", &jobOut)
	}
	if s := jobOut.String(); !strings.Contains(s, "the node's CPU packages 50.0 J") {
		t.Errorf("the end-of-run table lacks the package's 50 J:\n%s", s)
	}

	_, _, attempts, err := spooltest.ReadFile(spoolFile)
	if err != nil || len(attempts) == 0 || attempts[0].Start.Runs["mlflow"] == "" {
		t.Fatalf("no MLflow run in the spool: %v\n%s", err, &jobOut)
	}
	runID := attempts[0].Start.Runs["mlflow"]
	for _, name := range []string{metrics.ProcessGPUMemory.Name, metrics.NodeCPUEnergy.Name} {
		hist := srv.History(t, runID, "system/"+name)
		if v, ok := last.Value(name); !ok || !slices.ContainsFunc(hist, func(m mlflowtest.Metric) bool { return m.Step == last.Seq && m.Value == v }) {
			t.Errorf("MLflow system/%s has no %v at step %d: %v", name, v, last.Seq, hist)
		}
	}
	tags := srv.GetRun(t, runID).Tags
	for k, v := range map[string]string{
		"bridge.gpu.0.partition": "card0 (0000:03:00.0) partition 1 (renderD129)", "bridge.gpu.0.card_uuid": "GPU-5ea8c1e4a2b6f000",
		"bridge.gpu.0.name": "AMD Instinct MI300X", "bridge.gpu.amd_count": "1", "bridge.energy_node_cpu_joules": "50.0",
	} {
		if tags[k] != v {
			t.Errorf("MLflow tag %s = %q, want %q", k, tags[k], v)
		}
	}
	if _, ok := tags["bridge.gpu.0.uuid"]; ok {
		t.Errorf("MLflow tags give the partition its card's UUID as its own: %v", tags)
	}
}
