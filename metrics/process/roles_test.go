package process

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
)

// Role letters in the cases below: L launcher, T trainer, D data-loading
// worker, O other.
var roleLetter = map[metrics.Role]byte{metrics.RoleLauncher: 'L', metrics.RoleTrainer: 'T', metrics.RoleDataLoader: 'D', metrics.RoleOther: 'O'}

func TestClassify(t *testing.T) {
	type proc struct {
		pid, ppid int
		comm      string
		launcher  bool // by its command line (python -m torch.distributed.run)
	}
	tests := []struct {
		name  string
		procs []proc // a walk: the root first, each after its parent
		gpu   []int  // pids holding GPU memory
		want  string // a role letter per process, in order
	}{
		{"one interpreter", []proc{{100, 1, "python3", false}}, nil, "T"},
		{"a shell runs the trainer", []proc{{100, 1, "bash", false}, {101, 100, "python3", false}}, nil, "LT"},
		{"DataLoader workers by name under the trainer",
			[]proc{{100, 1, "python3", false}, {101, 100, "pt_data_worker", false}, {102, 100, "pt_data_worker", false}}, nil, "TDD"},
		{"current main's workers, cut to 15 bytes",
			[]proc{{100, 1, "python3", false}, {101, 100, "pt_multiprocess", false}}, nil, "TD"},
		{"older PyTorch: workers keep the trainer's name",
			[]proc{{100, 1, "python3", false}, {101, 100, "python3", false}, {102, 101, "python3", false}}, nil, "TDD"},
		{"torchrun's agent by its name, two ranks with workers",
			[]proc{{100, 1, "bash", false}, {101, 100, "pt_elastic", false}, {102, 101, "python3", false}, {103, 101, "python3", false},
				{104, 102, "pt_data_worker", false}, {105, 103, "pt_data_worker", false}}, nil, "LLTTDD"},
		{"python -m torch.distributed.run by its command line",
			[]proc{{100, 1, "python3", true}, {101, 100, "python3", false}, {102, 100, "python3", false}, {103, 101, "python3", false}},
			nil, "LTTD"},
		{"with a GPU: the processes holding GPU memory are the trainers",
			[]proc{{100, 1, "python3", true}, {101, 100, "python3", false}, {102, 101, "pt_data_worker", false}, {103, 101, "python3", false}},
			[]int{101}, "LTDD"},
		{"with a GPU: a wrapper that is not a launcher by name is one by place",
			[]proc{{100, 1, "python3", false}, {101, 100, "python3", false}, {102, 101, "pt_data_worker", false}},
			[]int{101}, "LTD"},
		{"with a GPU: a sibling of the trainers is other",
			[]proc{{100, 1, "bash", false}, {101, 100, "python3", false}, {102, 100, "tee", false}},
			[]int{101}, "LTO"},
		{"a worker holding GPU memory is still a worker",
			[]proc{{100, 1, "python3", false}, {101, 100, "pt_data_worker", false}}, []int{101}, "TD"},
		{"no trainer holds GPU memory yet: the interpreters",
			[]proc{{100, 1, "sh", false}, {101, 100, "python3", false}, {102, 101, "python3", false}}, []int{999}, "LTD"},
		{"orphans bridge adopted are trainers or workers as their names say",
			[]proc{{100, 50, "python3", false}, {60, 50, "pt_data_worker", false}, {61, 50, "python3", false}}, nil, "TDT"},
		{"a launcher below the trainer is its descendant: a worker",
			[]proc{{100, 1, "python3", false}, {101, 100, "sh", false}, {102, 101, "gcc", false}}, nil, "TDD"},
		{"only launchers", []proc{{100, 1, "sh", false}, {101, 100, "sleep", false}}, nil, "LT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			procs := make([]procStat, len(tt.procs))
			for i, p := range tt.procs {
				procs[i] = named(procStat{PID: p.pid, PPID: p.ppid}, p.comm)
			}
			var gpu func(int) bool
			if tt.gpu != nil {
				gpu = func(pid int) bool { return slices.Contains(tt.gpu, pid) }
			}
			roles := make([]metrics.Role, len(procs))
			classify(procs, map[int]int{}, gpu, func(i int) bool {
				return launcherComms[procs[i].Comm()] || tt.procs[i].launcher
			}, roles)
			var got []byte
			for _, r := range roles {
				got = append(got, roleLetter[r])
			}
			if string(got) != tt.want {
				t.Errorf("roles %s, want %s", got, tt.want)
			}
		})
	}
}

