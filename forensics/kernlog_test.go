package forensics

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The OOM killer's report as kernels write it, one case each: the pair of
// lines of Linux 4.19 and later (kmsg records with their prefix and
// dictionary), the text alone (dmesg), a comm with spaces and
// parentheses, a cgroup path with a comma, the single line of older
// kernels, and what is not a kill.
func TestParseOOMKills(t *testing.T) {
	for _, tc := range []struct {
		name string
		recs []string
		want []OOMKill
	}{
		{"kmsg records of Linux 5", []string{
			"6,4030,6453758238,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/pa/job,task_memcg=/pa/job,task=python3,pid=12576,uid=0\n",
			"3,4031,6453758302,-;Memory cgroup out of memory: Killed process 12576 (python3) total-vm:211940kB, anon-rss:199680kB, file-rss:6600kB, shmem-rss:0kB, UID:0 pgtables:456kB oom_score_adj:0\n SUBSYSTEM=memory\n",
		}, []OOMKill{{PID: 12576, Name: "python3", AnonKB: 199680, FileKB: 6600, Memcg: "/pa/job", Constraint: "CONSTRAINT_MEMCG"}}},
		{"dmesg text, node OOM", []string{
			"oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,task=java,pid=77,uid=1000",
			"Out of memory: Killed process 77 (java) total-vm:9000000kB, anon-rss:8000000kB, file-rss:100kB, shmem-rss:24kB, UID:1000 pgtables:20000kB oom_score_adj:0",
		}, []OOMKill{{PID: 77, Name: "java", AnonKB: 8000000, FileKB: 100, ShmemKB: 24, Memcg: "/user.slice", Constraint: "CONSTRAINT_NONE"}}},
		{"comm with spaces and parentheses", []string{
			"Memory cgroup out of memory: Killed process 9 (pt (main) x) total-vm:10kB, anon-rss:4kB, file-rss:0kB, shmem-rss:0kB",
		}, []OOMKill{{PID: 9, Name: "pt (main) x", AnonKB: 4}}},
		{"cgroup path with a comma", []string{
			"oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/a,b,task_memcg=/a,b/c,task=w,pid=5,uid=0",
			"Memory cgroup out of memory: Killed process 5 (w) total-vm:1kB, anon-rss:2048kB, file-rss:0kB, shmem-rss:0kB",
		}, []OOMKill{{PID: 5, Name: "w", AnonKB: 2048, Memcg: "/a,b/c", Constraint: "CONSTRAINT_MEMCG"}}},
		{"before Linux 4.19", []string{
			"Memory cgroup out of memory: Kill process 31 (worker) score 990 or sacrifice child",
			"Killed process 31 (worker) total-vm:100kB, anon-rss:50kB, file-rss:10kB, shmem-rss:0kB",
		}, []OOMKill{{PID: 31, Name: "worker", AnonKB: 50, FileKB: 10}}},
		{"not a kill", []string{
			"oom_reaper: reaped process 12576 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
			"6,1,1,-;Killed process x (y) total-vm:1kB",
			"oom-kill:constraint=CONSTRAINT_MEMCG,task=a,pid=0,uid=0",
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseOOMKills(tc.recs); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseOOMKills = %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if mb := (OOMKill{AnonKB: 199680, FileKB: 6600}).RSSMB(); mb < 211.2 || mb > 211.3 {
		t.Errorf("RSSMB = %.2f, want 211.2 (206280 kB)", mb)
	}
}

// A kernel log that cannot be opened says why, in words a user can act
// on; a nil one (never opened) too.
func TestKernelLogWhy(t *testing.T) {
	k := OpenKernelLog(context.Background(), filepath.Join(t.TempDir(), "kmsg"))
	if kills, why := k.Kills(context.Background()); kills != nil || !strings.Contains(why, "is not there") {
		t.Errorf("absent log: %v, %q", kills, why)
	}
	p := filepath.Join(t.TempDir(), "kmsg")
	os.WriteFile(p, []byte("Killed process 1 (x) total-vm:1kB, anon-rss:1kB\n"), 0o644)
	if _, why := OpenKernelLog(context.Background(), p).Kills(context.Background()); !strings.Contains(why, "not the kernel's log device") {
		t.Errorf("a regular file: %q", why)
	}
	var none *KernelLog
	if _, why := none.Kills(context.Background()); why == "" {
		t.Error("a log never opened has no why")
	}
	none.Close()
}

func TestMemoryCgroup(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"v1", "9:name=systemd:/\n4:memory:/process_api/8ba\n1:cpu,cpuacct:/\n0::/\n", "/process_api/8ba"},
		{"v2", "0::/kubepods.slice/pod1/ctr\n", "/kubepods.slice/pod1/ctr"},
		{"hybrid without a v1 memory", "3:cpu,cpuacct:/x\n0::/user.slice/job\n", "/user.slice/job"},
		{"none", "", ""},
	} {
		if got := memoryCgroup(tc.text); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
