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
// A file found missing (memory.pressure without PSI, a controller not
// delegated here, the root's absent pids files) is not opened again on every
// sample: it reads as missing until a re-probe is due, reprobeRounds samples
// or reprobeAfter after it was found missing, whichever comes first. The
// sample count keeps the probes rare at short intervals, where the per-sample
// cost matters; the time bound says when a file that appears (PSI enabled, a
// controller delegated) is picked up at long intervals: within 30 s, or at the
// next sample when the interval is longer.
//
// Collect and MemoryPoints run on one goroutine, Info and Detect may run on
// another: mu guards the descriptors, the buffer and the absence records.
type files struct {
	mu     sync.Mutex
	fds    map[string]int // path -> kept descriptor
	buf    []byte
	absent map[string]absence // path -> when it was found missing
	round  uint64             // samples so far (tick)
	at     time.Time          // when this sample began (tick)
	// open is kfile.Open; tests count the opens through it.
	open func(path string) (int, error)
	// readFresh is kfile.ReadWhole for a file just opened; tests make it
	// fail as a kernel booted with psi=0 does.
	readFresh func(fd int, buf []byte, size int) ([]byte, error)
}

const (
	reprobeRounds = 64
	reprobeAfter  = 30 * time.Second
)

// absence is when a file was found missing: the sample and its time.
type absence struct {
	round uint64
	at    time.Time
}

// tick marks the start of a sample taken at now.
func (f *files) tick(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.round++
	f.at = now
}

// noteAbsent records that path was found missing in this sample.
func (f *files) noteAbsent(path string) {
	if f.absent == nil {
		f.absent = map[string]absence{}
	}
	f.absent[path] = absence{round: f.round, at: f.at}
}

// knownAbsent reports whether path was found missing recently enough that
// it is not probed again yet; a due re-probe forgets the record.
func (f *files) knownAbsent(path string) bool {
	a, ok := f.absent[path]
	if !ok {
		return false
	}
	if f.round-a.round < reprobeRounds && f.at.Sub(a.at) < reprobeAfter {
		return true
	}
	delete(f.absent, path)
	return false
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
		b, err := kfile.ReadWhole(fd, f.buf, 4096)
		if err == nil {
			f.buf = b
			return b, nil
		}
		// ENODEV (the cgroup was removed), EBADF or other: drop the
		// descriptor and open the path afresh.
		_ = syscall.Close(fd)
		delete(f.fds, path)
	}
	if f.knownAbsent(path) {
		return nil, syscall.ENOENT
	}
	open := f.open
	if open == nil {
		open = kfile.Open
	}
	fd, err := open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			f.noteAbsent(path)
		}
		return nil, err
	}
	readFresh := f.readFresh
	if readFresh == nil {
		readFresh = kfile.ReadWhole
	}
	b, err := readFresh(fd, f.buf, 4096)
	if errors.Is(err, syscall.EOPNOTSUPP) {
		// A pressure file of a kernel booted with psi=0 opens but cannot
		// be read: as good as missing until the next probe.
		f.noteAbsent(path)
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
