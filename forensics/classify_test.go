package forensics

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/supervisor"
)

var exitAt = time.Date(2026, 10, 1, 12, 0, 30, 0, time.UTC)

// Builders for recorded evidence.

func counter(first, last float64) Counter {
	return Counter{Known: true, First: first, Last: last, AtExit: true}
}

func limited(wsMB, limMB float64) Memory {
	return Memory{Known: true, LimitMB: limMB, RecentWorkingSetMB: wsMB, RecentSharePercent: 100 * wsMB / limMB,
		PeakWorkingSetMB: wsMB}
}

func unlimited(wsMB float64) Memory {
	return Memory{Known: true, RecentWorkingSetMB: wsMB, PeakWorkingSetMB: wsMB}
}

func node(availMB, totalMB float64) Node {
	return Node{Known: true, TotalMB: totalMB, MinAvailableMB: availMB, MinAvailablePercent: 100 * availMB / totalMB}
}

func fwd(sig syscall.Signal, before time.Duration) []supervisor.SignalRecord {
	return []supervisor.SignalRecord{{Signal: sig, Time: exitAt.Add(-before)}}
}

func TestClassify(t *testing.T) {
	nodeOK := node(20000, 25000)
	nodeLow := node(300, 25000) // 1.2% of MemTotal
	cases := []struct {
		name   string
		e      Evidence
		reason string
		rule   string
		// Summary must contain each of these; Evidence must hold facts.
		says  []string
		facts map[string]string
	}{
		{
			name:   "exit 0",
			e:      Evidence{ExitCode: 0, OOMKill: counter(0, 0), Memory: limited(50, 209.7)},
			reason: ReasonSuccess, rule: "exit_0",
			says:  []string{"exited with code 0"},
			facts: map[string]string{"exit_code": "0", "oom_kill": "0 -> 0"},
		},
		{
			name:   "SIGKILL sent by bridge after --kill-after",
			e:      Evidence{ExitCode: 137, Signal: syscall.SIGKILL, KilledAfter: 2 * time.Second, Forwarded: fwd(syscall.SIGTERM, 2*time.Second), OOMKill: counter(0, 0)},
			reason: ReasonKilledBySignal, rule: "kill_after",
			says:  []string{"SIGKILL", "--kill-after", "2s", "SIGTERM"},
			facts: map[string]string{"kill_after": "2s", "forwarded": "true"},
		},
		{
			name:   "exit 0 after a worker was OOM-killed",
			e:      Evidence{ExitCode: 0, OOMKill: counter(2, 3)},
			reason: ReasonSuccess, rule: "exit_0",
			says: []string{"note: a process in the cgroup was OOM-killed", "oom_kill 2 -> 3"},
		},
		{
			name:   "exit 1",
			e:      Evidence{ExitCode: 1, OOMKill: counter(0, 0), Memory: limited(50, 209.7), Node: nodeOK},
			reason: ReasonAppError, rule: "exit_nonzero",
			says: []string{"exited with code 1"},
		},
		{
			name:   "exit 1 near the limit without an OOM kill",
			e:      Evidence{ExitCode: 1, OOMKill: counter(0, 0), Memory: limited(200, 209.7)},
			reason: ReasonAppError, rule: "exit_nonzero",
			says: []string{"near the limit", "working set 200.0 MB of limit 209.7 MB (95.4%)"},
		},
		{
			name:   "exit 1 without any counter",
			e:      Evidence{ExitCode: 1},
			reason: ReasonAppError, rule: "exit_nonzero",
		},
		{
			name: "v2 cgroup OOM kill",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, CgroupVersion: "v2",
				OOMKill: counter(0, 1), OOM: counter(0, 1), OOMGroupKill: counter(0, 0),
				Memory: limited(199.8, 209.7), Node: nodeOK},
			reason: ReasonCgroupOOMKill, rule: "oom_kill_rose+oom_rose",
			says: []string{"killed by the kernel's OOM killer in the container's cgroup", "oom_kill 0 -> 1",
				"working set 199.8 MB of limit 209.7 MB (95.3%)"},
			facts: map[string]string{"oom_kill": "0 -> 1", "oom": "0 -> 1", "signal": "SIGKILL", "cgroup_version": "v2",
				"memory_limit_megabytes": "209.7"},
		},
		{
			name: "v2 group OOM kill (memory.oom.group=1)",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, CgroupVersion: "v2",
				OOMKill: counter(0, 3), OOM: counter(0, 1), OOMGroupKill: counter(0, 1), Memory: limited(150, 209.7)},
			reason: ReasonCgroupOOMKill, rule: "oom_kill_rose+oom_rose",
			says:  []string{"oom_kill 0 -> 3, oom 0 -> 1, oom_group_kill 0 -> 1"},
			facts: map[string]string{"oom_group_kill": "0 -> 1"},
		},
		{
			name: "v2 group kill for an ancestor's limit",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, CgroupVersion: "v2",
				OOMKill: counter(0, 3), OOM: counter(0, 0), OOMGroupKill: counter(0, 1), Memory: limited(150, 209.7)},
			reason: ReasonCgroupOOMKill, rule: "oom_kill_rose+oom_steady",
			says: []string{"for a limit above the container's cgroup"},
		},
		{
			name: "v1 cgroup OOM kill: no oom counter, near the limit",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, CgroupVersion: "hybrid",
				OOMKill: counter(0, 1), Memory: limited(208, 209.7), Node: nodeOK},
			reason: ReasonCgroupOOMKill, rule: "oom_kill_rose+near_limit",
			says: []string{"near its memory limit", "oom_kill 0 -> 1"},
		},
		{
			name: "v1 OOM kill far from the limit, node fine: a spike between samples",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, CgroupVersion: "v1",
				OOMKill: counter(0, 1), Memory: limited(40, 209.7), Node: nodeOK},
			reason: ReasonCgroupOOMKill, rule: "oom_kill_rose",
			facts: map[string]string{"oom_domain": "not seen"},
		},
		{
			name: "v1 OOM kill between samples: the kernel's high-water mark reached the limit",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, CgroupVersion: "v1", OOMKill: counter(0, 1),
				Memory: Memory{Known: true, LimitMB: 209.7, RecentWorkingSetMB: 159.4, RecentSharePercent: 76, PeakUsageMB: Reading{Value: 209.7, Known: true, Expected: true}},
				Node:   nodeOK},
			reason: ReasonCgroupOOMKill, rule: "oom_kill_rose+peak_at_limit",
			says:  []string{"whose usage reached its memory limit (kernel high-water mark 209.7 MB)"},
			facts: map[string]string{"peak_usage_share_of_limit_percentage": "100.0"},
		},
		{
			// The samples missed the spike and the node was low too: the
			// kernel's high-water mark at the cgroup's limit decides.
			name: "v1 OOM kill between samples on a low node: the high-water mark outweighs the node",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, CgroupVersion: "v1", OOMKill: counter(0, 1),
				Memory: Memory{Known: true, LimitMB: 209.7, RecentWorkingSetMB: 95.3, RecentSharePercent: 45, PeakUsageMB: Reading{Value: 209.7, Known: true, Expected: true}},
				Node:   nodeLow},
			reason: ReasonCgroupOOMKill, rule: "oom_kill_rose+peak_at_limit",
		},
		{
			name: "v1 OOM kill far from the limit, node low",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, CgroupVersion: "v1",
				OOMKill: counter(0, 1), Memory: unlimited(3000), Node: nodeLow},
			reason: ReasonNodeOOMKill, rule: "oom_kill_rose+far_from_limit+node_low",
			says: []string{"node MemAvailable 300 MB of 25000 MB (1.2%)"},
		},
		{
			name: "v2 node OOM: oom_kill rose, oom did not, node low",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, CgroupVersion: "v2",
				OOMKill: counter(0, 1), OOM: counter(0, 0), Memory: limited(1000, 8000), Node: nodeLow},
			reason: ReasonNodeOOMKill, rule: "oom_kill_rose+oom_steady+node_low",
			says: []string{"because the node ran out of memory"},
		},
		{
			name: "v2 OOM at an ancestor's limit: oom_kill rose, oom did not, node fine",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, CgroupVersion: "v2",
				OOMKill: counter(0, 1), OOM: counter(0, 0), Memory: limited(1000, 8000), Node: nodeOK},
			reason: ReasonCgroupOOMKill, rule: "oom_kill_rose+oom_steady",
			facts: map[string]string{"oom_domain": "ancestor cgroup or node"},
		},
		{
			name: "SIGKILL far from the limit, node low, counter steady: a user-space OOM killer",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, OOMKill: counter(0, 0), OOM: counter(0, 0),
				Memory: limited(500, 8000), Node: nodeLow},
			reason: ReasonNodeOOMKill, rule: "sigkill+far_from_limit+node_low",
			says: []string{"systemd-oomd", "working set 500.0 MB of limit 8000.0 MB (6.2%)"},
		},
		{
			name:   "SIGKILL, no limit, no counter, node low",
			e:      Evidence{ExitCode: 137, Signal: syscall.SIGKILL, Memory: unlimited(20000), Node: node(100, 25000)},
			reason: ReasonNodeOOMKill, rule: "sigkill+far_from_limit+node_low",
			says: []string{"no OOM-kill counter to confirm it", "no memory limit"},
		},
		{
			name: "kill -9: SIGKILL far from the limit, node fine, counter steady",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, OOMKill: counter(0, 0),
				Memory: limited(40, 209.7), Node: nodeOK},
			reason: ReasonKilledBySignal, rule: "sigkill+oom_kill_steady",
			says:  []string{"not by the kernel's OOM killer (oom_kill 0 -> 0)", "kill -9"},
			facts: map[string]string{"forwarded": "false", "signal": "SIGKILL"},
		},
		{
			name: "SIGKILL near the limit, counter steady: not an OOM kill",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, OOMKill: counter(0, 0),
				Memory: limited(205, 209.7), Node: nodeOK},
			reason: ReasonKilledBySignal, rule: "sigkill+oom_kill_steady",
			says: []string{"reclaim can stall a health check"},
		},
		{
			name: "SIGKILL after the grace period of a forwarded SIGTERM",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, ExitTime: exitAt, Forwarded: fwd(syscall.SIGTERM, 30*time.Second),
				OOMKill: counter(0, 0), Memory: limited(40, 209.7), Node: nodeOK},
			reason: ReasonKilledBySignal, rule: "sigkill+oom_kill_steady",
			says: []string{"30 s after bridge forwarded SIGTERM: the grace period ran out"},
		},
		{
			name: "SIGKILL, counter not read after the exit, far from the limit, node fine",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, OOMKill: Counter{Known: true, First: 0, Last: 0},
				Memory: limited(40, 209.7), Node: nodeOK},
			reason: ReasonKilledBySignal, rule: "sigkill+far_from_limit+node_ok",
			facts: map[string]string{"oom_kill": "0 -> 0 (not read after the exit)"},
		},
		{
			name:   "SIGKILL near the limit without a counter: inferred cgroup OOM",
			e:      Evidence{ExitCode: 137, Signal: syscall.SIGKILL, Memory: limited(207, 209.7), Node: nodeOK},
			reason: ReasonCgroupOOMKill, rule: "sigkill+no_counter+near_limit",
			says:  []string{"no OOM-kill counter was readable"},
			facts: map[string]string{"inferred": "true"},
		},
		{
			name:   "SIGKILL with nothing measured",
			e:      Evidence{ExitCode: 137, Signal: syscall.SIGKILL},
			reason: ReasonUnknown, rule: "sigkill+unexplained",
			says: []string{"no OOM-kill counter", "working set not sampled", "node memory not measured"},
		},
		{
			name: "SIGTERM forwarded by bridge",
			e: Evidence{ExitCode: 143, Signal: syscall.SIGTERM, ExitTime: exitAt, Forwarded: fwd(syscall.SIGTERM, 100*time.Millisecond),
				OOMKill: counter(0, 0)},
			reason: ReasonKilledBySignal, rule: "forwarded_signal",
			says:  []string{"killed by SIGTERM, which bridge forwarded", "0.1 s before the exit"},
			facts: map[string]string{"forwarded": "true", "forwarded_signal": "SIGTERM"},
		},
		{
			name: "exit 143 from a wrapper after a forwarded SIGTERM",
			e: Evidence{ExitCode: 143, ExitTime: exitAt, Forwarded: fwd(syscall.SIGTERM, time.Second),
				OOMKill: counter(0, 0)},
			reason: ReasonKilledBySignal, rule: "forwarded_signal",
			says:  []string{"exited with code 143 (128+SIGTERM)"},
			facts: map[string]string{"forwarded": "true", "signal_inferred_from_exit_code": "true"},
		},
		{
			name:   "exit 1 after a forwarded SIGTERM (a handler that exits)",
			e:      Evidence{ExitCode: 1, ExitTime: exitAt, Forwarded: fwd(syscall.SIGTERM, 5*time.Second)},
			reason: ReasonKilledBySignal, rule: "exit_after_forwarded_signal",
			says:  []string{"exited with code 1, 5.0 s after bridge forwarded SIGTERM"},
			facts: map[string]string{"forwarded": "true"},
		},
		{
			name:   "exit 1 after a forwarded SIGWINCH is an app error",
			e:      Evidence{ExitCode: 1, ExitTime: exitAt, Forwarded: fwd(syscall.SIGWINCH, time.Minute)},
			reason: ReasonAppError, rule: "exit_nonzero",
		},
		{
			name:   "SIGTERM not from bridge",
			e:      Evidence{ExitCode: 143, Signal: syscall.SIGTERM, OOMKill: counter(0, 0)},
			reason: ReasonKilledBySignal, rule: "signal",
			says:  []string{"not forwarded by bridge"},
			facts: map[string]string{"forwarded": "false"},
		},
		{
			name:   "SIGSEGV is a crash",
			e:      Evidence{ExitCode: 139, Signal: syscall.SIGSEGV, OOMKill: counter(0, 0)},
			reason: ReasonKilledBySignal, rule: "signal",
			says: []string{"killed by SIGSEGV, raised by the process itself"},
		},
		{
			name: "a worker OOM-killed, the parent exits 1",
			e: Evidence{ExitCode: 1, CgroupVersion: "v2", OOMKill: counter(0, 1), OOM: counter(0, 1),
				Memory: limited(190, 209.7), Node: nodeOK},
			reason: ReasonCgroupOOMKill, rule: "oom_kill_rose+oom_rose",
			says: []string{"a process other than the command itself (a worker, most likely) was killed by the kernel's OOM killer in the container's cgroup, which reached its memory limit, and the command then exited with code 1"},
		},
		{
			name: "sh -c wrapper exits 137 after its child was OOM-killed",
			e: Evidence{ExitCode: 137, CgroupVersion: "v1", OOMKill: counter(4, 5),
				Memory: limited(200, 209.7), Node: nodeOK},
			reason: ReasonCgroupOOMKill, rule: "oom_kill_rose+near_limit",
			says:  []string{"exited with code 137 (128+SIGKILL)", "oom_kill 4 -> 5"},
			facts: map[string]string{"signal": "SIGKILL", "signal_inferred_from_exit_code": "true"},
		},
		{
			name: "Xid 79 and exit 1 is a GPU error",
			e: Evidence{ExitCode: 1, OOMKill: counter(0, 0),
				Xids: []metrics.XidEvent{{GPU: 0, Xid: 79}, {GPU: 0, Xid: 79}, {GPU: 1, Xid: 48}}},
			reason: ReasonGPUError, rule: "xid",
			says:  []string{"Xid 48 on GPU 1, Xid 79 on GPU 0", "exited with code 1"},
			facts: map[string]string{"xid": "Xid 48 on GPU 1, Xid 79 on GPU 0"},
		},
		{
			name:   "Xid with SIGABRT is a GPU error",
			e:      Evidence{ExitCode: 134, Signal: syscall.SIGABRT, Xids: []metrics.XidEvent{{GPU: 2, Xid: 31}}},
			reason: ReasonGPUError, rule: "xid",
			says: []string{"died of SIGABRT"},
		},
		{
			name: "an OOM kill outranks an Xid",
			e: Evidence{ExitCode: 137, Signal: syscall.SIGKILL, OOMKill: counter(0, 1), OOM: counter(0, 1),
				Memory: limited(209, 209.7), Xids: []metrics.XidEvent{{GPU: 0, Xid: 13}}},
			reason: ReasonCgroupOOMKill, rule: "oom_kill_rose+oom_rose",
			facts: map[string]string{"xid": "Xid 13 on GPU 0"},
		},
		{
			name:   "a forwarded SIGTERM outranks an Xid",
			e:      Evidence{ExitCode: 143, Signal: syscall.SIGTERM, ExitTime: exitAt, Forwarded: fwd(syscall.SIGTERM, time.Second), Xids: []metrics.XidEvent{{Xid: 79}}},
			reason: ReasonKilledBySignal, rule: "forwarded_signal",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Classify(tc.e)
			t.Logf("%s: %s", v.Reason, v.Summary)
			if v.Reason != tc.reason || v.Rule != tc.rule {
				t.Errorf("Classify = %s (rule %s), want %s (rule %s)\nsummary: %s", v.Reason, v.Rule, tc.reason, tc.rule, v.Summary)
			}
			for _, s := range tc.says {
				if !strings.Contains(v.Summary, s) {
					t.Errorf("summary lacks %q:\n%s", s, v.Summary)
				}
			}
			for k, want := range tc.facts {
				if got, ok := v.Evidence[k]; !ok || got != want {
					t.Errorf("evidence[%q] = %q (present %v), want %q\nall: %v", k, got, ok, want, v.Evidence)
				}
			}
			if v.Evidence["rule"] != v.Rule {
				t.Errorf("evidence rule %q != Rule %q", v.Evidence["rule"], v.Rule)
			}
		})
	}
}

