// Package cgroupv2 runs bridge on a real cgroup v2 kernel: the hosts here are
// cgroup v1/hybrid, so the test boots Debian's kernel under QEMU (TCG) with
// an initramfs of busybox, an /init script (init.sh), bridge and a workload
// helper (workload/), all static. /init runs every case in sequence and
// writes bridge's figures and the kernel's own files to a second serial
// port; the test compares them. e2e/cgroupv2/prepare.sh installs QEMU and
// fetches the kernel and busybox.
package cgroupv2

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/summary"
)

//go:embed init.sh
var initScript []byte

// guestTimeout bounds the whole guest run: a hung guest is killed.
const guestTimeout = 6 * time.Minute

// modules are loaded by init.sh in this order (prepare.sh unpacks them).
var modules = []string{"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
	"failover", "net_failover", "virtio_net", "virtio_blk"}

func cacheDir() string {
	if d := os.Getenv("BRIDGE_CGROUPV2_CACHE"); d != "" {
		return d
	}
	return "/var/cache/bridge-cgroupv2"
}

// results is what the guest wrote: section -> file -> content.
type results map[string]map[string]string

func TestMain(m *testing.M) { os.Exit(mlflowtest.Main(m)) }

func TestCgroupV2Guest(t *testing.T) {
	cache := cacheDir()
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("SKIP (cgroup v2 guest NOT TESTED): qemu-system-x86_64 is not installed; run e2e/cgroupv2/prepare.sh as root")
	}
	for _, f := range append([]string{"vmlinux", "busybox"}, modulePaths("")...) {
		if _, err := os.Stat(filepath.Join(cache, f)); err != nil {
			t.Skipf("SKIP (cgroup v2 guest NOT TESTED): %s missing; run e2e/cgroupv2/prepare.sh (cache %s, or set BRIDGE_CGROUPV2_CACHE)",
				filepath.Join(cache, f), cache)
		}
	}
	srv := mlflowtest.Shared(t)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	// QEMU's user network shows the host's 127.0.0.1 as 10.0.2.2.
	guestMLflow := "http://10.0.2.2:" + u.Port()
	experiment := fmt.Sprintf("bridge-cgroupv2-%d", time.Now().UnixNano())

	dir := t.TempDir()
	initrd := buildInitramfs(t, dir, cache)
	disk := filepath.Join(dir, "disk.img")
	// Sparse: its reads still fill the guest's page cache.
	if err := os.WriteFile(disk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 256<<20); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "results.txt")
	console := filepath.Join(dir, "console.txt")

	ctx, cancel := context.WithTimeout(context.Background(), guestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu,
		"-accel", "tcg", "-cpu", "max", "-smp", "2", "-m", "1024",
		"-kernel", filepath.Join(cache, "vmlinux"), "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 quiet E2E_MLFLOW="+guestMLflow+" E2E_EXPERIMENT="+experiment,
		"-nographic", "-no-reboot", "-serial", "file:"+console, "-serial", "file:"+out, "-monitor", "none",
		"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0,romfile=",
		"-drive", "file="+disk+",format=raw,if=virtio",
	)
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	qout, err := cmd.CombinedOutput()
	took := time.Since(start)
	t.Logf("guest ran %.1f s", took.Seconds())
	res := parseResults(t, out)
	// The temporary directory goes with the test: keep what the guest
	// wrote where a failed run can be read.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		keep, err := os.MkdirTemp("", "bridge-cgroupv2-failed-")
		if err != nil {
			return
		}
		for _, f := range []string{out, console} {
			if b, err := os.ReadFile(f); err == nil {
				_ = os.WriteFile(filepath.Join(keep, filepath.Base(f)), b, 0o644)
			}
		}
		t.Logf("the guest's results and console are kept in %s", keep)
	})
	if err != nil || ctx.Err() != nil {
		t.Errorf("qemu: %v (after %.0f s; the guest is killed after %v)\n%s", err, took.Seconds(), guestTimeout, qout)
	}
	if _, done := res["@@DONE"]; !done {
		b, _ := os.ReadFile(console)
		t.Errorf("the guest did not finish its cases; console tail:\n%s", tail(string(b), 4000))
	}
	if t.Failed() && len(res) == 0 {
		t.FailNow()
	}
	if k := res["@@top"]["kernel"]; k != "" {
		t.Logf("guest kernel %s, %s CPUs", strings.TrimSpace(k), strings.TrimSpace(res["@@top"]["nproc"]))
	}

	c := checker{t: t, res: res, srv: srv, dir: dir}
	t.Run("limits", c.limits)
	t.Run("cpuset", c.cpuset)
	t.Run("workingset", c.workingset)
	t.Run("cgns", c.cgns)
	t.Run("oom_ctr", c.oomCtr)
	t.Run("oom_pod", c.oomPod)
	t.Run("oom_group", c.oomGroup)
	t.Run("oom_group_nocap", c.oomGroupNoCap)
	t.Run("high", c.high)
	t.Run("pids", c.pids)
	t.Run("peak_shared", c.peakShared)
}

