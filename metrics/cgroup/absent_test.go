package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics/internal/kfile"
)

// countOpens makes c count the opens of each path.
func countOpens(c *Collector) map[string]int {
	n := map[string]int{}
	c.files.open = func(path string) (int, error) {
		n[path]++
		return kfile.Open(path)
	}
	return n
}

// A file missing from the cgroup (memory.pressure without PSI here) is not
// opened on every sample: it is probed again after kfile.AbsentLookups samples, and
// a file created meanwhile is picked up then.
func TestAbsentFileReprobedAfterRounds(t *testing.T) {
	f, _, leaf := k8sV2(t, map[string]string{"memory.pressure": "-"}, nil)
	c := f.collector()
	opens := countOpens(c)
	clock := time.Unix(1700000000, 0)
	c.now = func() time.Time { return clock }
	psi := filepath.Join(leaf, "memory.pressure")
	const name = "container_pressure_memory_some_avg10_percentage"

	pts := collect(t, c)
	wantAbsent(t, pts, name)
	wantValue(t, pts, "container_pressure_cpu_some_avg10_percentage", 2) // present files still read
	if opens[psi] != 1 {
		t.Fatalf("first sample opened %s %d times, want 1", psi, opens[psi])
	}
	f.write(psi, "some avg10=3.00 avg60=0 avg300=0 total=1\nfull avg10=1.00 avg60=0 avg300=0 total=1\n")
	// Ten samples a second: the sample count comes before the 30 s.
	for i := 2; i <= kfile.AbsentLookups; i++ {
		clock = clock.Add(100 * time.Millisecond)
		wantAbsent(t, collect(t, c), name)
	}
	if opens[psi] != 1 {
		t.Fatalf("%s opened %d times in %d samples, want 1 (missing files are not probed every sample)",
			psi, opens[psi], kfile.AbsentLookups)
	}
	if opens[filepath.Join(leaf, "cpu.pressure")] != kfile.AbsentLookups {
		t.Errorf("present file opened %d times in %d samples (fixture files are opened each time)",
			opens[filepath.Join(leaf, "cpu.pressure")], kfile.AbsentLookups)
	}
	clock = clock.Add(100 * time.Millisecond)
	wantValue(t, collect(t, c), name, 3) // sample kfile.AbsentLookups+1: probed again
	if opens[psi] != 2 {
		t.Errorf("%s opened %d times, want 2", psi, opens[psi])
	}
}

// At long intervals the time bound comes first: a missing file is probed
// again once kfile.AbsentFor has passed, however few samples that was.
func TestAbsentFileReprobedAfterTime(t *testing.T) {
	f, _, leaf := k8sV2(t, map[string]string{"pids.events": "-"}, nil)
	c := f.collector()
	opens := countOpens(c)
	clock := time.Unix(1700000000, 0)
	c.now = func() time.Time { return clock }
	path := filepath.Join(leaf, "pids.events")
	const name = "container_pids_max_events_count"

	wantAbsent(t, collect(t, c), name)
	f.write(path, "max 9\n")
	clock = clock.Add(kfile.AbsentFor - time.Second)
	wantAbsent(t, collect(t, c), name)
	if opens[path] != 1 {
		t.Fatalf("%s opened %d times before %v passed, want 1", path, opens[path], kfile.AbsentFor)
	}
	clock = clock.Add(time.Second)
	wantValue(t, collect(t, c), name, 9)
	if opens[path] != 2 {
		t.Errorf("%s opened %d times, want 2", path, opens[path])
	}
}

// v1: the same for a memory controller file missing from the leaf.
func TestAbsentFileV1(t *testing.T) {
	v := newV1(t, ModeV1, map[string]string{"memory.oom_control": "-"}, nil, nil)
	f := v.f
	c := f.collector()
	opens := countOpens(c)
	clock := time.Unix(1700000000, 0)
	c.now = func() time.Time { return clock } // stands still: only the sample count counts
	path := filepath.Join(v.memLeaf, "memory.oom_control")
	const name = "container_memory_oom_kill_events_count"

	for range kfile.AbsentLookups {
		wantAbsent(t, collect(t, c), name)
	}
	f.write(path, "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
	wantValue(t, collect(t, c), name, 5)
	if opens[path] != 2 {
		t.Errorf("%s opened %d times in %d samples, want 2", path, opens[path], kfile.AbsentLookups+1)
	}
}

// A pressure file that opens but fails with EOPNOTSUPP (a kernel booted
// with psi=0) is remembered as missing too: no open a sample.
func TestPSIOffFileNotReopenedEachSample(t *testing.T) {
	f, _, leaf := k8sV2(t, nil, nil)
	c := f.collector()
	opens := countOpens(c)
	psi := filepath.Join(leaf, "memory.pressure")
	c.files.readFresh = func(fd int, buf []byte, size int) ([]byte, error) {
		if target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil && target == psi {
			return buf[:0], syscall.EOPNOTSUPP
		}
		return kfile.ReadWhole(fd, buf, size)
	}
	clock := time.Unix(1700000000, 0)
	c.now = func() time.Time { return clock }
	const name = "container_pressure_memory_some_avg10_percentage"
	for i := 1; i <= kfile.AbsentLookups; i++ {
		clock = clock.Add(100 * time.Millisecond)
		pts := collect(t, c)
		wantAbsent(t, pts, name)
		wantValue(t, pts, "container_pressure_cpu_some_avg10_percentage", 2)
	}
	if opens[psi] != 1 {
		t.Fatalf("%s (EOPNOTSUPP) opened %d times in %d samples, want 1", psi, opens[psi], kfile.AbsentLookups)
	}
	clock = clock.Add(100 * time.Millisecond)
	collect(t, c)
	if opens[psi] != 2 {
		t.Errorf("%s opened %d times after %d samples, want 2 (probed again)", psi, opens[psi], kfile.AbsentLookups+1)
	}
}
