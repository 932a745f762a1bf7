package main

import (
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
)

// The cpu and cpuacct hierarchies mounted apart (as on this host), with
// bridge in cpu and cpuacct cgroups of its own, different ones: a child of
// the quota'd cpu cgroup, and a cpuacct cgroup beside it. Usage and limit
// are then different cgroups': bridge must say so and not divide one by
// the other (issue 10 item 5: "peak container CPU 1.65 cores of limit 0.50
// cores").
func TestSampleRealCgroupCPUAcctApart(t *testing.T) {
	g := cgrouptest.NewV1(t, realLimits)
	if g.CPUAcct == g.CPU {
		t.Skip("cpu and cpuacct are co-mounted here: they cannot place a process apart")
	}
	inner := cgrouptest.Sub(t, g.CPU, "inner")
	apart := &cgrouptest.Group{Memory: g.Memory, CPU: inner, CPUAcct: g.CPUAcct}
	s := sampleIn(t, apart, "", "--window", "1s")
	split, _ := s.Detected.Cgroup["cpu_usage_limit_split"].(string)
	t.Logf("cpu_usage_limit_split: %s", split)
	if !strings.Contains(split, inner) || !strings.Contains(split, g.CPUAcct) {
		t.Errorf("detected cpu_usage_limit_split = %q, want it to name the cpu cgroup %s and the cpuacct cgroup %s", split, inner, g.CPUAcct)
	}
	if v := s.value(t, "container_cpu_usage_limit_split_count"); v != 1 {
		t.Errorf("container_cpu_usage_limit_split_count = %v, want 1", v)
	}
	for _, m := range s.Metrics {
		if m.Name == "container_cpu_utilization_percentage" {
			t.Errorf("utilization %v computed from usage and limit of different cgroups (%s)", m.Value, m.Source)
		}
	}
	if v := s.value(t, "container_cpu_limit_cores"); v != 0.5 {
		t.Errorf("container_cpu_limit_cores = %v, want the parent's 0.5", v)
	}
	s.value(t, "container_cpu_usage_cores")
}

// The same, with bridge still in the root cpuacct cgroup (a v1 host
// process's cpuacct:/): the usage would be the whole host's, so it is not
// read at all (neither usage nor utilization nor a split); the limit is
// still the child cpu cgroup's, and `bridge sample` says that cpuacct is
// the host's root.
func TestSampleRealCgroupCPUAcctAtRoot(t *testing.T) {
	g := cgrouptest.NewV1(t, realLimits)
	if g.CPUAcct == g.CPU {
		t.Skip("cpu and cpuacct are co-mounted here: they cannot place a process apart")
	}
	apart := &cgrouptest.Group{Memory: g.Memory, CPU: g.CPU, CPUAcct: cgrouptest.RootOf(g.CPUAcct)}
	s := sampleIn(t, apart, "", "--window", "1s")
	for _, m := range s.Metrics {
		switch m.Name {
		case "container_cpu_usage_cores", "container_cpu_usage_seconds_total", "container_cpu_utilization_percentage", "container_cpu_usage_limit_split_count":
			t.Errorf("%s = %v (%s): the root cpuacct cgroup's usage is the host's", m.Name, m.Value, m.Source)
		}
	}
	if v := s.value(t, "container_cpu_limit_cores"); v != 0.5 {
		t.Errorf("container_cpu_limit_cores = %v, want the cpu cgroup's 0.5", v)
	}
	// The test's own cpuset and pids cgroups may be the roots too; its cpu
	// one is not.
	if at, _ := s.Detected.Cgroup["at_root"].(string); !strings.HasPrefix(at, "bridge's cpuacct") || !strings.Contains(at, "not a container's") {
		t.Errorf("detected at_root = %q, want it to name cpuacct, not cpu", at)
	}
}
