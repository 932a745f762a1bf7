package forensics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/cgroup"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/supervisor"
)

var t0 = time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)

func sample(seq int64, at time.Duration, kv ...any) metrics.Sample {
	s := metrics.Sample{Seq: seq, Time: t0.Add(at)}
	for i := 0; i < len(kv); i += 2 {
		s.Points = append(s.Points, metrics.Named(kv[i].(string), kv[i+1].(float64)))
	}
	return s
}

// accumulate adds samples of a job whose cgroup was made for it: the
// kernel's memory high-water mark before it was 0.
func accumulate(samples ...metrics.Sample) *summary.Accumulator {
	acc := summary.NewWith(summary.Options{PeakStart: &summary.PeakStart{}})
	for _, s := range samples {
		acc.Add(s)
	}
	return acc
}

func TestFromRun(t *testing.T) {
	const (
		ws, lim, pct = "container_memory_working_set_megabytes", "container_memory_limit_megabytes", "container_memory_working_set_percentage"
		kill, oom    = "container_memory_oom_kill_events_count", "container_memory_oom_events_count"
		avail, total = "node_memory_available_megabytes", "node_memory_total_megabytes"
	)
	acc := accumulate(
		sample(0, 0, ws, 50.0, lim, 200.0, pct, 25.0, kill, 2.0, oom, 3.0, avail, 20000.0, total, 25000.0,
			"container_pressure_memory_some_avg10_percentage", 1.0, "container_cpu_throttled_periods_percentage", 10.0),
		sample(1, 10*time.Second, ws, 120.0, lim, 200.0, pct, 60.0, kill, 2.0, oom, 3.0, avail, 15000.0, total, 25000.0,
			"container_pressure_memory_some_avg10_percentage", 40.0, "container_cpu_throttled_periods_percentage", 30.0),
		sample(2, 11*time.Second, ws, 190.0, lim, 200.0, pct, 95.0, kill, 2.0, oom, 3.0, avail, 900.0, total, 25000.0,
			"container_memory_peak_megabytes", 210.0),
		// The final sample, right after the exit: memory freed, counters moved.
		sample(3, 12*time.Second, ws, 5.0, lim, 200.0, pct, 2.5, kill, 3.0, oom, 4.0, avail, 21000.0, total, 25000.0),
	)
	exit := supervisor.Exit{Code: 137, Signal: syscall.SIGKILL, Time: t0.Add(12 * time.Second),
		Forwarded: []supervisor.SignalRecord{{Signal: syscall.SIGWINCH, Time: t0}}}
	xids := []metrics.XidEvent{{Xid: 79}}
	e := FromRun(Run{Exit: exit, Acc: acc, Xids: xids, CgroupVersion: "v2"})

	if e.ExitCode != 137 || e.Signal != syscall.SIGKILL || !e.ExitTime.Equal(exit.Time) || len(e.Forwarded) != 1 || e.CgroupVersion != "v2" {
		t.Errorf("exit fields: %+v", e)
	}
	if want := (Counter{Known: true, First: 2, Last: 3, AtExit: true}); e.OOMKill != want {
		t.Errorf("OOMKill = %+v, want %+v", e.OOMKill, want)
	}
	if want := (Counter{Known: true, First: 3, Last: 4, AtExit: true}); e.OOM != want {
		t.Errorf("OOM = %+v, want %+v", e.OOM, want)
	}
	if e.OOMGroupKill.Known {
		t.Errorf("OOMGroupKill known without the metric: %+v", e.OOMGroupKill)
	}
	m := e.Memory
	if !m.Known || m.LimitMB != 200 || m.RecentWorkingSetMB != 190 || m.RecentSharePercent != 95 || !m.RecentAt.Equal(t0.Add(11*time.Second)) ||
		m.PeakWorkingSetMB != 190 || m.PeakWorkingSet.SharePercent != 100 || m.PeakUsageMB != (Reading{Value: 210, Known: true, Expected: true}) {
		t.Errorf("Memory = %+v", m)
	}
	if n := e.Node; !n.Known || n.MinAvailableMB != 900 || n.TotalMB != 25000 || n.MinAvailablePercent != 3.6 {
		t.Errorf("Node = %+v", n)
	}
	if e.PeakMemoryPressureSome != (Reading{Value: 40, Known: true, Expected: true}) || e.PeakMemoryPressureFull.Known {
		t.Errorf("pressure some %+v full %+v", e.PeakMemoryPressureSome, e.PeakMemoryPressureFull)
	}
	if e.ThrottledShare != (Reading{Value: 20, Known: true, Expected: true}) {
		t.Errorf("ThrottledShare = %+v, want mean 20", e.ThrottledShare)
	}
	if len(e.Xids) != 1 || e.Samples != 4 || !e.LastSample.Equal(t0.Add(12*time.Second)) {
		t.Errorf("xids %v samples %d last %v", e.Xids, e.Samples, e.LastSample)
	}
	// The caller's slices are copied.
	xids[0].Xid = 1
	if e.Xids[0].Xid != 79 {
		t.Error("FromRun kept the caller's Xid slice")
	}
	if v := Classify(e); v.Reason != ReasonCgroupOOMKill {
		t.Errorf("Classify = %s: %s", v.Reason, v.Summary)
	}
}