// Thresholds move the line between near and far from the limit.
func TestClassifyWithThresholds(t *testing.T) {
	e := Evidence{ExitCode: 137, Signal: syscall.SIGKILL, Memory: limited(150, 200), Node: node(20000, 25000)} // 75%
	if v := Classify(e); v.Reason != ReasonKilledBySignal {
		t.Errorf("at 75%% with the default 80%%: %s, want %s", v.Reason, ReasonKilledBySignal)
	}
	th := DefaultThresholds
	th.NearLimitPercent = 70
	if v := ClassifyWith(e, th); v.Reason != ReasonCgroupOOMKill {
		t.Errorf("at 75%% with a 70%% threshold: %s, want %s", v.Reason, ReasonCgroupOOMKill)
	}
	// An absolute floor catches a small node whose 5% is tiny.
	small := Evidence{ExitCode: 137, Signal: syscall.SIGKILL, OOMKill: counter(0, 0), Memory: unlimited(10), Node: node(200, 2000)}
	if v := Classify(small); v.Reason != ReasonNodeOOMKill {
		t.Errorf("200 MB of 2000 MB available: %s, want %s", v.Reason, ReasonNodeOOMKill)
	}
	th = DefaultThresholds
	th.NodeLowMB = 100
	if v := ClassifyWith(small, th); v.Reason != ReasonKilledBySignal {
		t.Errorf("200 MB available with a 100 MB floor: %s, want %s", v.Reason, ReasonKilledBySignal)
	}
}

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:            "0 s",
		1500 * time.Millisecond: "1.5 s",
		45 * time.Second:        "45 s",
		10 * time.Minute:        "10 min",
		5 * time.Hour:           "5.0 h",
	} {
		if got := duration(d); got != want {
			t.Errorf("duration(%v) = %q, want %q", d, got, want)
		}
	}
}