func TestLauncherCmdline(t *testing.T) {
	tests := []struct {
		cmdline string
		want    bool
	}{
		{"python3\x00-m\x00torch.distributed.run\x00--nproc-per-node=2\x00train.py\x00", true},
		{"/usr/bin/python3.12\x00-u\x00-m\x00torch.distributed.launch\x00train.py\x00", true},
		{"python\x00/opt/venv/bin/torchrun\x00train.py\x00", true},
		{"python\x00/site-packages/torch/distributed/run.py\x00train.py\x00", true},
		{"python3\x00train.py\x00-m\x00torch.distributed.run\x00", false},
		{"python3\x00-m\x00mymodule\x00", false},
		{"python3\x00-c\x00import torch\x00", false},
		{"python3\x00", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := launcherCmdline([]byte(tt.cmdline)); got != tt.want {
			t.Errorf("launcherCmdline(%q) = %v, want %v", tt.cmdline, got, tt.want)
		}
	}
}

func TestParseIO(t *testing.T) {
	tests := []struct {
		name string
		in   string
		r, w uint64
		ok   bool
	}{
		{"as the kernel writes it", "rchar: 4292\nwchar: 1360\nsyscr: 11\nsyscw: 9\nread_bytes: 8192\nwrite_bytes: 4096\ncancelled_write_bytes: 0\n", 8192, 4096, true},
		{"no trailing newline", "read_bytes: 1\nwrite_bytes: 2", 1, 2, true},
		{"write_bytes missing", "rchar: 1\nread_bytes: 1\n", 0, 0, false},
		{"garbled number", "read_bytes: x\nwrite_bytes: 2\n", 0, 0, false},
		{"empty", "", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, w, ok := parseIO([]byte(tt.in))
			if ok != tt.ok || (ok && (r != tt.r || w != tt.w)) {
				t.Errorf("parseIO = %d, %d, %v; want %d, %d, %v", r, w, ok, tt.r, tt.w, tt.ok)
			}
		})
	}
}

func TestIntervalUseIO(t *testing.T) {
	pt := func(start uint64, ppid int, r, w uint64) procTimes {
		return procTimes{start: start, ppid: ppid, ioRead: r, ioWrite: w, hasIO: true}
	}
	tests := []struct {
		name      string
		prev, cur map[int]procTimes
		r, w      uint64
	}{
		{"survivors add their growth",
			map[int]procTimes{100: pt(5, 1, 100, 10), 101: pt(6, 100, 50, 0)},
			map[int]procTimes{100: pt(5, 1, 130, 20), 101: pt(6, 100, 80, 5)}, 30 + 30, 10 + 5},
		{"a reaped child's bytes move to its parent: counted once",
			// 101 had read 50 at prev, read 20 more and was reaped: 100's counter grows by 70.
			map[int]procTimes{100: pt(5, 1, 100, 0), 101: pt(6, 100, 50, 0)},
			map[int]procTimes{100: pt(5, 1, 170, 0)}, 20, 0},
		{"a process new in the interval counts whole",
			map[int]procTimes{100: pt(5, 1, 100, 0)},
			map[int]procTimes{100: pt(5, 1, 100, 0), 102: pt(9, 100, 40, 4)}, 40, 4},
		{"unread in prev: nothing this interval",
			map[int]procTimes{100: {start: 5, ppid: 1}},
			map[int]procTimes{100: pt(5, 1, 1e9, 1e9)}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r, w uint64
			intervalUse(tt.prev, tt.cur, func(_ procTimes, _, ir, iw uint64) { r, w = r+ir, w+iw })
			if r != tt.r || w != tt.w {
				t.Errorf("read %d written %d, want %d and %d", r, w, tt.r, tt.w)
			}
		})
	}
}