func modulePaths(prefix string) []string {
	var out []string
	for _, m := range modules {
		out = append(out, filepath.Join(prefix, "modules", m+".ko"))
	}
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// buildInitramfs builds bridge and the workload (static) and writes a newc
// cpio archive with them, busybox, the modules and /init.
func buildInitramfs(t *testing.T, dir, cache string) string {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	for pkg, name := range map[string]string{"../../cmd/bridge": "bridge", "./workload": "workload"} {
		b := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(bin, name), pkg)
		b.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := b.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, out)
		}
	}
	w := newCpio()
	for _, d := range []string{"bin", "dev", "proc", "sys", "tmp", "lib", "lib/modules", "sbin", "usr", "usr/bin", "usr/sbin"} {
		w.dir(d)
	}
	w.file("init", initScript, 0o755)
	for src, dst := range map[string]string{
		filepath.Join(cache, "busybox"): "bin/busybox",
		filepath.Join(bin, "bridge"):    "bin/bridge",
		filepath.Join(bin, "workload"):  "bin/workload",
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		w.file(dst, b, 0o755)
	}
	for _, m := range modules {
		b, err := os.ReadFile(filepath.Join(cache, "modules", m+".ko"))
		if err != nil {
			t.Fatal(err)
		}
		w.file("lib/modules/"+m+".ko", b, 0o644)
	}
	path := filepath.Join(dir, "initramfs.cpio")
	if err := os.WriteFile(path, w.close(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// cpioW writes the "newc" format the kernel unpacks (uncompressed).
type cpioW struct {
	buf bytes.Buffer
	ino int
}

func newCpio() *cpioW { return &cpioW{ino: 1} }

func (w *cpioW) entry(name string, mode uint32, data []byte) {
	w.ino++
	fmt.Fprintf(&w.buf, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		w.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	w.buf.WriteString(name)
	w.buf.WriteByte(0)
	w.pad()
	w.buf.Write(data)
	w.pad()
}

func (w *cpioW) pad() {
	for w.buf.Len()%4 != 0 {
		w.buf.WriteByte(0)
	}
}

func (w *cpioW) dir(name string)                         { w.entry(name, 0o040755, nil) }
func (w *cpioW) file(name string, b []byte, perm uint32) { w.entry(name, 0o100000|perm, b) }
func (w *cpioW) close() []byte                           { w.entry("TRAILER!!!", 0, nil); return w.buf.Bytes() }

// parseResults reads the sections init.sh wrote. Lines outside a section go
// to "@@top"; "@@DONE" marks a guest that finished.
func parseResults(t *testing.T, path string) results {
	t.Helper()
	res := results{}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("no results from the guest: %v", err)
		return res
	}
	section, file := "@@top", ""
	res[section] = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		switch {
		case strings.HasPrefix(line, "@@BEGIN "):
			section, file = strings.TrimPrefix(line, "@@BEGIN "), ""
			res[section] = map[string]string{}
		case strings.HasPrefix(line, "@@END "):
			section, file = "@@top", ""
		case line == "@@DONE":
			res["@@DONE"] = map[string]string{}
		case strings.HasPrefix(line, "@@FILE "):
			file = strings.TrimPrefix(line, "@@FILE ")
			res[section][file] = ""
		case file != "":
			res[section][file] += line + "\n"
		}
	}
	return res
}

type checker struct {
	t   *testing.T
	res results
	srv *mlflowtest.Server
	dir string
}

func (c checker) section(t *testing.T, name string) map[string]string {
	t.Helper()
	s, ok := c.res[name]
	if !ok {
		t.Fatalf("the guest wrote no %q section", name)
	}
	return s
}

// sample is `bridge sample --json` output.
type sample struct {
	Detected struct {
		Cgroup map[string]any `json:"cgroup"`
	} `json:"detected"`
	Metrics []struct {
		Name   string  `json:"name"`
		Value  float64 `json:"value"`
		Source string  `json:"source"`
	} `json:"metrics"`
}

func (s sample) value(name string) (float64, bool) {
	for _, m := range s.Metrics {
		if m.Name == name {
			return m.Value, true
		}
	}
	return 0, false
}

func mustSample(t *testing.T, sec map[string]string) sample {
	t.Helper()
	var s sample
	if err := json.Unmarshal([]byte(sec["sample"]), &s); err != nil {
		t.Fatalf("bridge sample output (rc %s) is not JSON: %v\n%s\nstderr:\n%s", strings.TrimSpace(sec["sample_rc"]), err, sec["sample"], sec["sample_err"])
	}
	return s
}

func need(t *testing.T, s sample, name string) float64 {
	t.Helper()
	v, ok := s.value(name)
	if !ok {
		t.Fatalf("%s missing from bridge's sample; detected %v", name, s.Detected.Cgroup)
	}
	return v
}

// kv parses "key value" lines (memory.events, cpu.stat, memory.stat).
func kv(t *testing.T, s string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out[f[0]] = v
	}
	return out
}

