package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"syscall"
	"time"

	"github.com/bridge-dev/bridge/metrics/internal/kfile"
)

// files reads the cgroup files (and <proc>/stat) that every sample reads.
// On cgroupfs and procfs a file's descriptor stays open and is re-read with
// pread from offset 0, which makes the kernel write its content afresh: one
// syscall a file instead of open, fstat, read and close. Elsewhere (fixture
// trees) each read opens and closes the file, since tests replace it.
//
// A kept descriptor whose read fails is closed and the file opened again
// once: a removed cgroup's files fail with ENODEV, and opening again then
// says the file is gone (no data), or reads the cgroup made in its place.
//
// A file found missing (memory.pressure without PSI or under psi=0, a
// controller not delegated here, the root's absent pids files) is not opened
// again on every sample: it reads as missing until kfile.Absent says to probe
// it again, the time being that of the sample (tick).
//
// Collect and MemoryPoints run on one goroutine, Info and Detect may run on
// another: mu guards the descriptors, the buffer and the absence records.
type files struct {
	mu     sync.Mutex
	fds    map[string]int // path -> kept descriptor
	buf    []byte
	absent map[string]*kfile.Absent // path -> its absence record
	at     time.Time                // when this sample began (tick)
	// open is kfile.Open; tests count the opens through it.
	open func(path string) (int, error)
	// readFresh is kfile.ReadWhole for a file just opened; tests make it
	// fail as a kernel booted with psi=0 does.
	readFresh func(fd int, buf []byte, size int) ([]byte, error)
}

// tick marks the start of a sample taken at now.
func (f *files) tick(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = now
}

// noteAbsent remembers path as absent when err says so.
func (f *files) noteAbsent(path string, err error) {
	if !kfile.IsAbsent(err) {
		return
	}
	if f.absent == nil {
		f.absent = map[string]*kfile.Absent{}
	}
	a := f.absent[path]
	if a == nil {
		a = &kfile.Absent{}
		f.absent[path] = a
	}
	a.Note(err, f.at)
}

// read reads the whole file at path. A missing file is ("", false, nil);
// other errors name the path and wrap the errno.
func (f *files) read(path string) (string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.readLocked(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading %s: %w", path, err)
	}
	return string(b), true, nil
}

func (f *files) readLocked(path string) ([]byte, error) {
	if fd, ok := f.fds[path]; ok {
		b, err := kfile.ReadKept(fd, f.buf, 4096)
		if err == nil {
			f.buf = b
			return b, nil
		}
		// ENODEV (the cgroup was removed), EBADF or other: drop the
		// descriptor and open the path afresh.
		_ = syscall.Close(fd)
		delete(f.fds, path)
	}
	if a := f.absent[path]; a != nil {
		if err := a.Known(f.at); err != nil {
			return nil, err
		}
	}
	open := f.open
	if open == nil {
		open = kfile.Open
	}
	fd, err := open(path)
	if err != nil {
		f.noteAbsent(path, err)
		return nil, err
	}
	readFresh := f.readFresh
	if readFresh == nil {
		readFresh = kfile.ReadWhole
	}
	b, err := readFresh(fd, f.buf, 4096)
	if err != nil {
		// A pressure file of a kernel booted with psi=0 opens but fails
		// with EOPNOTSUPP: as good as missing until the next probe.
		f.noteAbsent(path, err)
	}
	if err != nil || !kfile.Keep(fd) {
		_ = syscall.Close(fd)
	} else {
		if f.fds == nil {
			f.fds = map[string]int{}
		}
		f.fds[path] = fd
	}
	if err != nil {
		return nil, err
	}
	f.buf = b
	return b, nil
}

// close closes the kept descriptors; a later read opens them again.
func (f *files) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for path, fd := range f.fds {
		_ = syscall.Close(fd)
		delete(f.fds, path)
	}
}