// writeIO writes a fixture /proc/<pid>/io.
func writeIO(t *testing.T, root string, pid int, r, w uint64) {
	t.Helper()
	writeFile(t, root, filepath.Join(strconv.Itoa(pid), "io"), fmt.Sprintf(
		"rchar: 0\nwchar: 0\nsyscr: 0\nsyscw: 0\nread_bytes: %d\nwrite_bytes: %d\ncancelled_write_bytes: 0\n", r, w))
}

// roleSums checks that each of the tree's series equals the sum of its
// roles' in m, and returns each role's process count.
func roleSums(t *testing.T, m map[string]metrics.Point) map[string]float64 {
	t.Helper()
	for _, tc := range []struct {
		total string
		part  func(metrics.RoleDescs) *metrics.Desc
	}{
		{"process_cpu_usage_cores", func(d metrics.RoleDescs) *metrics.Desc { return d.CPU }},
		{"process_memory_rss_megabytes", func(d metrics.RoleDescs) *metrics.Desc { return d.RSS }},
		{"process_count", func(d metrics.RoleDescs) *metrics.Desc { return d.Count }},
		{"process_io_read_megabytes_per_second", func(d metrics.RoleDescs) *metrics.Desc { return d.IORead }},
		{"process_io_write_megabytes_per_second", func(d metrics.RoleDescs) *metrics.Desc { return d.IOWrite }},
	} {
		total, ok := m[tc.total]
		if !ok {
			// A rate needs two readings: none of the tree's, none of a role's.
			for _, r := range metrics.ProcessRoles {
				if p, ok := m[tc.part(r).Name]; ok {
					t.Errorf("%s = %v without the tree's %s", p.Name(), p.Value, tc.total)
				}
			}
			continue
		}
		sum := 0.0
		for _, r := range metrics.ProcessRoles {
			sum += m[tc.part(r).Name].Value
		}
		if math.Abs(sum-total.Value) > 1e-9*math.Max(1, total.Value) {
			t.Errorf("the roles' %s add up to %v, the tree's is %v", tc.total, sum, total.Value)
		}
	}
	counts := map[string]float64{}
	for r, d := range metrics.ProcessRoles {
		if p, ok := m[d.Count.Name]; ok {
			counts[metrics.Role(r).Name()] = p.Value
		}
	}
	return counts
}

