package process

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
)

// family: root 100 with children 101 and 102, grandchild 103 under 101;
// unrelated 1 (init), 200 and its child 300.
var family = []fakeProc{
	{pid: 1, ppid: 0, comm: "init"},
	{pid: 100, ppid: 1, comm: "python"},
	{pid: 101, ppid: 100, comm: "pt_data_worker"},
	{pid: 102, ppid: 100, comm: "pt_data_worker"},
	{pid: 103, ppid: 101, comm: "sh -c (x) y"}, // spaces and parentheses in comm
	{pid: 200, ppid: 1, comm: "sshd"},
	{pid: 300, ppid: 200, comm: "bash"},
}

func TestTree(t *testing.T) {
	// bridge (50, the subreaper) runs python (100); worker 60 was orphaned
	// by a process of the tree and adopted by bridge, with its child 61.
	adopted := append(slices.Clone(family),
		fakeProc{pid: 50, ppid: 1, comm: "bridge"},
		fakeProc{pid: 60, ppid: 50, comm: "orphan"},
		fakeProc{pid: 61, ppid: 60, comm: "orphan-child"})
	adopted[1].ppid = 50
	tests := []struct {
		name    string
		procs   []fakeProc
		root    int
		adopter int
		want    []int
	}{
		{"whole tree, root first", family, 100, 0, []int{100, 101, 102, 103}},
		{"a leaf", family, 103, 0, []int{103}},
		{"root missing", family, 999, 0, nil},
		{"pid exited between listing and reading is skipped", append(slices.Clone(family),
			fakeProc{pid: 104, ppid: 100, noStat: true}), 100, 0, []int{100, 101, 102, 103}},
		{"zombie child still counts", append(slices.Clone(family),
			fakeProc{pid: 105, ppid: 100, comm: "worker", state: "Z"}), 100, 0, []int{100, 101, 102, 105, 103}},
		{"orphans adopted by the subreaper count", adopted, 100, 50, []int{100, 60, 101, 102, 61, 103}},
		{"without the adopter they are missed", adopted, 100, 0, []int{100, 101, 102, 103}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeProcs(t, root, tt.procs...)
			tr, err := NewTree(TreeOptions{ProcRoot: root, RootPID: func() int { return tt.root }, Adopter: func() int { return tt.adopter }})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			got, err := tr.PIDs(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("PIDs of %d = %v, want %v", tt.root, got, tt.want)
			}
		})
	}
}

func TestTreeGarbledStatIsAnError(t *testing.T) {
	root := t.TempDir()
	writeProcs(t, root, append(slices.Clone(family), fakeProc{pid: 104, ppid: 100, garbledStat: true})...)
	tr, err := NewTree(TreeOptions{ProcRoot: root, RootPID: func() int { return 100 }})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.PIDs(context.Background()); err == nil || !strings.Contains(err.Error(), "104") {
		t.Errorf("PIDs with a garbled stat of a live process: err = %v, want one naming pid 104", err)
	}
}