func num(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.Fields(s + " x")[0], 64)
	if err != nil {
		t.Fatalf("%q is not a number: %v", s, err)
	}
	return v
}

const mb = 1e6

func within(got, want, frac float64) bool { return math.Abs(got-want) <= frac*math.Abs(want) }

func (c checker) limits(t *testing.T) {
	sec := c.section(t, "limits")
	s := mustSample(t, sec)
	pod, ctr := num(t, sec["pod.memory.max"]), num(t, sec["ctr.memory.max"])
	lim := need(t, s, "container_memory_limit_megabytes")
	t.Logf("memory limit: bridge %.3f MB set by %v; kernel pod memory.max %.3f MB, container memory.max %.3f MB",
		lim, s.Detected.Cgroup["memory_limit_set_by"], pod/mb, ctr/mb)
	if lim != pod/mb {
		t.Errorf("memory limit %v MB, want the pod's tighter %v MB", lim, pod/mb)
	}
	if by, _ := s.Detected.Cgroup["memory_limit_set_by"].(string); by != "/sys/fs/cgroup/pod1/memory.max" {
		t.Errorf("memory_limit_set_by = %q, want the parent's /sys/fs/cgroup/pod1/memory.max", by)
	}

	quota := strings.Fields(sec["ctr.cpu.max"])
	wantCores := num(t, quota[0]) / num(t, quota[1])
	cl := need(t, s, "container_cpu_limit_cores")
	t.Logf("cpu limit: bridge %v cores set by %v; kernel cpu.max %q", cl, s.Detected.Cgroup["cpu_limit_set_by"], strings.TrimSpace(sec["ctr.cpu.max"]))
	if cl != wantCores {
		t.Errorf("cpu limit %v, want %v", cl, wantCores)
	}

	// Usage: the kernel's cpu.stat read around bridge's window.
	s0, s1 := kv(t, sec["cpu.stat.0"]), kv(t, sec["cpu.stat.1"])
	wall := num(t, sec["t1"]) - num(t, sec["t0"])
	kernelCores := (s1["usage_usec"] - s0["usage_usec"]) / 1e6 / wall
	cores := need(t, s, "container_cpu_usage_cores")
	t.Logf("cpu usage: bridge %.4f cores; kernel cpu.stat %.4f cores over %.2f s around it; quota %.2f", cores, kernelCores, wall, wantCores)
	if !within(cores, kernelCores, 0.05) {
		t.Errorf("bridge's %v cores is not within 5%% of the kernel's %v", cores, kernelCores)
	}
	// Cumulative counters lie between the kernel's readings before and after.
	for _, x := range []struct{ name, key string }{
		{"container_cpu_usage_seconds_total", "usage_usec"},
		{"container_cpu_periods_total", "nr_periods"},
		{"container_cpu_throttled_periods_total", "nr_throttled"},
		{"container_cpu_throttled_seconds_total", "throttled_usec"},
	} {
		v := need(t, s, x.name)
		lo, hi := s0[x.key], s1[x.key]
		if strings.HasSuffix(x.key, "_usec") {
			lo, hi = lo/1e6, hi/1e6
		}
		t.Logf("%s: bridge %v; kernel %s %v before, %v after", x.name, v, x.key, lo, hi)
		if v < lo || v > hi {
			t.Errorf("%s = %v, not between the kernel's %v and %v", x.name, v, lo, hi)
		}
	}
	if v := need(t, s, "container_cpu_throttled_periods_percentage"); v <= 0 {
		t.Errorf("throttled periods %v%% under a quota with two burning threads", v)
	}

	// PSI: every line the kernel writes is reported.
	for _, r := range []string{"cpu", "memory", "io"} {
		file := sec["ctr."+r+".pressure"]
		for _, kind := range []string{"some", "full"} {
			name := "container_pressure_" + r + "_" + kind + "_avg10_percentage"
			v, ok := s.value(name)
			has := strings.Contains(file, kind+" avg10=")
			t.Logf("%s: bridge %v (present %v); kernel %s.pressure %q", name, v, ok, r, firstLine(file, kind))
			if ok != has {
				t.Errorf("%s present=%v, kernel's %s.pressure has it: %v", name, ok, r, has)
			}
		}
	}
}

