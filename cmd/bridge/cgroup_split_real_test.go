package main

import (
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
)

// The cpu and cpuacct hierarchies mounted apart (as on this host), with
// bridge in a child cpu cgroup under a quota but still in the root cpuacct
// cgroup: usage is the root's, the limit the child's. bridge must say so and
// not divide one by the other (issue 10 item 5: "peak container CPU 1.65
// cores of limit 0.50 cores").
func TestSampleRealCgroupCPUAcctApart(t *testing.T) {
	g := cgrouptest.NewV1(t, realLimits)
	if g.CPUAcct == g.CPU {
		t.Skip("cpu and cpuacct are co-mounted here: they cannot place a process apart")
	}
	// Enter memory and cpu only: cpuacct stays the test process's own.
	apart := &cgrouptest.Group{Memory: g.Memory, CPU: g.CPU, CPUAcct: g.CPU}
	s := sampleIn(t, apart, "", "--window", "1s")
	split, _ := s.Detected.Cgroup["cpu_usage_limit_split"].(string)
	t.Logf("cpu_usage_limit_split: %s", split)
	if !strings.Contains(split, g.CPU) {
		t.Errorf("detected cpu_usage_limit_split = %q, want it to name the cpu cgroup %s", split, g.CPU)
	}
	if v := s.value(t, "container_cpu_usage_limit_split_count"); v != 1 {
		t.Errorf("container_cpu_usage_limit_split_count = %v, want 1", v)
	}
	for _, m := range s.Metrics {
		if m.Name == "container_cpu_utilization_percentage" {
			t.Errorf("utilization %v computed from usage and limit of different cgroups (%s)", m.Value, m.Source)
		}
	}
	s.value(t, "container_cpu_limit_cores")
	s.value(t, "container_cpu_usage_cores")
}
