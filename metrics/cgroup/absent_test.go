package cgroup

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/internal/kfile"
)

// A file missing from the cgroup (memory.pressure without PSI here) is not
// opened on every sample: a file created after the first sample is not seen
// until it is probed again, at sample kfile.AbsentLookups+1. (The Reader's
// own tests count the opens: internal/kfile.)
func TestAbsentFileReprobedAfterRounds(t *testing.T) {
	f, _, leaf := k8sV2(t, map[string]string{"memory.pressure": "-"}, nil)
	c := f.collector()
	clock := time.Unix(1700000000, 0)
	c.now = func() time.Time { return clock }
	psi := filepath.Join(leaf, "memory.pressure")
	const name = "container_pressure_memory_some_avg10_percentage"

	pts := collect(t, c)
	wantAbsent(t, pts, name)
	wantValue(t, pts, "container_pressure_cpu_some_avg10_percentage", 2) // present files still read
	f.write(psi, "some avg10=3.00 avg60=0 avg300=0 total=1\nfull avg10=1.00 avg60=0 avg300=0 total=1\n")
	// Ten samples a second: the sample count comes before the 30 s.
	for i := 2; i <= kfile.AbsentLookups; i++ {
		clock = clock.Add(100 * time.Millisecond)
		wantAbsent(t, collect(t, c), name)
	}
	clock = clock.Add(100 * time.Millisecond)
	wantValue(t, collect(t, c), name, 3) // sample kfile.AbsentLookups+1: probed again
}

// At long intervals the time bound comes first: a missing file is probed
// again once kfile.AbsentFor has passed, however few samples that was.
func TestAbsentFileReprobedAfterTime(t *testing.T) {
	f, _, leaf := k8sV2(t, map[string]string{"pids.events": "-"}, nil)
	c := f.collector()
	clock := time.Unix(1700000000, 0)
	c.now = func() time.Time { return clock }
	path := filepath.Join(leaf, "pids.events")
	const name = "container_pids_max_events_count"

	wantAbsent(t, collect(t, c), name)
	f.write(path, "max 9\n")
	clock = clock.Add(kfile.AbsentFor - time.Second)
	wantAbsent(t, collect(t, c), name) // not looked at before kfile.AbsentFor
	clock = clock.Add(time.Second)
	wantValue(t, collect(t, c), name, 9)
}

// v1: the same for a memory controller file missing from the leaf.
func TestAbsentFileV1(t *testing.T) {
	v := newV1(t, ModeV1, map[string]string{"memory.oom_control": "-"}, nil, nil)
	f := v.f
	c := f.collector()
	clock := time.Unix(1700000000, 0)
	c.now = func() time.Time { return clock } // stands still: only the sample count counts
	path := filepath.Join(v.memLeaf, "memory.oom_control")
	const name = "container_memory_oom_kill_events_count"

	wantAbsent(t, collect(t, c), name)
	f.write(path, "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
	for i := 2; i <= kfile.AbsentLookups; i++ {
		wantAbsent(t, collect(t, c), name) // not looked at again yet
	}
	wantValue(t, collect(t, c), name, 5)
}