func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func (c checker) cpuset(t *testing.T) {
	sec := c.section(t, "cpuset")
	s := mustSample(t, sec)
	cl := need(t, s, "container_cpu_limit_cores")
	by := s.Detected.Cgroup["cpu_limit_set_by"]
	t.Logf("cpu limit: bridge %v cores set by %v; kernel cpu.max %q, cpuset.cpus.effective %q (guest CPUs %s)", cl, by,
		strings.TrimSpace(sec["cpu.max"]), strings.TrimSpace(sec["cpuset.cpus.effective"]), strings.TrimSpace(c.res["@@top"]["nproc"]))
	if cl != 1 || by != "cpuset /sys/fs/cgroup/cpuset1" {
		t.Errorf("cpu limit %v set by %v, want 1 core set by cpuset /sys/fs/cgroup/cpuset1 (tighter than the 1.5-core quota)", cl, by)
	}
}

func (c checker) workingset(t *testing.T) {
	sec := c.section(t, "workingset")
	s := mustSample(t, sec)
	ws, usage := need(t, s, "container_memory_working_set_megabytes"), need(t, s, "container_memory_usage_megabytes")
	// The kernel's own files, read right before and right after bridge.
	var kws, kusage []float64
	for _, i := range []string{"0", "1"} {
		cur := num(t, sec["memory.current."+i])
		st := kv(t, sec["memory.stat."+i])
		kusage = append(kusage, cur/mb)
		kws = append(kws, math.Max(0, cur-st["inactive_file"])/mb)
	}
	t.Logf("working set: bridge %.1f MB; kernel memory.current - inactive_file %.1f MB before, %.1f MB after", ws, kws[0], kws[1])
	t.Logf("usage: bridge %.1f MB; kernel memory.current %.1f MB before, %.1f MB after", usage, kusage[0], kusage[1])
	// bridge's own memory is in the cgroup while it runs: allow its size.
	const slack = 24
	if ws < math.Min(kws[0], kws[1])-slack || ws > math.Max(kws[0], kws[1])+slack {
		t.Errorf("working set %.1f MB is not within %d MB of the kernel's %.1f..%.1f MB", ws, slack, kws[0], kws[1])
	}
	if usage-ws < 48 || kusage[1]-kws[1] < 48 {
		t.Errorf("usage - working set: bridge %.1f MB, kernel %.1f MB; want most of the 96 MiB of page cache", usage-ws, kusage[1]-kws[1])
	}
}

