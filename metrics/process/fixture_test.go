package process

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/procfs"
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
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}
