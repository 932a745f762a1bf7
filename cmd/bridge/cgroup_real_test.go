package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/metrics/cgroup"
)

// These tests run the real `bridge sample --json` inside real v1 cgroups (a
// 256 MiB memory limit, a 0.5 CPU quota) on hosts where that is possible,
// and check what it reports against what the kernel enforces.

var realLimits = cgrouptest.Limits{MemoryBytes: 256 << 20, QuotaUs: 50000, PeriodUs: 100000}

// busyLimits is a quota so small (0.1 core) that a busy loop exhausts it in
// every period even on a loaded machine: throttling is then certain, not a
// matter of how much CPU the loop happened to get.
var busyLimits = cgrouptest.Limits{MemoryBytes: 256 << 20, QuotaUs: 10000, PeriodUs: 100000}

type realSample struct {
	Detected struct {
		Cgroup map[string]any `json:"cgroup"`
	} `json:"detected"`
	Metrics []struct {
		Name   string `json:"name"`
		Value  any    `json:"value"`
		Unit   string `json:"unit"`
		Scope  string `json:"scope"`
		Source string `json:"source"`
	} `json:"metrics"`
}

// cpuAtRoot reports whether this test process's CPU usage cgroup (v1
// cpuacct, else the v2 one), which a bridge it starts inherits, is the
// root of its hierarchy: bridge then sends no container_cpu_ series.
func cpuAtRoot(t *testing.T) bool {
	t.Helper()
	l, err := cgroup.FindLayout(cgroup.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return false
	}
	at := l.AtRoot()
	if _, v1 := l.Paths()["cpuacct"]; v1 {
		return slices.Contains(at, "cpuacct")
	}
	return slices.Contains(at, "cpu")
}

// value returns a metric's value, failing the test when it is absent.
func (s realSample) value(t *testing.T, name string) float64 {
	t.Helper()
	for _, m := range s.Metrics {
		if m.Name == name {
			v, ok := m.Value.(float64)
			if !ok {
				t.Fatalf("%s = %v, not a number", name, m.Value)
			}
			t.Logf("%s = %v %s (%s, %s)", name, v, m.Unit, m.Scope, m.Source)
			return v
		}
	}
	t.Fatalf("%s missing from the sample", name)
	return 0
}

// sampleIn runs `sh -c '<join the group> && { <before> exec bridge sample
// --json ARGS; }'` in its own process group, which is killed at cleanup so
// that anything `before` left running dies before the cgroups are removed.
func sampleIn(t *testing.T, g *cgrouptest.Group, before string, args ...string) realSample {
	t.Helper()
	bin := testbin.Bridge(t)
	script := g.ShellEnter() + "{ " + before + `exec "$0" sample --json "$@"; }`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard, not a timing check
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", script, bin}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 10 * time.Second // a background child must not hold Wait on stderr
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	var s realSample
	decErr := json.NewDecoder(bufio.NewReader(stdout)).Decode(&s)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("bridge sample in %v: %v\nstderr:\n%s", g.Dirs(), err, stderr.String())
	}
	if decErr != nil {
		t.Fatalf("decoding bridge sample --json: %v\nstderr:\n%s", decErr, stderr.String())
	}
	return s
}

func TestSampleRealCgroupLimits(t *testing.T) {
	g := cgrouptest.NewV1(t, realLimits)
	s := sampleIn(t, g, "")

	d := s.Detected.Cgroup
	t.Logf("detected.cgroup = %v", d)
	if d["memory_limit_bytes"] != float64(256<<20) || d["memory_limit_set_by"] != g.Memory+"/memory.limit_in_bytes" {
		t.Errorf("detected memory limit %v set by %v, want %d set by %s",
			d["memory_limit_bytes"], d["memory_limit_set_by"], 256<<20, g.Memory+"/memory.limit_in_bytes")
	}
	if d["cpu_limit_cores"] != 0.5 || d["cpu_limit_set_by"] != g.CPU+"/cpu.cfs_quota_us quota" {
		t.Errorf("detected cpu limit %v set by %v, want 0.5 set by %s/cpu.cfs_quota_us quota",
			d["cpu_limit_cores"], d["cpu_limit_set_by"], g.CPU)
	}
	if paths, _ := d["paths"].(map[string]any); paths["memory"] != g.Memory || paths["cpu"] != g.CPU {
		t.Errorf("detected paths %v, want memory %s and cpu %s", paths, g.Memory, g.CPU)
	}

	if v := s.value(t, "container_memory_limit_megabytes"); v != 268.435456 {
		t.Errorf("container_memory_limit_megabytes = %v, want 268.435456 (256 MiB)", v)
	}
	if v := s.value(t, "container_cpu_limit_cores"); v != 0.5 {
		t.Errorf("container_cpu_limit_cores = %v, want 0.5", v)
	}
	// The node's memory is still the host's, read the same way here.
	host := memTotalMB(t)
	if v := s.value(t, "node_memory_total_megabytes"); math.Abs(v-host) > 1e-6 {
		t.Errorf("node_memory_total_megabytes = %v, want the host's %v", v, host)
	}
}

func TestSampleRealCgroupBusyLoop(t *testing.T) {
	g := cgrouptest.NewV1(t, busyLimits)
	s := sampleIn(t, g, "(while :; do :; done) </dev/null >/dev/null 2>&1 & ", "--window", "2s")
	// Only the quota's ceiling is the kernel's guarantee: how much of it
	// the loop got depends on how busy the machine is.
	if v := s.value(t, "container_cpu_usage_cores"); v <= 0 || v > 0.12 {
		t.Errorf("busy loop under a 0.1 CPU quota: container_cpu_usage_cores = %v, want (0, 0.12]", v)
	}
	if v := s.value(t, "container_cpu_throttled_periods_percentage"); v <= 0 {
		t.Errorf("container_cpu_throttled_periods_percentage = %v, want > 0", v)
	}
	if v := s.value(t, "container_cpu_throttled_seconds_total"); v <= 0 {
		t.Errorf("container_cpu_throttled_seconds_total = %v, want > 0", v)
	}
}

func TestSampleRealCgroupPageCache(t *testing.T) {
	g := cgrouptest.NewV1(t, realLimits)
	file := filepath.Join(t.TempDir(), "cache.bin") // on disk: tmpfs pages would be shmem, not file cache
	s := sampleIn(t, g, "dd if=/dev/zero of="+file+" bs=1M count=100 2>/dev/null && ")
	usage := s.value(t, "container_memory_usage_megabytes")
	ws := s.value(t, "container_memory_working_set_megabytes")
	if usage < 100 {
		t.Errorf("usage %v MB after writing 100 MB, want >= 100", usage)
	}
	if ws >= usage {
		t.Errorf("working set %v MB >= usage %v MB: the page cache was not subtracted", ws, usage)
	}
}

// memTotalMB reads MemTotal from /proc/meminfo in megabytes.
func memTotalMB(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024 / 1e6
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}