func TestCollectRolesFixture(t *testing.T) {
	root := t.TempDir()
	c := newCollector(t, TreeOptions{ProcRoot: root, RootPID: func() int { return 100 }})
	at := time.Unix(1764682500, 0)
	c.tree.now = func() time.Time { return at }
	write := func(ps ...fakeProc) {
		writeProcs(t, root, ps...)
		for _, p := range ps {
			writeIO(t, root, p.pid, p.utime*1000, p.stime*1000)
		}
	}
	// bash runs python, which forked four DataLoader workers.
	procs := []fakeProc{
		{pid: 1, comm: "init"},
		{pid: 100, ppid: 1, comm: "bash", utime: 1, start: 500, rssPages: 100},
		{pid: 101, ppid: 100, comm: "python3", utime: 100, start: 510, rssPages: 1000},
		{pid: 102, ppid: 101, comm: "pt_data_worker", utime: 10, start: 520, rssPages: 200},
		{pid: 103, ppid: 101, comm: "pt_data_worker", utime: 10, start: 520, rssPages: 200},
		{pid: 104, ppid: 101, comm: "pt_data_worker", utime: 10, start: 520, rssPages: 200},
		{pid: 105, ppid: 101, comm: "pt_data_worker", utime: 10, start: 520, rssPages: 200, state: "D"},
	}
	write(procs...)
	writeFile(t, root, "101/cmdline", "python3\x00train.py\x00")
	m := collect(t, c)
	if got := roleSums(t, m); got["launcher"] != 1 || got["trainer"] != 1 || got["dataloader"] != 4 || got["other"] != 0 {
		t.Errorf("role counts %v, want launcher 1, trainer 1, dataloader 4, no other", got)
	}
	if _, ok := m["process_other_count"]; ok {
		t.Error("a role no process ever had has series")
	}
	if m["process_blocked_count"].Value != 1 {
		t.Errorf("process_blocked_count = %v, want 1", m["process_blocked_count"].Value)
	}
	page := float64(os.Getpagesize())
	if got, want := m["process_dataloader_memory_rss_megabytes"].Value, metrics.MB(800*page); got != want {
		t.Errorf("the workers' RSS %v MB, want %v: every worker counted", got, want)
	}

	// 2 s later: each worker used 100 ticks more (and read 100 kB more:
	// the fixture reads 1000 bytes a tick), the trainer 20; worker 104 was
	// reaped (the trainer's cutime and its bytes read grow by its whole
	// life's) and 106 started.
	at = at.Add(2 * time.Second)
	procs[2].utime, procs[2].cutime = 120, 110
	procs[3].utime, procs[4].utime = 110, 110
	procs[5] = fakeProc{pid: 106, ppid: 101, comm: "pt_data_worker", utime: 100, start: 700, rssPages: 200}
	procs[6].utime = 110
	write(procs...)
	writeIO(t, root, 101, (120+110)*1000, 0) // the reaped worker's bytes are the trainer's now
	m = collect(t, c)
	roleSums(t, m)
	// (20 + 100 + 4 × 100) ticks / 100 Hz / 2 s: the trainer's 20, the
	// reaped worker's last 100 (in the trainer's cutime, counted for the
	// trainer), the three survivors' and the new one's.
	if got := m["process_cpu_usage_cores"].Value; math.Abs(got-2.6) > 1e-9 {
		t.Errorf("process_cpu_usage_cores = %v, want 2.6", got)
	}
	if got := m["process_dataloader_cpu_usage_cores"].Value; math.Abs(got-2) > 1e-9 {
		t.Errorf("process_dataloader_cpu_usage_cores = %v, want 2 (three survivors and the new one)", got)
	}
	if got := m["process_trainer_io_read_megabytes_per_second"].Value; math.Abs(got-metrics.MB(120*1000)/2) > 1e-9 {
		t.Errorf("the trainer read %v MB/s, want %v: its 20 ticks' and the reaped worker's last 100", got, metrics.MB(120*1000)/2)
	}
	if got := m["process_io_read_megabytes_per_second"].Value; math.Abs(got-metrics.MB(520*1000)/2) > 1e-9 {
		t.Errorf("process_io_read_megabytes_per_second = %v, want %v", got, metrics.MB(520*1000)/2)
	}
	if got := m["process_launcher_cpu_usage_cores"].Value; got != 0 {
		t.Errorf("the launcher used %v cores, want 0 (a role seen keeps its series)", got)
	}
}