func TestFromRunEdgeCases(t *testing.T) {
	const ws, kill = "container_memory_working_set_megabytes", "container_memory_oom_kill_events_count"
	t.Run("nothing measured", func(t *testing.T) {
		e := FromRun(Run{Exit: supervisor.Exit{Code: 1}})
		if e.ExitCode != 1 || e.Samples != 0 || e.Memory.Known || e.OOMKill.Known || e.Node.Known {
			t.Errorf("%+v", e)
		}
		if v := Classify(e); v.Reason != ReasonAppError {
			t.Errorf("Classify = %s", v.Reason)
		}
	})
	t.Run("counter missing from the final sample", func(t *testing.T) {
		acc := accumulate(sample(0, 0, ws, 10.0, kill, 0.0), sample(1, time.Second, ws, 10.0))
		e := FromRun(Run{Exit: supervisor.Exit{Code: 137, Signal: syscall.SIGKILL}, Acc: acc})
		if want := (Counter{Known: true, First: 0, Last: 0, AtExit: false}); e.OOMKill != want {
			t.Errorf("OOMKill = %+v, want %+v", e.OOMKill, want)
		}
		if e.OOMKill.Steady() {
			t.Error("a counter not read after the exit counts as steady")
		}
	})
	t.Run("no limit", func(t *testing.T) {
		acc := accumulate(sample(0, 0, ws, 10.0), sample(1, time.Second, ws, 30.0))
		e := FromRun(Run{Acc: acc})
		if m := e.Memory; !m.Known || m.LimitMB != 0 || m.RecentSharePercent != 0 || m.PeakWorkingSet.ShareKnown || m.RecentWorkingSetMB != 30 {
			t.Errorf("Memory = %+v", m)
		}
		if _, ok := (Verdict{}).Tags(e)[TagPeakWorkingShare]; ok {
			t.Error("share-of-limit tag without a limit")
		}
	})
	t.Run("share computed without the percentage metric", func(t *testing.T) {
		acc := accumulate(sample(0, 0, ws, 150.0, "container_memory_limit_megabytes", 200.0))
		e := FromRun(Run{Acc: acc})
		if e.Memory.RecentSharePercent != 75 || e.Memory.PeakWorkingSet.SharePercent != 75 {
			t.Errorf("Memory = %+v", e.Memory)
		}
	})
}