func (c checker) cgns(t *testing.T) {
	sec := c.section(t, "cgns")
	t.Logf("bridge sample stderr in the namespace: %s", sec["sample_err"])
	if got := strings.TrimSpace(sec["self.cgroup"]); got != "0::/" {
		t.Errorf("/proc/self/cgroup in the namespace = %q, want 0::/", got)
	}
	s := mustSample(t, sec)
	lim := need(t, s, "container_memory_limit_megabytes")
	cl := need(t, s, "container_cpu_limit_cores")
	kmem := num(t, sec["memory.max"])
	q := strings.Fields(sec["cpu.max"])
	t.Logf("in a cgroup namespace: memory limit bridge %.3f MB (set by %v), kernel %.3f MB; cpu limit bridge %v, kernel cpu.max %q",
		lim, s.Detected.Cgroup["memory_limit_set_by"], kmem/mb, cl, strings.TrimSpace(sec["cpu.max"]))
	if lim != kmem/mb {
		t.Errorf("memory limit %v MB, want %v", lim, kmem/mb)
	}
	if want := num(t, q[0]) / num(t, q[1]); cl != want {
		t.Errorf("cpu limit %v, want %v", cl, want)
	}
}

// run is one supervised case: bridge's exit code, its spool and its MLflow run.
type run struct {
	code    int
	samples []metrics.Sample
	tags    map[string]string
	id      string
}

// supervised reads a supervised case's exit code (codeKey) and spool
// (spoolKey) from its section, and its run's tags from MLflow.
func (c checker) supervised(t *testing.T, sec map[string]string, codeKey, spoolKey string) run {
	t.Helper()
	r := run{code: int(num(t, sec[codeKey]))}
	path := filepath.Join(c.dir, t.Name()[strings.LastIndex(t.Name(), "/")+1:]+"-"+spoolKey+".jsonl")
	if err := os.WriteFile(path, []byte(sec[spoolKey]), 0o644); err != nil {
		t.Fatal(err)
	}
	ss, _, atts, err := spooltest.ReadFile(path)
	if err != nil || len(atts) == 0 {
		t.Fatalf("guest spool: %v (%d attempts); bridge stderr:\n%s", err, len(atts), sec["stderr"])
	}
	r.samples = ss
	r.id = atts[0].Start.Runs["mlflow"]
	if r.id == "" {
		t.Fatalf("no MLflow run in the guest's spool: the guest could not reach MLflow; stderr:\n%s", sec["stderr"])
	}
	r.tags = c.srv.GetRun(t, r.id).Tags
	return r
}

// last is a metric's value in the last sample that has it.
func last(ss []metrics.Sample, name string) (float64, bool) {
	for i := len(ss) - 1; i >= 0; i-- {
		if v, ok := ss[i].Value(name); ok {
			return v, true
		}
	}
	return 0, false
}