// A tree of one role (bridge -- python train.py, a DataLoader without
// workers) has that role's series from its first sample, equal to the
// tree's: the bottleneck verdict reads the trainers' CPU and count from
// them, and a chart of them has no start in the middle of the run.
func TestCollectOneRoleHasItsSeries(t *testing.T) {
	root := t.TempDir()
	c := newCollector(t, TreeOptions{ProcRoot: root, RootPID: func() int { return 100 }})
	at := time.Unix(1764682500, 0)
	c.tree.now = func() time.Time { return at }
	trainer := fakeProc{pid: 100, ppid: 1, comm: "python3", utime: 100, start: 500, rssPages: 1000}
	writeProcs(t, root, trainer)
	writeIO(t, root, 100, 1000, 2000)
	writeFile(t, root, "100/cmdline", "python3\x00train.py\x00")
	want := []string{"process_trainer_count", "process_trainer_memory_rss_megabytes"}
	m := collect(t, c)
	for _, name := range want {
		if _, ok := m[name]; !ok {
			t.Errorf("first sample: no %s", name)
		}
	}
	roleSums(t, m)

	at = at.Add(2 * time.Second)
	trainer.utime = 300
	writeProcs(t, root, trainer)
	writeIO(t, root, 100, 5000, 4000)
	m = collect(t, c)
	want = append(want, "process_trainer_cpu_usage_cores",
		"process_trainer_io_read_megabytes_per_second", "process_trainer_io_write_megabytes_per_second")
	for _, name := range want {
		if _, ok := m[name]; !ok {
			t.Errorf("second sample: no %s", name)
		}
	}
	if got := m["process_cpu_usage_cores"].Value; got != 1 {
		t.Errorf("process_cpu_usage_cores = %v, want 1 (200 ticks in 2 s)", got)
	}
	if got := roleSums(t, m); len(got) != 1 || got["trainer"] != 1 {
		t.Errorf("role counts %v, want one trainer and no other role", got)
	}
}

// A GPU collector's note makes the processes holding GPU memory the
// trainers, and their parents launchers.
func TestCollectRolesGPUHolders(t *testing.T) {
	root := t.TempDir()
	c := newCollector(t, TreeOptions{ProcRoot: root, RootPID: func() int { return 100 }})
	writeProcs(t, root,
		fakeProc{pid: 100, ppid: 1, comm: "python3", rssPages: 10},
		fakeProc{pid: 101, ppid: 100, comm: "python3", rssPages: 10},
		fakeProc{pid: 102, ppid: 100, comm: "python3", rssPages: 10},
	)
	writeFile(t, root, "100/cmdline", "python3\x00wrapper.py\x00")
	m := collect(t, c)
	if got := roleSums(t, m); got["trainer"] != 1 || got["dataloader"] != 2 {
		t.Errorf("without a GPU note: %v, want the root a trainer and two workers", got)
	}
	c.tree.NoteGPUHolders("gpu", []int{101, 102})
	m = collect(t, c)
	if got := roleSums(t, m); got["trainer"] != 2 || got["launcher"] != 1 || got["dataloader"] != 0 {
		t.Errorf("with 101 and 102 holding GPU memory: %v, want two trainers and their launcher", got)
	}
}

// The real machine: a launcher shell runs a trainer that starts four
// DataLoader-shaped workers, each renamed pt_data_worker as PyTorch does
// (prctl PR_SET_NAME on its main thread; written here through
// /proc/<pid>/comm, the same set_task_comm), spinning. The roles come out
// as named, and every role series adds up to the tree's.
func TestRealDataLoaderTree(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "trainer.sh")
	must(t, os.WriteFile(script, []byte(`printf python3 > /proc/$$/comm
for i in 1 2 3 4; do
  sh -c 'printf pt_data_worker > /proc/$$/comm; while :; do :; done' &
done
wait
`), 0o755))
	cmd := exec.Command("sh", "-c", "sh "+script+"; exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sh: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	c := newCollector(t, TreeOptions{RootPID: func() int { return cmd.Process.Pid }, Cgroups: realCgroups(t)})
	var m map[string]metrics.Point
	var counts map[string]float64
	waitfor.Cond(t, time.Minute, "the trainer and its four renamed workers", func() bool {
		m = collect(t, c)
		counts = roleSums(t, m)
		return counts["launcher"] == 1 && counts["trainer"] == 1 && counts["dataloader"] == 4
	})
	waitfor.Cond(t, time.Minute, "the workers to use CPU", func() bool {
		m = collect(t, c)
		roleSums(t, m)
		return m["process_dataloader_cpu_usage_cores"].Value > 0
	})
	if m["process_count"].Value != 6 {
		t.Errorf("process_count = %v, want 6", m["process_count"].Value)
	}
}
