package process

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics/cgroup"
)

// fakeProc is one process in a fixture /proc tree.
type fakeProc struct {
	pid, ppid      int
	comm           string
	state          string // "" means S
	utime, stime   uint64 // ticks
	cutime, cstime uint64
	threads        int
	start          uint64 // ticks since boot
	rssPages       int
	noStat         bool // the pid directory exists but stat is gone (exited mid-scan)
	garbledStat    bool
}

func (p fakeProc) statLine() string {
	state := p.state
	if state == "" {
		state = "S"
	}
	threads := max(p.threads, 1)
	// Fields as in proc(5), after comm: state ppid pgrp session tty_nr tpgid
	// flags minflt cminflt majflt cmajflt utime stime cutime cstime priority
	// nice num_threads itrealvalue starttime vsize rss rsslim ...
	return fmt.Sprintf("%d (%s) %s %d %d %d 0 -1 4194304 103 0 0 0 %d %d %d %d 20 0 %d 0 %d 3133440 %d "+
		"18446744073709551615 94204075749376 94204075769257 140730539527856 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 "+
		"94204075785264 94204075786880 94204818636800 140730539534847 140730539534867 140730539534867 140730539536363 0\n",
		p.pid, p.comm, state, p.ppid, p.pid, p.pid, p.utime, p.stime, p.cutime, p.cstime, threads, p.start, p.rssPages)
}

func (p fakeProc) status() string {
	return fmt.Sprintf("Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t%d\nNgid:\t0\nPid:\t%d\nPPid:\t%d\n"+
		"TracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t256\nVmRSS:\t%d kB\nThreads:\t%d\n",
		p.comm, p.pid, p.pid, p.ppid, p.rssPages*os.Getpagesize()/1024, max(p.threads, 1))
}

// writeProcs (re)writes the fixture tree under root so that it holds exactly procs.
func writeProcs(t *testing.T, root string, procs ...fakeProc) {
	t.Helper()
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	// procfs reads /proc/stat for nothing here, but a real-shaped root has one.
	must(t, os.WriteFile(filepath.Join(root, "stat"), []byte("cpu  17440 0 7189 46796 776 0 333 3829 0 0\nbtime 1764682500\n"), 0o644))
	for _, p := range procs {
		dir := filepath.Join(root, fmt.Sprint(p.pid))
		must(t, os.MkdirAll(dir, 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "status"), []byte(p.status()), 0o644))
		switch {
		case p.noStat:
		case p.garbledStat:
			must(t, os.WriteFile(filepath.Join(dir, "stat"), []byte("garbage"), 0o644))
		default:
			must(t, os.WriteFile(filepath.Join(dir, "stat"), []byte(p.statLine()), 0o644))
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newFS(t *testing.T, root string) procfs.FS {
	t.Helper()
	pfs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return pfs
}

// newCollector returns a Collector of the Tree opts describe, closed when
// the test ends.
func newCollector(t testing.TB, opts TreeOptions) *Collector {
	t.Helper()
	tr, err := NewTree(opts)
	if err != nil {
		t.Fatal(err)
	}
	c := New(tr, nil)
	t.Cleanup(func() { c.Close() })
	return c
}

// realCgroups is this machine's cgroup layout, nil (logged) where there is
// none to read.
func realCgroups(t testing.TB) *cgroup.Layout {
	t.Helper()
	l, err := cgroup.FindLayout(cgroup.Options{})
	if err != nil {
		t.Logf("no cgroup layout here, the tree is found without one: %v", err)
		return nil
	}
	return l
}

// bridgePID is the fixture process the cgroup layout is found for, as
// bridge finds it for itself.
const bridgePID = 1

// fixtureCgroups mounts, in bridgePID's mountinfo under proc, a v1 memory
// hierarchy at <cg>/memory, cpu and cpuacct at <cg>/cpu,cpuacct and an
// empty cgroup2 at <cg>/unified (a hybrid host, as this machine), puts
// bridgePID at the top of each, and returns the layout found there.
func fixtureCgroups(t *testing.T, proc, cg string) *cgroup.Layout {
	t.Helper()
	writeFile(t, proc, fmt.Sprintf("%d/cgroup", bridgePID), "4:memory:/\n3:cpu,cpuacct:/\n0::/\n")
	writeFile(t, proc, fmt.Sprintf("%d/mountinfo", bridgePID), fmt.Sprintf(
		"22 1 0:21 / / rw,relatime - overlay overlay rw\n"+
			"25 22 0:24 / %[1]s rw,nosuid - tmpfs tmpfs rw,mode=755\n"+
			"26 25 0:25 / %[1]s/memory rw,nosuid - cgroup cgroup rw,memory\n"+
			"27 25 0:26 / %[1]s/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"+
			"28 25 0:27 / %[1]s/unified rw,nosuid - cgroup2 cgroup2 rw\n", cg))
	l, err := cgroup.FindLayout(cgroup.Options{ProcRoot: proc, CgroupRoot: cg, PID: bridgePID})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// scanTree is root's tree (and the adopter's orphans) by a read of every
// process's stat with procfs: an oracle for the Tree, which finds the tree
// without reading every process.
func scanTree(t testing.TB, procRoot string, root, adopter int) []int {
	t.Helper()
	pfs, err := procfs.NewFS(procRoot)
	if err != nil {
		t.Fatal(err)
	}
	procs, err := pfs.AllProcs()
	if err != nil {
		t.Fatal(err)
	}
	all := map[int]procStat{}
	for _, p := range procs {
		s, err := p.Stat()
		if err != nil {
			if _, serr := pfs.Proc(p.PID); errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) || serr != nil {
				continue // exited while read
			}
			t.Fatalf("reading the stat of process %d: %v", p.PID, err)
		}
		all[p.PID] = procStat{PID: s.PID, PPID: s.PPID}
	}
	var pids []int
	for _, s := range buildTree(all, root, adopter) {
		pids = append(pids, s.PID)
	}
	return pids
}

// openUnder lists the files this process has open whose paths start with
// prefix and end with suffix (from /proc/self/fd).
func openUnder(t testing.TB, prefix, suffix string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && strings.HasPrefix(target, prefix) && strings.HasSuffix(target, suffix) {
			out = append(out, target)
		}
	}
	return out
}