// TestV2MemoryEventsFixture runs the real cgroup collector on a v2 tree in
// a temp dir, before and after the kernel would have OOM-killed the child,
// and shows the counters the classifier gets from memory.events.
func TestV2MemoryEventsFixture(t *testing.T) {
	cases := []struct {
		name          string
		before, after string // memory.events
		currentAfter  int64  // memory.current after, bytes
		reason, rule  string
		kill, oom     Counter
		groupKill     Counter
	}{
		{
			name:         "cgroup limit reached",
			before:       "low 0\nhigh 0\nmax 12\noom 0\noom_kill 0\noom_group_kill 0\n",
			after:        "low 0\nhigh 0\nmax 40\noom 1\noom_kill 1\noom_group_kill 0\n",
			currentAfter: 199_800_000,
			reason:       ReasonCgroupOOMKill, rule: "oom_kill_rose+oom_rose",
			kill: counter(0, 1), oom: counter(0, 1), groupKill: counter(0, 0),
		},
		{
			name: "older kernel without oom_group_kill",
			// Kernels before 4.19 write no oom_group_kill line.
			before:       "low 0\nhigh 0\nmax 0\noom 2\noom_kill 2\n",
			after:        "low 0\nhigh 0\nmax 9\noom 3\noom_kill 3\n",
			currentAfter: 199_800_000,
			reason:       ReasonCgroupOOMKill, rule: "oom_kill_rose+oom_rose",
			kill: counter(2, 3), oom: counter(2, 3),
		},
		{
			name:         "killed for an ancestor's limit or the node",
			before:       "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
			after:        "low 0\nhigh 0\nmax 0\noom 0\noom_kill 1\noom_group_kill 0\n",
			currentAfter: 50_000_000,
			reason:       ReasonCgroupOOMKill, rule: "oom_kill_rose+oom_steady",
			kill: counter(0, 1), oom: counter(0, 0), groupKill: counter(0, 0),
		},
		{
			name:         "kill -9: counters steady",
			before:       "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
			after:        "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
			currentAfter: 50_000_000,
			reason:       ReasonKilledBySignal, rule: "sigkill+oom_kill_steady",
			kill: counter(0, 0), oom: counter(0, 0), groupKill: counter(0, 0),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fx := newV2Fixture(t)
			fx.memory(tc.before, 100_000_000)
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			l, err := cgroup.FindLayout(cgroup.Options{ProcRoot: fx.proc, CgroupRoot: fx.cg, PID: fixturePID, Mode: cgroup.ModeV2, Log: log})
			if err != nil {
				t.Fatal(err)
			}
			c := cgroup.New(l, log)
			acc := summary.New()
			collect := func(seq int64) {
				pts, err := collecttest.Collect(context.Background(), c)
				if err != nil {
					t.Fatalf("Collect: %v", err)
				}
				acc.Add(metrics.Sample{Seq: seq, Time: t0.Add(time.Duration(seq) * time.Second), Points: pts})
			}
			collect(0)
			// The last sample before the exit: the working set near its end.
			fx.memory(tc.before, tc.currentAfter)
			collect(1)
			// The final sample after the exit: the child's memory is gone.
			fx.memory(tc.after, 1_000_000)
			collect(2)

			e := FromRun(Run{Exit: supervisor.Exit{Code: 137, Signal: syscall.SIGKILL}, Acc: acc, CgroupVersion: "v2"})
			if e.OOMKill != tc.kill || e.OOM != tc.oom || e.OOMGroupKill != tc.groupKill {
				t.Errorf("counters oom_kill %+v oom %+v oom_group_kill %+v, want %+v %+v %+v",
					e.OOMKill, e.OOM, e.OOMGroupKill, tc.kill, tc.oom, tc.groupKill)
			}
			if e.Memory.LimitMB != 209.715200 {
				t.Errorf("limit %v MB, want 209.7152 (200 MiB)", e.Memory.LimitMB)
			}
			v := Classify(e)
			t.Logf("%s: %s", v.Reason, v.Summary)
			if v.Reason != tc.reason || v.Rule != tc.rule {
				t.Errorf("Classify = %s (%s), want %s (%s)", v.Reason, v.Rule, tc.reason, tc.rule)
			}
			if got, want := v.Tags(e)[TagOOMKillCount], fmt.Sprint(tc.kill.Delta()); got != want {
				t.Errorf("%s = %q, want %q", TagOOMKillCount, got, want)
			}
		})
	}
}

const fixturePID = 4242

type v2Fixture struct {
	t          *testing.T
	proc, cg   string
	leaf       string
	limitBytes int64
}

// newV2Fixture lays out /proc/<pid>/{cgroup,mountinfo} and a v2 hierarchy
// with the process in /job, limited to 200 MiB.
func newV2Fixture(t *testing.T) *v2Fixture {
	root := t.TempDir()
	fx := &v2Fixture{t: t, proc: filepath.Join(root, "proc"), cg: filepath.Join(root, "sys/fs/cgroup"), limitBytes: 200 << 20}
	fx.leaf = filepath.Join(fx.cg, "job")
	pid := filepath.Join(fx.proc, fmt.Sprint(fixturePID))
	fx.write(filepath.Join(fx.proc, "stat"), "cpu  100 0 100 1000 0 0 0 0 0 0\ncpu0 100 0 100 1000 0 0 0 0 0 0\n")
	fx.write(filepath.Join(pid, "cgroup"), "0::/job\n")
	fx.write(filepath.Join(pid, "mountinfo"), strings.Join([]string{
		"22 1 0:21 / / rw,relatime - overlay overlay rw",
		"30 22 0:26 / " + fx.cg + " rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate",
	}, "\n")+"\n")
	fx.write(filepath.Join(fx.cg, "cgroup.controllers"), "cpu memory pids\n")
	for name, v := range map[string]string{
		"cgroup.procs":          "1\n",
		"memory.max":            fmt.Sprintln(fx.limitBytes),
		"cpu.max":               "max 100000\n",
		"cpu.stat":              "usage_usec 1000\nuser_usec 800\nsystem_usec 200\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
		"memory.pressure":       "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"cpuset.cpus.effective": "0\n",
	} {
		fx.write(filepath.Join(fx.leaf, name), v)
	}
	return fx
}

func (fx *v2Fixture) memory(events string, current int64) {
	fx.write(filepath.Join(fx.leaf, "memory.events"), events)
	fx.write(filepath.Join(fx.leaf, "memory.current"), fmt.Sprintln(current))
	fx.write(filepath.Join(fx.leaf, "memory.stat"), fmt.Sprintf("anon %d\nfile 0\ninactive_file 0\nactive_file 0\n", current))
}

func (fx *v2Fixture) write(path, content string) {
	fx.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		fx.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		fx.t.Fatal(err)
	}
}