func (c checker) oomCtr(t *testing.T) {
	sec := c.section(t, "oom_ctr")
	r := c.supervised(t, sec, "exit_code", "spool")
	ev := kv(t, sec["ctr.memory.events"])
	peak, lim := num(t, sec["ctr.memory.peak"]), num(t, sec["ctr.memory.max"])
	t.Logf("exit code %d; exit_reason %q; oom_kill_count: bridge %q, kernel memory.events oom_kill %v, oom %v",
		r.code, r.tags["bridge.exit_reason"], r.tags["bridge.oom_kill_count"], ev["oom_kill"], ev["oom"])
	t.Logf("peak usage share: bridge %q%%, kernel memory.peak/memory.max %.1f%%", r.tags["bridge.peak_usage_share_of_limit_percentage"], 100*peak/lim)
	t.Logf("detail: %s", r.tags["bridge.exit_reason_detail"])
	if r.code != 137 {
		t.Errorf("exit code %d, want 137; stderr:\n%s", r.code, sec["stderr"])
	}
	if r.tags["bridge.exit_reason"] != "cgroup_oom_kill" || r.tags["bridge.oom_kill_count"] != "1" || ev["oom_kill"] != 1 {
		t.Errorf("exit_reason %q, oom_kill_count %q (kernel %v); want cgroup_oom_kill and 1", r.tags["bridge.exit_reason"], r.tags["bridge.oom_kill_count"], ev["oom_kill"])
	}
	// This cgroup's own limit: its memory.events oom rose with oom_kill.
	if want := fmt.Sprintf("oom=0 -> %.0f", ev["oom"]); !strings.Contains(r.tags["bridge.exit_evidence"], want) ||
		!strings.Contains(r.tags["bridge.exit_evidence"], "oom_kill=0 -> 1") {
		t.Errorf("evidence does not cite memory.events oom (%s) and oom_kill=0 -> 1: %q", want, r.tags["bridge.exit_evidence"])
	}
	if v, ok := last(r.samples, "container_memory_peak_megabytes"); !ok || v > peak/mb {
		t.Errorf("container_memory_peak_megabytes %v (present %v), kernel's final memory.peak %v MB", v, ok, peak/mb)
	}
	// The peaks name their source: the usage is memory.peak's mark; the
	// working set reached the limit at the OOM kill, whatever the samples
	// around it saw (from the mark, unless a sample caught it there).
	t.Logf("peak working set: bridge %q (%s); peak usage %q (%s)", r.tags["bridge.peak_working_set_megabytes"], r.tags["bridge.peak_working_set_source"],
		r.tags["bridge.peak_usage_megabytes"], r.tags["bridge.peak_usage_source"])
	if got := r.tags["bridge.peak_usage_source"]; got != "kernel high-water mark memory.peak" {
		t.Errorf("bridge.peak_usage_source = %q, want the kernel's memory.peak", got)
	}
	if ws, err := strconv.ParseFloat(r.tags["bridge.peak_working_set_megabytes"], 64); err != nil || ws < summary.AtLimit*lim/mb {
		t.Errorf("bridge.peak_working_set_megabytes = %q, want the limit %.1f MB: the working set reached it at the OOM kill",
			r.tags["bridge.peak_working_set_megabytes"], lim/mb)
	}
	if src := r.tags["bridge.peak_working_set_source"]; src != summary.SourceSampled && src != "kernel high-water mark memory.peak at the OOM kill" {
		t.Errorf("bridge.peak_working_set_source = %q", src)
	}
	// Read back from MLflow: the limit bridge posted is the kernel's.
	ml := c.srv.GetRun(t, r.id).Latest
	for k, m := range ml {
		if strings.HasSuffix(k, "container_memory_limit_megabytes") {
			t.Logf("MLflow %s = %v; kernel memory.max %v MB", k, m.Value, lim/mb)
			if m.Value != lim/mb {
				t.Errorf("MLflow %s = %v, want %v", k, m.Value, lim/mb)
			}
			return
		}
	}
	t.Errorf("no container_memory_limit_megabytes among the MLflow run's metrics")
}

func (c checker) oomPod(t *testing.T) {
	sec := c.section(t, "oom_pod")
	r := c.supervised(t, sec, "exit_code", "spool")
	pod, ctr := kv(t, sec["pod.memory.events"]), kv(t, sec["ctr.memory.events"])
	t.Logf("exit code %d; exit_reason %q; kernel: pod oom %v oom_kill %v, container oom %v oom_kill %v", r.code,
		r.tags["bridge.exit_reason"], pod["oom"], pod["oom_kill"], ctr["oom"], ctr["oom_kill"])
	t.Logf("memory_limit_set_by: bridge %q; kernel pod memory.max %s", r.tags["bridge.memory_limit_set_by"], strings.TrimSpace(sec["pod.memory.max"]))
	t.Logf("evidence: %s", r.tags["bridge.exit_evidence"])
	if r.code != 137 || r.tags["bridge.exit_reason"] != "cgroup_oom_kill" {
		t.Errorf("exit %d, reason %q; want 137, cgroup_oom_kill; stderr:\n%s", r.code, r.tags["bridge.exit_reason"], sec["stderr"])
	}
	if r.tags["bridge.memory_limit_set_by"] != "/sys/fs/cgroup/pod6/memory.max" {
		t.Errorf("memory_limit_set_by %q, want the pod's", r.tags["bridge.memory_limit_set_by"])
	}
	// oom counts every run of the OOM path (reclaim may retry before the
	// kill): at least once in the pod, never in the container.
	if pod["oom"] < 1 || ctr["oom"] != 0 {
		t.Fatalf("the kernel did not OOM at the pod's limit: pod %v, container %v", pod, ctr)
	}
	if !strings.Contains(r.tags["bridge.exit_evidence"], "oom_domain=ancestor") {
		t.Errorf("evidence does not name the ancestor's limit: %q", r.tags["bridge.exit_evidence"])
	}
}