func TestCPUTicks(t *testing.T) {
	pt := func(start uint64, ppid int, self, children uint64) procTimes {
		return procTimes{start: start, ppid: ppid, self: self, children: children}
	}
	tests := []struct {
		name      string
		prev, cur map[int]procTimes
		want      uint64
	}{
		{"survivors add their growth",
			map[int]procTimes{100: pt(5, 1, 100, 0), 101: pt(6, 100, 50, 0)},
			map[int]procTimes{100: pt(5, 1, 130, 0), 101: pt(6, 100, 120, 0)}, 30 + 70},
		{"a process started in the interval counts whole",
			map[int]procTimes{100: pt(5, 1, 100, 0)},
			map[int]procTimes{100: pt(5, 1, 110, 0), 102: pt(9, 100, 40, 0)}, 10 + 40},
		{"child reaped by a tree parent is counted to its end, not twice",
			// 101 had 50 ticks at prev, ran 20 more and was reaped: 100's cutime grows by 70.
			map[int]procTimes{100: pt(5, 1, 100, 0), 101: pt(6, 100, 50, 0)},
			map[int]procTimes{100: pt(5, 1, 110, 70)}, 10 + 20},
		{"short-lived child born and reaped within the interval",
			map[int]procTimes{100: pt(5, 1, 100, 0)},
			map[int]procTimes{100: pt(5, 1, 100, 35)}, 35},
		{"auto-reaped child: its tail is lost, the survivor's time kept",
			// SIGCHLD ignored: no cutime growth; 101's last 50 ticks must not be subtracted.
			map[int]procTimes{100: pt(5, 1, 100, 0), 101: pt(6, 100, 50, 0)},
			map[int]procTimes{100: pt(5, 1, 125, 0)}, 25},
		{"parent and child gone together: survivors keep their time",
			map[int]procTimes{100: pt(5, 1, 100, 0), 101: pt(6, 100, 50, 0), 103: pt(7, 101, 10, 0)},
			map[int]procTimes{100: pt(5, 1, 140, 0)}, 40},
		{"reused pid is a new process",
			map[int]procTimes{100: pt(5, 1, 100, 0), 101: pt(6, 100, 500, 0)},
			map[int]procTimes{100: pt(5, 1, 100, 0), 101: pt(99, 100, 7, 0)}, 7},
		{"counters never make it negative",
			map[int]procTimes{100: pt(5, 1, 100, 90)},
			map[int]procTimes{100: pt(5, 1, 80, 10)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cpuTicks(tt.prev, tt.cur); got != tt.want {
				t.Errorf("cpuTicks = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestCollectFixture(t *testing.T) {
	root := t.TempDir()
	pid := 0
	c := newCollector(t, TreeOptions{ProcRoot: root, RootPID: func() int { return pid }})
	at := time.Unix(1764682500, 0)
	c.tree.now = func() time.Time { return at }

	writeProcs(t, root,
		fakeProc{pid: 1, comm: "init", utime: 9999, rssPages: 99999},
		fakeProc{pid: 100, ppid: 1, comm: "python", utime: 100, stime: 20, threads: 8, start: 500, rssPages: 1000},
		fakeProc{pid: 101, ppid: 100, comm: "worker", utime: 50, threads: 2, start: 600, rssPages: 300},
	)
	pts, err := collecttest.Collect(context.Background(), c)
	if err != nil || len(pts) != 0 {
		t.Fatalf("before the child starts: %v, %v; want no points", pts, err)
	}

	pid = 100
	m := collect(t, c)
	page := float64(os.Getpagesize())
	if got, want := m["process_memory_rss_megabytes"].Value, metrics.MB(1300*page); got != want {
		t.Errorf("rss = %v MB, want %v", got, want)
	}
	if m["process_count"].Value != 2 || m["process_threads_count"].Value != 10 {
		t.Errorf("count %v threads %v, want 2 and 10", m["process_count"].Value, m["process_threads_count"].Value)
	}
	if _, ok := m["process_cpu_usage_cores"]; ok {
		t.Error("first Collect has process_cpu_usage_cores; it needs two readings")
	}
	if p := m["process_count"]; p.Desc != Count {
		t.Errorf("process_count desc %+v", p.Desc)
	}

	// 2 s later: 100 used 150 ticks, 101 exited after 30 more and was reaped (cutime +80),
	// 102 started and used 70. (150 + 30 + 70) ticks / 100 Hz / 2 s = 1.25 cores.
	at = at.Add(2 * time.Second)
	writeProcs(t, root,
		fakeProc{pid: 1, comm: "init", utime: 19999},
		fakeProc{pid: 100, ppid: 1, comm: "python", utime: 200, stime: 70, cutime: 80, threads: 8, start: 500, rssPages: 1000},
		fakeProc{pid: 102, ppid: 100, comm: "worker", utime: 70, threads: 1, start: 700, rssPages: 100},
	)
	m = collect(t, c)
	if got := m["process_cpu_usage_cores"].Value; got != 1.25 {
		t.Errorf("process_cpu_usage_cores = %v, want 1.25", got)
	}

	// A tree with no memory of its own (the child between fork and exec,
	// zombies) has no RSS: 0 would read as the job's peak.
	at = at.Add(2 * time.Second)
	writeProcs(t, root,
		fakeProc{pid: 1, comm: "init", utime: 19999},
		fakeProc{pid: 100, ppid: 1, comm: "python", state: "Z", utime: 200, stime: 70, cutime: 80, start: 500},
	)
	m = collect(t, c)
	if p, ok := m["process_memory_rss_megabytes"]; ok {
		t.Errorf("a tree without memory of its own has an RSS of %v MB", p.Value)
	}
	if m["process_count"].Value != 1 {
		t.Errorf("count %v, want 1: the zombie is still in the tree", m["process_count"].Value)
	}

	// The root is gone: no points, and the next tree starts over.
	at = at.Add(2 * time.Second)
	writeProcs(t, root, fakeProc{pid: 1, comm: "init"})
	if m := collect(t, c); len(m) != 0 {
		t.Errorf("after the tree is gone: %v", m)
	}
}

func TestNewNeedsRootPID(t *testing.T) {
	if _, err := NewTree(TreeOptions{ProcRoot: t.TempDir()}); err == nil {
		t.Error("NewTree without RootPID succeeded")
	}
}

func collect(t *testing.T, c *Collector) map[string]metrics.Point {
	t.Helper()
	pts, err := collecttest.Collect(context.Background(), c)
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	m := map[string]metrics.Point{}
	for _, p := range pts {
		if !slices.Contains(Series, p.Desc) {
			t.Errorf("point %s is not among Series", p.Name())
		}
		m[p.Name()] = p
	}
	return m
}

// --- Real machine ---

// startBusyTree starts sh with two sleeping children and a busy loop in sh
// itself; it is killed with its process group when the test ends.
func startBusyTree(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", "sleep 30 & sleep 30 & while :; do :; done")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sh: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd
}

// waitForTree polls until root has n processes (sh forks its children
// asynchronously); the deadline only guards against a hang.
func waitForTree(t *testing.T, root, n int) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := scanTree(t, "/proc", root, 0)
		if len(pids) >= n || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRealTree(t *testing.T) {
	cmd := startBusyTree(t)
	pids := waitForTree(t, cmd.Process.Pid, 3)
	if len(pids) != 3 || pids[0] != cmd.Process.Pid {
		t.Fatalf("Tree = %v, want sh (%d) and its two sleeps", pids, cmd.Process.Pid)
	}
	fs := newFS(t, "/proc")
	// A forked descendant is "sh" until it has exec'd sleep: poll for that.
	for _, pid := range pids[1:] {
		comm := ""
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			p, err := fs.Proc(pid)
			if err != nil {
				t.Fatal(err)
			}
			if comm, _ = p.Comm(); comm == "sleep" || time.Now().After(deadline) {
				break
			}
		}
		if comm != "sleep" {
			t.Errorf("descendant %d is still %q after 10 s, want sleep", pid, comm)
		}
	}
}

func TestRealBusyLoopReadsOneCore(t *testing.T) {
	cmd := startBusyTree(t)
	waitForTree(t, cmd.Process.Pid, 3)
	c := newCollector(t, TreeOptions{RootPID: func() int { return cmd.Process.Pid }, Cgroups: realCgroups(t)})
	pids := waitForTree(t, cmd.Process.Pid, 3)
	t0 := time.Now()
	run0 := schedRun(t, pids)
	first := collect(t, c)
	if first["process_count"].Value != 3 {
		t.Errorf("process_count = %v, want 3", first["process_count"].Value)
	}
	if rss := first["process_memory_rss_megabytes"].Value; rss <= 0 {
		t.Errorf("process_memory_rss_megabytes = %v", rss)
	}
	// Wait for CPU time, not wall time: on a loaded machine the loop may get
	// a small share of a core, and the check needs enough run time that the
	// kernel's 10 ms ticks (what /proc/<pid>/stat counts in) are a small part.
	const enough = 500 * time.Millisecond
	waitfor.Cond(t, 2*time.Minute, "the busy loop to run 500 ms on a CPU", func() bool {
		return schedRun(t, pids)-run0 >= enough
	})
	m := collect(t, c)
	t1 := time.Now()
	// The scheduler's own run time (schedstat, ns) is an independent count of
	// the same CPU use: the collector's cores times the window between the two
	// collections must agree with it, whatever share the loop got.
	ran := schedRun(t, pids) - run0
	cores, ok := m["process_cpu_usage_cores"]
	if !ok {
		t.Fatal("no process_cpu_usage_cores on the second Collect")
	}
	window := t1.Sub(t0)
	got := time.Duration(cores.Value * float64(window))
	t.Logf("busy loop: %.3f cores over %v = %v of CPU; schedstat says %v", cores.Value, window.Round(time.Millisecond), got.Round(time.Millisecond), ran.Round(time.Millisecond))
	// Slack: three processes' tick rounding and the few ms between the
	// collector's reads and the test's.
	if d := got - ran; d < -ran/5-50*time.Millisecond || d > ran/5+50*time.Millisecond {
		t.Errorf("process_cpu_usage_cores %.3f over %v is %v of CPU, schedstat says %v", cores.Value, window, got, ran)
	}
}

// schedRun sums the CPU time the scheduler accounted to pids
// (/proc/<pid>/schedstat, first field, ns).
func schedRun(t *testing.T, pids []int) time.Duration {
	t.Helper()
	var total time.Duration
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			t.Fatalf("reading schedstat of %d: %v", pid, err)
		}
		f := strings.Fields(string(b))
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			t.Fatalf("schedstat of %d: %q", pid, b)
		}
		total += time.Duration(ns)
	}
	return total
}

// The processes of the last walk that found the tree, with their names
// and RSS, stay known once the tree is gone (forensics names the process
// an OOM kill most likely took from them); a process that execs is known
// by its new name; a walk of zombies (killed, RSS 0) does not replace them.
func TestLastProcesses(t *testing.T) {
	root := t.TempDir()
	pid := 0
	c := newCollector(t, TreeOptions{ProcRoot: root, RootPID: func() int { return pid }})
	at := time.Unix(1764682500, 0)
	c.tree.now = func() time.Time { return at }
	if l := c.LastProcesses(); len(l.Procs) != 0 || !l.At.IsZero() {
		t.Fatalf("before any walk: %+v", l)
	}
	pid = 100
	writeProcs(t, root,
		fakeProc{pid: 100, ppid: 1, comm: "sh", start: 500, rssPages: 10},
		fakeProc{pid: 101, ppid: 100, comm: "pt (worker) 1", start: 600, rssPages: 300},
	)
	collect(t, c)
	at = at.Add(time.Second)
	writeProcs(t, root,
		fakeProc{pid: 100, ppid: 1, comm: "python3", start: 500, rssPages: 1000},
		fakeProc{pid: 101, ppid: 100, comm: "pt (worker) 1", start: 600, rssPages: 300},
	)
	collect(t, c)
	last := at
	at = at.Add(time.Second)
	// Killed, not yet reaped: zombies hold no memory.
	writeProcs(t, root,
		fakeProc{pid: 100, ppid: 1, comm: "python3", state: "Z", start: 500},
		fakeProc{pid: 101, ppid: 100, comm: "pt (worker) 1", state: "Z", start: 600},
	)
	collect(t, c)
	at = at.Add(time.Second)
	writeProcs(t, root)
	collect(t, c)
	page := uint64(os.Getpagesize())
	want := metrics.ProcessList{At: last, Procs: []metrics.ProcessInfo{
		{PID: 100, Name: "python3", RSSBytes: 1000 * page}, {PID: 101, Name: "pt (worker) 1", RSSBytes: 300 * page},
	}}
	var lister metrics.ProcessLister = c
	if got := lister.LastProcesses(); !reflect.DeepEqual(got, want) {
		t.Errorf("LastProcesses = %+v\nwant %+v", got, want)
	}
}

// cpuTicks is the CPU time the tree used between two readings
// (intervalUse).
func cpuTicks(prev, cur map[int]procTimes) uint64 {
	var ticks uint64
	intervalUse(prev, cur, func(_ procTimes, t, _, _ uint64) { ticks += t })
	return ticks
}
