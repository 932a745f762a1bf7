package process

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/collecttest"
)

func TestParseStat(t *testing.T) {
	good := fakeProc{pid: 103, ppid: 101, comm: "sh -c (x) y", utime: 7, stime: 3, cutime: 11, cstime: 2,
		threads: 4, start: 900, rssPages: 321}
	tests := []struct {
		name    string
		line    string
		want    procStat
		wantErr bool
	}{
		{"spaces and parentheses in comm", good.statLine(), named(procStat{PID: 103, PPID: 101, State: 'S', UTime: 7, STime: 3,
			CUTime: 11, CSTime: 2, NumThreads: 4, Starttime: 900, RSSPages: 321}, "sh -c (x) y"), false},
		{"negative cutime", strings.Replace(good.statLine(), " 7 3 11 2 ", " 7 3 -1 2 ", 1), named(procStat{PID: 103, PPID: 101, State: 'S',
			UTime: 7, STime: 3, CUTime: -1, CSTime: 2, NumThreads: 4, Starttime: 900, RSSPages: 321}, "sh -c (x) y"), false},
		{"blocked, a name of 15 bytes", strings.Replace(good.statLine(), "(sh -c (x) y) S", "(pt_multiprocess) D", 1),
			named(procStat{PID: 103, PPID: 101, State: 'D', UTime: 7, STime: 3, CUTime: 11, CSTime: 2, NumThreads: 4, Starttime: 900, RSSPages: 321}, "pt_multiprocess"), false},
		{"garbage", "garbage", procStat{}, true},
		{"cut short", "5 (x) S 1 5 5 0 -1 4194304 103 0 0 0 1 2\n", procStat{}, true},
		{"not a number", strings.Replace(good.statLine(), " 7 3 ", " x 3 ", 1), procStat{}, true},
		{"empty", "", procStat{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat([]byte(tt.line))
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseStat err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Errorf("parseStat = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// named is s with the name comm.
func named(s procStat, comm string) procStat {
	s.commN = uint8(copy(s.comm[:], comm))
	return s
}

// writeFile writes content to root/rel, making its directories.
func writeFile(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(content), 0o644))
}

// The finder must not read the stat of processes outside the tree's cgroup:
// the unrelated ones here have garbled stat files, which would be an error.
func TestFinderCgroup(t *testing.T) {
	proc, cg := t.TempDir(), t.TempDir()
	writeProcs(t, proc, append(slices.Clone(family),
		fakeProc{pid: 400, ppid: 1, garbledStat: true},
		fakeProc{pid: 104, ppid: 101, comm: "moved-to-a-sub-cgroup"})...)
	// v1 layout as on this machine: only the memory hierarchy is below the root.
	for _, pid := range []int{100, 101, 102, 103, 104} {
		writeFile(t, proc, fmt.Sprintf("%d/cgroup", pid), "4:memory:/job\n3:cpu,cpuacct:/\n0::/\n")
	}
	writeFile(t, cg, "memory/job/cgroup.procs", "100\n101\n102\n103\n")
	writeFile(t, cg, "memory/job/sub/cgroup.procs", "104\n")
	writeFile(t, cg, "memory/cgroup.procs", "1\n200\n300\n400\n")

	c := newCollector(t, TreeOptions{ProcRoot: proc, Cgroups: fixtureCgroups(t, proc, cg), RootPID: func() int { return 100 }})
	m := collect(t, c)
	if c.tree.find.method != viaCgroup {
		t.Fatalf("method = %q, want %q", c.tree.find.method, viaCgroup)
	}
	if got := m["process_count"].Value; got != 5 {
		t.Errorf("process_count = %v, want 5 (100-104)", got)
	}
}

func TestFinderCgroupRootFallsBackToScan(t *testing.T) {
	proc, cg := t.TempDir(), t.TempDir()
	writeProcs(t, proc, family...)
	writeFile(t, proc, "100/cgroup", "4:memory:/\n0::/\n")
	writeFile(t, cg, "memory/cgroup.procs", "1\n100\n")
	c := newCollector(t, TreeOptions{ProcRoot: proc, Cgroups: fixtureCgroups(t, proc, cg), RootPID: func() int { return 100 }})
	if got := collect(t, c)["process_count"].Value; got != 4 || c.tree.find.method != viaScan {
		t.Errorf("process_count = %v by %q, want 4 by %q", got, c.tree.find.method, viaScan)
	}
}

// With CONFIG_PROC_CHILDREN the links are followed from the root (and the
// adopter) down; unrelated processes are never read.
func TestFinderChildren(t *testing.T) {
	proc := t.TempDir()
	procs := append(slices.Clone(family),
		fakeProc{pid: 50, ppid: 1, comm: "bridge"},
		fakeProc{pid: 60, ppid: 50, comm: "orphan"},
		fakeProc{pid: 400, ppid: 1, garbledStat: true})
	procs[1].ppid = 50
	writeProcs(t, proc, procs...)
	links := map[string]string{ // task/<tid>/children, tids of several threads
		"100/task/100/children": "101 ",
		"100/task/110/children": "102 ",
		"101/task/101/children": "103 ",
		"102/task/102/children": "",
		"103/task/103/children": "",
		"50/task/50/children":   "100 ",
		"50/task/51/children":   "60 ",
		"60/task/60/children":   "",
	}
	for rel, v := range links {
		writeFile(t, proc, rel, v)
	}
	c := newCollector(t, TreeOptions{ProcRoot: proc, RootPID: func() int { return 100 }, Adopter: func() int { return 50 }})
	if got := collect(t, c)["process_count"].Value; got != 5 || c.tree.find.method != viaChildren {
		t.Errorf("process_count = %v by %q, want 5 (100-103, orphan 60) by %q", got, c.tree.find.method, viaChildren)
	}
}

// On this machine's real /proc the collector must find a tree without
// scanning when the test runs in a cgroup of its own (or with children links).
func TestRealFinderAvoidsScan(t *testing.T) {
	cmd := startBusyTree(t)
	waitForTree(t, cmd.Process.Pid, 3)
	c := newCollector(t, TreeOptions{RootPID: func() int { return cmd.Process.Pid }, Cgroups: realCgroups(t)})
	if _, err := collecttest.Collect(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if c.tree.find.method == viaScan {
		t.Skipf("SKIP: no /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN) and this test runs in a root cgroup: only a full scan is possible here")
	}
	t.Logf("tree found by %s (%v)", c.tree.find.method, c.tree.find.cgroupDirs)
	// Only the tree's stat files are kept open.
	if got := openUnder(t, "/proc/", "/stat"); len(got) != 3 {
		t.Errorf("stat files kept open: %v, want the tree's 3", got)
	}
}

// Files kept open and re-read with pread must show a child started after
// they were opened (the children links and cgroup.procs are regenerated on
// each read from offset 0).
func TestRealKeptFilesSeeNewChildren(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & read x; sleep 30 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("SKIP: cannot start sh: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	c := newCollector(t, TreeOptions{RootPID: func() int { return cmd.Process.Pid }, Cgroups: realCgroups(t)})
	waitCount := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			got := collect(t, c)["process_count"].Value
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("process_count = %v by %s, want %v", got, c.tree.find.method, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitCount(2)
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	waitCount(3)
	t.Logf("found by %s", c.tree.find.method)
}

// The Tree, found without reading every process, is the tree a full scan
// finds.
func TestTreeMatchesScan(t *testing.T) {
	cmd := startBusyTree(t)
	waitForTree(t, cmd.Process.Pid, 3)
	root := cmd.Process.Pid
	tr, err := NewTree(TreeOptions{RootPID: func() int { return root }, Cgroups: realCgroups(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	got, err := tr.PIDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := waitForTree(t, cmd.Process.Pid, 3); !slices.Equal(got, want) {
		t.Errorf("PIDs = %v by %s, a scan finds %v", got, tr.find.method, want)
	}
	root = 999999999
	if got, err := tr.PIDs(context.Background()); err != nil || len(got) != 0 {
		t.Errorf("PIDs of a missing pid = %v, %v; want nothing, no error", got, err)
	}
}

// With both the children links and a cgroup of its own, the cheaper way is
// used: links cost a read per thread, the cgroup a stat per process in it.
func TestFinderChoosesTheCheaperWay(t *testing.T) {
	for _, tt := range []struct {
		name        string
		threads     int // of the root
		unrelatedCG int // unrelated processes in the same cgroup
		want        string
	}{
		{"few threads, a crowded cgroup: links", 1, 40, viaChildren},
		{"many threads, the cgroup is the tree: cgroup", 60, 0, viaCgroup},
	} {
		t.Run(tt.name, func(t *testing.T) {
			proc, cg := t.TempDir(), t.TempDir()
			procs := slices.Clone(family)
			procsLine := "100\n101\n102\n103\n"
			for i := range tt.unrelatedCG {
				procs = append(procs, fakeProc{pid: 1000 + i, ppid: 1, comm: "other"})
				procsLine += fmt.Sprint(1000+i, "\n")
			}
			writeProcs(t, proc, procs...)
			writeFile(t, proc, "100/task/100/children", "101 102 ")
			for i := 1; i < tt.threads; i++ {
				writeFile(t, proc, fmt.Sprintf("100/task/%d/children", 5000+i), "")
			}
			writeFile(t, proc, "101/task/101/children", "103 ")
			writeFile(t, proc, "102/task/102/children", "")
			writeFile(t, proc, "103/task/103/children", "")
			writeFile(t, proc, "100/cgroup", "4:memory:/job\n0::/\n")
			writeFile(t, cg, "memory/job/cgroup.procs", procsLine)
			c := newCollector(t, TreeOptions{ProcRoot: proc, Cgroups: fixtureCgroups(t, proc, cg), RootPID: func() int { return 100 }})
			for range 3 { // the choice holds between reconsiderations
				if got := collect(t, c)["process_count"].Value; got != 4 || c.tree.find.method != tt.want {
					t.Fatalf("process_count = %v by %q, want 4 by %q", got, c.tree.find.method, tt.want)
				}
			}
		})
	}
}
