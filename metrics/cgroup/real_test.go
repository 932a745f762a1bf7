package cgroup_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/cgroup"
)

// helperEnv switches the re-executed test binary into a helper process that
// does one job (busy, pagecache, idle) inside the cgroups it was moved to.
const helperEnv = "BRIDGE_CGROUP_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

// helper waits for "go" on stdin (sent once it is inside the cgroups), does
// its job, prints "ready" and then keeps the cgroup charged until stdin
// closes.
func helper(mode string) int {
	in := bufio.NewReader(os.Stdin)
	if line, err := in.ReadString('\n'); err != nil || line != "go\n" {
		fmt.Fprintln(os.Stderr, "helper: no go:", line, err)
		return 2
	}
	switch mode {
	case "busy":
		go func() {
			for x := 0; ; x++ {
				_ = x * x
			}
		}()
	case "pagecache":
		// 100 MB written to a disk file sits in the page cache, on the
		// inactive file list, charged to this memory cgroup.
		f, err := os.Create(filepath.Join(os.Getenv("HELPER_DIR"), "cache.bin"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 2
		}
		buf := make([]byte, 1<<20)
		for i := 0; i < 100; i++ {
			if _, err := f.Write(buf); err != nil {
				fmt.Fprintln(os.Stderr, "helper:", err)
				return 2
			}
		}
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 2
		}
	case "idle":
	default:
		fmt.Fprintln(os.Stderr, "helper: unknown mode", mode)
		return 2
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, in)
	return 0
}

var realLimits = cgrouptest.Limits{MemoryBytes: 256 << 20, QuotaUs: 50000, PeriodUs: 100000}

// busyLimits is a quota so small (0.1 core) that a busy loop exhausts it in
// every period even on a loaded machine: throttling is then certain, not a
// matter of how much CPU the loop happened to get.
var busyLimits = cgrouptest.Limits{MemoryBytes: 256 << 20, QuotaUs: 10000, PeriodUs: 100000}

// startIn starts a helper, moves it into g and waits until it did its job.
// It is killed at cleanup, before the cgroups are removed.
func startIn(t testing.TB, g *cgrouptest.Group, mode string, env ...string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+mode), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("helper %s did not get ready: %q %v", mode, line, err)
	}
	return cmd.Process.Pid
}

func collectorFor(t testing.TB, pid int) *cgroup.Collector {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	l, err := cgroup.FindLayout(cgroup.Options{PID: pid, Log: log})
	if err != nil {
		t.Fatalf("FindLayout for pid %d: %v", pid, err)
	}
	return cgroup.New(l, log)
}

// explained is a point and where it came from.
type explained struct {
	metrics.Point
	Source string
}

func collect(t *testing.T, c *cgroup.Collector) map[string]explained {
	t.Helper()
	b := metrics.Batch{Explain: true}
	if err := c.Collect(context.Background(), &b); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]explained{}
	for i, p := range b.Points {
		out[p.Name()] = explained{p, b.Sources[i]}
	}
	return out
}

func value(t *testing.T, pts map[string]explained, name string) float64 {
	t.Helper()
	p, ok := pts[name]
	if !ok {
		t.Fatalf("%s missing from %v", name, pts)
	}
	t.Logf("%s = %v (%s)", name, p.Value, p.Source)
	return p.Value
}

func TestRealLimits(t *testing.T) {
	g := cgrouptest.NewV1(t, realLimits)
	pid := startIn(t, g, "idle")
	c := collectorFor(t, pid)
	inf := c.Info()
	if inf.Paths["memory"] != g.Memory || inf.Paths["cpu"] != g.CPU || inf.Paths["cpuacct"] != g.CPUAcct {
		t.Errorf("paths = %v, want %s, %s, %s", inf.Paths, g.Memory, g.CPU, g.CPUAcct)
	}
	if inf.MemoryLimitBytes != 256<<20 || inf.MemoryLimitSetBy != g.Memory+"/memory.limit_in_bytes" {
		t.Errorf("memory limit = %d set by %q", inf.MemoryLimitBytes, inf.MemoryLimitSetBy)
	}
	if inf.CPULimitCores != 0.5 || inf.CPULimitSetBy != g.CPU+"/cpu.cfs_quota_us quota" {
		t.Errorf("cpu limit = %v set by %q", inf.CPULimitCores, inf.CPULimitSetBy)
	}
	pts := collect(t, c)
	if v := value(t, pts, "container_memory_limit_megabytes"); v != 268.435456 {
		t.Errorf("memory limit = %v MB, want 268.435456 (256 MiB)", v)
	}
	if v := value(t, pts, "container_cpu_limit_cores"); v != 0.5 {
		t.Errorf("cpu limit = %v cores, want 0.5", v)
	}
}

func TestRealBusyLoopIsThrottled(t *testing.T) {
	g := cgrouptest.NewV1(t, busyLimits)
	pid := startIn(t, g, "busy")
	c := collectorFor(t, pid)
	if _, err := collecttest.Collect(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the window the usage is averaged over, not a timing check
	pts := collect(t, c)
	// Only the quota's ceiling is a kernel guarantee; how much of it the
	// loop got depends on how busy this machine is, so no lower bound.
	if v := value(t, pts, "container_cpu_usage_cores"); v <= 0 || v > 0.12 {
		t.Errorf("busy loop under a 0.1 CPU quota used %v cores, want (0, 0.12]", v)
	}
	if v := value(t, pts, "container_cpu_utilization_percentage"); v <= 0 || v > 120 {
		t.Errorf("utilization = %v%%, want (0, 120]%% of the 0.1 core limit", v)
	}
	if v := value(t, pts, "container_cpu_throttled_periods_percentage"); v <= 0 {
		t.Errorf("throttled periods = %v%%, want > 0", v)
	}
	if v := value(t, pts, "container_cpu_throttled_seconds_total"); v <= 0 {
		t.Errorf("throttled seconds = %v, want > 0", v)
	}
}

func TestRealPageCacheIsNotWorkingSet(t *testing.T) {
	g := cgrouptest.NewV1(t, realLimits)
	pid := startIn(t, g, "pagecache", "HELPER_DIR="+t.TempDir())
	c := collectorFor(t, pid)
	pts := collect(t, c)
	usage := value(t, pts, "container_memory_usage_megabytes")
	ws := value(t, pts, "container_memory_working_set_megabytes")
	cache := value(t, pts, "container_memory_cache_megabytes")
	if usage < 100 {
		t.Errorf("usage = %v MB after writing 100 MB, want >= 100", usage)
	}
	if cache < 90 {
		t.Errorf("cache = %v MB after writing 100 MB, want >= 90", cache)
	}
	if ws >= usage {
		t.Errorf("working set %v MB >= usage %v MB: inactive page cache not subtracted", ws, usage)
	}
	if usage-ws < 50 {
		t.Errorf("usage - working set = %v MB, want most of the 100 MB of fresh (inactive) page cache", usage-ws)
	}
	pct := value(t, pts, "container_memory_working_set_percentage")
	if want := ws / 268.435456 * 100; pct < want-1e-9 || pct > want+1e-9 {
		t.Errorf("usage percentage = %v, want %v", pct, want)
	}
}
