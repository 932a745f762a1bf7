package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/bridge-dev/bridge/internal/kfile"
)

// files reads the cgroup files (and <proc>/stat) through one kfile.Reader:
// descriptors kept open on cgroupfs and procfs, a removed cgroup's files
// opened again once, and a file found missing (memory.pressure without PSI
// or under psi=0, a controller not delegated here, the root's absent pids
// files) not opened again on every sample, by the collector's clock.
//
// Collect and MemoryPoints may run at once (the sampling loop probes memory
// between samples), Info and Detect on yet another goroutine, and Close
// beside any of them: the Reader is safe for that, and each read takes its
// own buffer.
type files struct {
	r    *kfile.Reader[string]
	bufs sync.Pool // *[]byte
}

func newFiles(now func() time.Time) *files {
	return &files{r: kfile.NewPathReader(kfile.Options{Max: kfile.Table, Absent: true, Now: now})}
}

// read reads the whole file at path. A missing file is ("", false, nil);
// other errors name the path and wrap the errno.
func (f *files) read(path string) (string, bool, error) {
	bp, _ := f.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	b, err := f.r.Read(path, *bp)
	s := string(b)
	*bp = b
	f.bufs.Put(bp)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading %s: %w", path, err)
	}
	return s, true, nil
}

// close closes the kept descriptors; see kfile.Reader.Close.
func (f *files) close() { f.r.Close() }