func (c checker) oomGroup(t *testing.T) {
	sec := c.section(t, "oom_group")
	ev := kv(t, sec["memory.events"])
	t.Logf("first attempt exit %s; kernel memory.events oom_kill %v oom_group_kill %v", strings.TrimSpace(sec["exit_code"]), ev["oom_kill"], ev["oom_group_kill"])
	if ev["oom_group_kill"] < 1 {
		t.Fatalf("the kernel made no group kill: %v", ev)
	}
	r := c.supervised(t, sec, "exit_code2", "spool2")
	if first := int(num(t, sec["exit_code"])); first == 137 && r.tags["bridge.exit_reason"] == "cgroup_oom_kill" {
		// bridge's oom_score_adj -1000 spared it: it reports the group kill.
		t.Logf("bridge survived the group kill: evidence %s", r.tags["bridge.exit_evidence"])
		if !strings.Contains(r.tags["bridge.exit_evidence"], "oom_group_kill=") {
			t.Errorf("evidence does not cite oom_group_kill: %q", r.tags["bridge.exit_evidence"])
		}
		return
	}
	lost := r.tags["bridge.previous_attempt_lost"]
	t.Logf("bridge died with the group; the next attempt says: %s", lost)
	if !strings.Contains(lost, "without a clean shutdown") {
		t.Errorf("bridge died (exit %d) but the next attempt does not report it: %q", r.code, lost)
	}
}

// Without CAP_SYS_RESOURCE bridge keeps oom_score_adj 0 and the group kill
// takes it too: the first attempt leaves no end record, and the next one,
// on the same spool, reports it on the same run.
func (c checker) oomGroupNoCap(t *testing.T) {
	sec := c.section(t, "oom_group_nocap")
	ev := kv(t, sec["memory.events"])
	t.Logf("first attempt: bridge's exit %s (137: killed with the group); kernel memory.events oom_kill %v oom_group_kill %v",
		strings.TrimSpace(sec["exit_code"]), ev["oom_kill"], ev["oom_group_kill"])
	if ev["oom_group_kill"] < 1 {
		t.Fatalf("the kernel made no group kill: %v", ev)
	}
	// The premise: bridge, without the capability, says it stays killable.
	if !strings.Contains(sec["stderr"], "oom_score_adj is not lowered") {
		t.Errorf("bridge did not report that it could not lower its oom_score_adj; first stderr:\n%s", sec["stderr"])
	}
	r := c.supervised(t, sec, "exit_code2", "spool2")
	lost := r.tags["bridge.previous_attempt_lost"]
	t.Logf("second attempt exit %d; bridge.previous_attempt_lost: %s", r.code, lost)
	t.Logf("bridge.previous_attempt_last_sample: %s", r.tags["bridge.previous_attempt_last_sample"])
	if !strings.Contains(lost, "attempt 1") || !strings.Contains(lost, "without a clean shutdown") {
		t.Errorf("the next attempt does not report the attempt lost with the group: %q\nfirst stderr:\n%s\nsecond stderr:\n%s",
			lost, sec["stderr"], sec["stderr2"])
	}
}

func (c checker) high(t *testing.T) {
	sec := c.section(t, "high")
	r := c.supervised(t, sec, "exit_code", "spool")
	ev := kv(t, sec["memory.events"])
	v, ok := last(r.samples, "container_memory_high_events_count")
	psi, psiOK := last(r.samples, "container_pressure_memory_some_avg10_percentage")
	t.Logf("memory.high events: bridge %v (present %v), kernel memory.events high %v (read after the exit); oom_kill kernel %v; exit %d, reason %q",
		v, ok, ev["high"], ev["oom_kill"], r.code, r.tags["bridge.exit_reason"])
	t.Logf("memory pressure some avg10: bridge %v (present %v); kernel %q", psi, psiOK, firstLine(sec["memory.pressure"], "some"))
	if r.code != 0 || ev["oom_kill"] != 0 {
		t.Errorf("exit %d, oom_kill %v: memory.high must throttle, not kill; stderr:\n%s", r.code, ev["oom_kill"], sec["stderr"])
	}
	if ev["high"] < 1 {
		t.Fatalf("the kernel never crossed memory.high: %v", ev)
	}
	if !ok || v < 1 || v > ev["high"] {
		t.Errorf("container_memory_high_events_count %v (present %v), want 1..%v", v, ok, ev["high"])
	}
	if !psiOK {
		t.Error("no memory pressure (PSI) series")
	}
}

