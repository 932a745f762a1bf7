package main

import (
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/metrics"
)

// bridge in the host's root cpu and cpuacct cgroups (a process on a v1 host
// outside any container, cpu:/) and a memory cgroup of its own, against a
// real MLflow server: the root's CPU counters are the host's, so no
// container_cpu_ series is sampled or sent, and the start's log line, the
// run's tag and the end-of-run table say why; the memory cgroup's series
// are sent as usual.
func TestRootCPUCgroupIsNotAContainer(t *testing.T) {
	srv := mlflowtest.Shared(t)
	g := cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 512 * mib})
	j := newJob(t, srv.URL, "--interval=250ms", "--trackers=mlflow", "--", "sh", "-c", "sleep 1.5")
	j.enterFirst(g.ShellEnterRootCPU())
	if code := j.run(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
	}
	const note = "cgroups are the root cgroups, the host's and not a container's: their container_ series are not sent"

	samples := j.spooledSamples(t)
	memory := false
	for _, s := range samples {
		for _, p := range s.Points {
			if strings.HasPrefix(p.Name(), "container_cpu_") {
				t.Errorf("sample %d holds %s = %v: the host's CPU under a container's name", s.Seq, p.Name(), p.Value)
			}
			memory = memory || p.Name() == "container_memory_working_set_megabytes"
		}
	}
	if len(samples) < 2 || !memory {
		t.Fatalf("%d samples, container memory sampled %v: want 2 or more with the memory cgroup's series; stderr:\n%s", len(samples), memory, &j.err)
	}

	id := j.runID(t)
	if keys := srv.MetricKeys(t, id, "system/container_cpu_"); len(keys) > 0 {
		t.Errorf("the run holds %v", keys)
	}
	if keys := srv.MetricKeys(t, id, "system/container_memory_working_set_megabytes"); len(keys) != 1 {
		t.Errorf("the run lacks the memory cgroup's working set (%v)", keys)
	}
	tag := srv.GetRun(t, id).Tags["bridge.cgroup.at_root"]
	if !strings.Contains(tag, "cpu, cpuacct") || !strings.Contains(tag, note) || strings.Contains(tag, "memory") {
		t.Errorf("bridge.cgroup.at_root = %q, want it to name cpu and cpuacct (not memory) and say %q", tag, note)
	}
	stderr := j.err.String()
	if n := strings.Count(stderr, "level=INFO msg=\"bridge's cpu, cpuacct"); n != 1 {
		t.Errorf("the start's log line is there %d times, want once:\n%s", n, stderr)
	}
	row := tableRow(stderr, "container scope")
	if !strings.Contains(row, "cpu, cpuacct") || !strings.Contains(row, note) {
		t.Errorf("the end-of-run table's container scope row = %q:\n%s", row, stderr)
	}
	if row := tableRow(stderr, "peak container CPU"); row != "" {
		t.Errorf("the table shows peak container CPU %q", row)
	}
}

// tableRow is the value of the end-of-run table's row what in bridge's
// stderr, or "".
func tableRow(stderr, what string) string {
	_, table, _ := strings.Cut(stderr, "bridge: end of run")
	for _, l := range strings.Split(table, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), what+"  "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// spooledSamples are the samples of the job's spool.
func (j *job) spooledSamples(t *testing.T) []metrics.Sample {
	t.Helper()
	ss, _, _, err := spooltest.ReadFile(j.spool)
	if err != nil {
		t.Fatalf("reading spool %s: %v\nstderr:\n%s", j.spool, err, &j.err)
	}
	return ss
}
