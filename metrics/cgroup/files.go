package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"syscall"

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
// Collect and MemoryPoints run on one goroutine, Info and Detect may run on
// another: mu guards the descriptors and the buffer.
type files struct {
	mu  sync.Mutex
	fds map[string]int // path -> kept descriptor
	buf []byte
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
	fd, err := kfile.Open(path)
	if err != nil {
		return nil, err
	}
	b, err := kfile.ReadWhole(fd, f.buf, 4096)
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