func (c checker) pids(t *testing.T) {
	sec := c.section(t, "pids")
	r := c.supervised(t, sec, "exit_code", "spool")
	ev := kv(t, sec["pids.events"])
	v, ok := last(r.samples, "container_pids_max_events_count")
	lim, limOK := last(r.samples, "container_pids_limit_count")
	t.Logf("forks refused: bridge %v (present %v), kernel pids.events max %v; pids limit bridge %v, kernel %s; workload: %s",
		v, ok, ev["max"], lim, strings.TrimSpace(sec["pids.max"]), strings.TrimSpace(sec["stdout"]))
	if ev["max"] < 1 {
		t.Fatalf("the kernel refused no fork: %v", ev)
	}
	if !ok || v < 1 || v > ev["max"] {
		var line []string
		for _, s := range r.samples {
			n, _ := s.Value("container_pids_count")
			m, _ := s.Value("container_pids_max_events_count")
			line = append(line, fmt.Sprintf("seq %d %s: pids %v, refused %v", s.Seq, s.Time.Format("15:04:05.000"), n, m))
		}
		t.Errorf("container_pids_max_events_count %v (present %v), want 1..%v; samples:\n%s\nbridge stderr:\n%s",
			v, ok, ev["max"], strings.Join(line, "\n"), sec["stderr"])
	}
	if !limOK || lim != num(t, sec["pids.max"]) {
		t.Errorf("container_pids_limit_count %v (present %v), want %s", lim, limOK, sec["pids.max"])
	}
}

// peakShared: a small job in a cgroup whose memory.peak an earlier process
// left at about 160 MiB. On a kernel that resets memory.peak for one open
// file (reset_probe ok: Linux 6.12 and later) bridge resets it for its
// own and the mark is the job's; on one that does not (Debian 12's 6.1)
// the mark predates the job, and the peak tagged is the job's sampled
// one, its source saying why. Never the earlier process's 160 MiB.
func (c checker) peakShared(t *testing.T) {
	sec := c.section(t, "peak_shared")
	r := c.supervised(t, sec, "exit_code", "spool")
	before, after := num(t, sec["memory.peak.before"])/mb, num(t, sec["memory.peak.after"])/mb
	probe := strings.TrimSpace(sec["reset_probe"])
	resets := probe == "ok"
	t.Logf("guest kernel %s: a write to memory.peak (per-open-file reset) %s", strings.TrimSpace(c.res["@@top"]["kernel"]), probe)
	t.Logf("memory.peak before the job %.1f MB, after %.1f MB; bridge.peak_usage_megabytes %q from %q", before, after,
		r.tags["bridge.peak_usage_megabytes"], r.tags["bridge.peak_usage_source"])
	if r.code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", r.code, sec["stderr"])
	}
	if before < 150 || after != before {
		t.Fatalf("precondition: memory.peak %.1f MB before the job, %.1f MB after; want about 168 MB, unchanged by the small job", before, after)
	}
	if want := fmt.Sprintf("reset_for_bridge=%v", resets); !strings.Contains(sec["stderr"], want) {
		t.Errorf("bridge's start line does not say %s, as the kernel's answer to the shell's write (%s) would:\n%s", want, probe, tail(sec["stderr"], 4000))
	}
	wantSource := fmt.Sprintf("sampled; the kernel's high-water mark memory.peak, %.1f MB, predates the job", before)
	if resets {
		wantSource = "kernel high-water mark memory.peak"
	}
	if got := r.tags["bridge.peak_usage_source"]; got != wantSource {
		t.Errorf("bridge.peak_usage_source = %q, want %q", got, wantSource)
	}
	if peak, err := strconv.ParseFloat(r.tags["bridge.peak_usage_megabytes"], 64); err != nil || peak >= before/2 {
		t.Errorf("bridge.peak_usage_megabytes = %q: want the small job's, far below the earlier %.1f MB", r.tags["bridge.peak_usage_megabytes"], before)
	}
	if ev := r.tags["bridge.exit_evidence"]; !resets && strings.Contains(ev, "peak_usage_megabytes") {
		t.Errorf("the exit evidence cites a mark that predates the job: %q", ev)
	}
}
