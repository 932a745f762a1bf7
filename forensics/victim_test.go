package forensics

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/supervisor"
)

// The job's processes in its last sample: the command (the root, first)
// and two workers.
var lastSample = metrics.ProcessList{At: exitAt.Add(-time.Second), Procs: []metrics.ProcessInfo{
	{PID: 100, Name: "python3", RSSBytes: 120e6}, {PID: 101, Name: "pt_data_worker", RSSBytes: 180e6}, {PID: 102, Name: "pt_data_worker", RSSBytes: 40e6},
}}

// A kill of the kernel's log is the job's by its pid and name among the
// last sample's processes, or by its cgroup (bridge's or below it); never
// by the root of a cgroup namespace, and never another cgroup's.
func TestLoggedKillsAreTheJobs(t *testing.T) {
	kill := func(pid int, name, memcg string) OOMKill {
		return OOMKill{PID: pid, Name: name, AnonKB: 200000, Memcg: memcg}
	}
	for _, tc := range []struct {
		name   string
		run    Run
		want   []int // pids named
		saysWh string
	}{
		{"by pid and name", Run{Kills: []OOMKill{kill(101, "pt_data_worker", "/elsewhere")}, Processes: lastSample}, []int{101}, ""},
		{"a pid of the tree under another name", Run{Kills: []OOMKill{kill(101, "bash", "/elsewhere")}, Processes: lastSample}, nil, "none of a process bridge can tell"},
		{"by cgroup", Run{Kills: []OOMKill{kill(9001, "python3", "/pod/ctr")}, Cgroup: "/pod/ctr"}, []int{9001}, ""},
		{"below bridge's cgroup", Run{Kills: []OOMKill{kill(9001, "python3", "/pod/ctr/sub")}, Cgroup: "/pod/ctr"}, []int{9001}, ""},
		{"a sibling cgroup", Run{Kills: []OOMKill{kill(9001, "python3", "/pod/ctr2")}, Cgroup: "/pod/ctr"}, nil, "none of a process"},
		{"a cgroup namespace's root", Run{Kills: []OOMKill{kill(9001, "python3", "/kubepods/x")}, Cgroup: "/"}, nil, "none of a process"},
		{"log not readable", Run{KillsWhy: "/dev/kmsg is not there"}, nil, "could not be read: /dev/kmsg is not there"},
		{"no kill logged", Run{}, nil, "names no OOM kill during the job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs, why := logged(tc.run)
			var pids []int
			for _, v := range vs {
				pids = append(pids, v.PID)
				if !v.Logged || v.RSSMB < 204 || v.RSSMB > 205 {
					t.Errorf("victim %+v: want logged, RSS 204.8 MB", v)
				}
			}
			if len(pids) != len(tc.want) || (len(pids) > 0 && pids[0] != tc.want[0]) {
				t.Errorf("victims %v, want %v", pids, tc.want)
			}
			if !strings.Contains(why, tc.saysWh) || (tc.saysWh == "") != (why == "") {
				t.Errorf("why %q, want %q", why, tc.saysWh)
			}
		})
	}
}

// An OOM verdict names the process the kernel killed, with its RSS: the
// one its log names, else the largest of the job's processes in the last
// sample, said to be a guess; a worker killed while the command survived
// is never the command itself. The facts carry it.
func TestOOMVerdictNamesTheKilledProcess(t *testing.T) {
	oom := Evidence{ExitCode: 137, Signal: syscall.SIGKILL, OOMKill: counter(0, 1), OOM: counter(0, 1), Memory: limited(150, 209.7),
		Processes: lastSample}
	logged := oom
	logged.Killed = []Victim{{PID: 100, Name: "python3", RSSMB: 206.3, Logged: true}}
	guessed := oom
	guessed.KilledWhy = "the kernel's log could not be read: /dev/kmsg is not there"
	worker := guessed
	worker.ExitCode, worker.Signal = 1, 0
	for _, tc := range []struct {
		name  string
		e     Evidence
		says  string
		facts map[string]string
		row   string // the killed process row, "" for none
	}{
		{"named by the kernel's log", logged, "; it killed python3 (pid 100, RSS 206.3 MB): oom_kill 0 -> 1",
			map[string]string{"killed_process": "python3", "killed_pid": "100", "killed_rss_megabytes": "206.3", "killed_named_by": "kernel log"}, ""},
		{"the largest of the last sample", guessed, "; it killed most likely pt_data_worker (pid 101), the largest of the job's processes in the last sample, RSS 180.0 MB at 12:00:29 UTC",
			map[string]string{"killed_process": "pt_data_worker", "killed_named_by": "largest process in the last sample",
				"kernel_log": "the kernel's log could not be read: /dev/kmsg is not there"}, "/dev/kmsg is not there"},
		{"a worker, the command survived", worker, "and the command then exited with code 1; it killed most likely pt_data_worker (pid 101)",
			map[string]string{"killed_pid": "101"}, "`dmesg` on the node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Classify(tc.e)
			if v.Reason != ReasonCgroupOOMKill || !strings.Contains(v.Summary, tc.says) {
				t.Errorf("verdict %s: %q\nwant it to say %q", v.Reason, v.Summary, tc.says)
			}
			for k, want := range tc.facts {
				if v.Evidence[k] != want {
					t.Errorf("fact %s = %q, want %q", k, v.Evidence[k], want)
				}
			}
			row := ""
			for _, r := range v.Rows(tc.e) {
				if r.What == "killed process" {
					row = r.Value
				}
			}
			if (tc.row == "") != (row == "") || !strings.Contains(row, tc.row) {
				t.Errorf("killed process row %q, want %q", row, tc.row)
			}
		})
	}
	// Not an OOM: nothing named.
	e := Evidence{ExitCode: 1, OOMKill: counter(0, 0), Processes: lastSample, KilledWhy: "x"}
	if v := Classify(e); v.Evidence["killed_process"] != "" || strings.Contains(v.Summary, "killed") {
		t.Errorf("an app error names a killed process: %q %v", v.Summary, v.Evidence)
	}
}

// The tags carry the command's start, how long it ran and the process
// tree's peak; a peak never sampled reads "not sampled".
func TestTagsStartDurationTreePeak(t *testing.T) {
	start := exitAt.Add(-90 * time.Second)
	e := Evidence{ExitCode: 0, ExitTime: exitAt, Start: start, PeakProcessRSS: Reading{Value: 68.64, Known: true, Expected: true}}
	tags := Classify(e).Tags(e)
	want := map[string]string{TagCommandStarted: "2026-10-01T11:59:00.000Z", TagCommandDuration: "90.0", TagPeakProcessRSS: "68.6"}
	for k, v := range want {
		if tags[k] != v {
			t.Errorf("%s = %q, want %q", k, tags[k], v)
		}
	}
	e = Evidence{ExitCode: 0, PeakProcessRSS: Reading{Expected: true}, Forwarded: []supervisor.SignalRecord{}}
	tags = Classify(e).Tags(e)
	if tags[TagPeakProcessRSS] != "not sampled" || tags[TagCommandStarted] != "" || tags[TagCommandDuration] != "" {
		t.Errorf("tags %v: want the tree's peak not sampled, no start, no duration", tags)
	}
}
