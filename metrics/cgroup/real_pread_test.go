package cgroup_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/internal/kfile"
)

// The collector keeps its cgroup files open and re-reads them with pread.
// These tests check on the real v1 kernel files that a re-read is fresh, and
// that a removed cgroup is no data (not stale numbers), then read again once
// a cgroup of that name is made anew.

func readUint(t *testing.T, path string) float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return float64(v)
}

// statKey reads one key of a flat-keyed file (cpu.stat) afresh.
func statKey(t *testing.T, path, key string) float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && k == key {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return float64(n)
		}
	}
	t.Fatalf("%s has no %s", path, key)
	return 0
}

// Each re-read lies between fresh reads of the same files taken just before
// and after it; before each, the test waits (polling, no fixed time) until
// the busy loop has moved the kernel's counters past the previous re-read,
// so a stale pread could not pass.
func TestRealPreadIsFresh(t *testing.T) {
	g := cgrouptest.NewV1(t, busyLimits)
	pid := startIn(t, g, "busy")
	c := collectorFor(t, pid)
	defer c.Close()
	usage := filepath.Join(g.CPUAcct, "cpuacct.usage")
	cpuStat := filepath.Join(g.CPU, "cpu.stat")
	var lastUsage, lastPeriods float64
	for i := 0; i < 4; i++ {
		for deadline := time.Now().Add(60 * time.Second); readUint(t, usage)/1e9 <= lastUsage || statKey(t, cpuStat, "nr_periods") <= lastPeriods; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("read %d: the busy loop moved neither cpuacct.usage nor nr_periods in 60 s", i)
			}
		}
		before, beforeP := readUint(t, usage)/1e9, statKey(t, cpuStat, "nr_periods")
		pts := collect(t, c)
		after, afterP := readUint(t, usage)/1e9, statKey(t, cpuStat, "nr_periods")
		u := value(t, pts, "container_cpu_usage_seconds_total")
		if u < before || u > after {
			t.Errorf("read %d: usage %v s outside the fresh reads around it [%v, %v]: stale", i, u, before, after)
		}
		p := value(t, pts, "container_cpu_periods_total")
		if p < beforeP || p > afterP {
			t.Errorf("read %d: periods %v outside the fresh reads around it [%v, %v]: stale", i, p, beforeP, afterP)
		}
		if i > 0 && (u <= lastUsage || p <= lastPeriods) {
			t.Errorf("read %d: usage %v s, periods %v did not grow from %v, %v though the kernel's did: stale",
				i, u, p, lastUsage, lastPeriods)
		}
		lastUsage, lastPeriods = u, p
	}
}

func TestRealRemovedCgroupIsNoData(t *testing.T) {
	g := cgrouptest.NewV1(t, realLimits)
	pid := startIn(t, g, "idle")
	c := collectorFor(t, pid)
	defer c.Close()
	pts := collect(t, c)
	value(t, pts, "container_memory_usage_megabytes")
	value(t, pts, "container_cpu_usage_seconds_total")

	// Move the helper out and remove the group under the open descriptors.
	for _, d := range g.Dirs() {
		if err := os.WriteFile(filepath.Join(filepath.Dir(d), "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range g.Dirs() {
		rmdir(t, d)
	}
	pts = collect(t, c) // no error: a removed cgroup is no data
	for _, name := range []string{"container_memory_usage_megabytes", "container_memory_working_set_megabytes",
		"container_cpu_usage_seconds_total", "container_cpu_periods_total"} {
		if p, ok := pts[name]; ok {
			t.Errorf("%s = %v (%s) after the cgroup was removed: stale", name, p.Value, p.Source)
		}
	}

	// A cgroup of the same name made anew is read again (reopened) once the
	// files found missing are probed again: within kfile.AbsentLookups samples.
	for _, d := range g.Dirs() {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i <= kfile.AbsentLookups; i++ {
		pts = collect(t, c)
		if _, ok := pts["container_cpu_usage_seconds_total"]; ok {
			break
		}
	}
	if v := value(t, pts, "container_memory_usage_megabytes"); v != 0 {
		t.Errorf("usage of the new, empty cgroup = %v MB, want 0", v)
	}
	if v := value(t, pts, "container_cpu_usage_seconds_total"); v != 0 {
		t.Errorf("cpu usage of the new, empty cgroup = %v s, want 0", v)
	}
}

// rmdir removes a cgroup, retrying while the kernel still tears down a task
// that just left it.
func rmdir(t *testing.T, dir string) {
	t.Helper()
	var err error
	for i := 0; i < 50; i++ {
		if err = syscall.Rmdir(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("removing %s: %v", dir, err)
}
