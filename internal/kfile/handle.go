package kfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// Handle is a file bridge keeps open for reading and writing because the
// kernel ties state to the open file: cgroup v2's memory.peak, whose mark
// a write resets for that open file only. Its reads are preads within
// Value; Close may run beside a read (the *os.File closes its descriptor
// once the read is over, and the read then fails).
type Handle struct{ f *os.File }

// ErrNotCgroup2 means OpenCgroup2 found the file on another filesystem.
var ErrNotCgroup2 = errors.New("not on a cgroup2 filesystem")

// cgroup2Magic is CGROUP2_SUPER_MAGIC.
const cgroup2Magic = 0x63677270

// OpenCgroup2 opens path, a cgroup v2 file, for reading and writing within
// ctx. A file on another filesystem (a fixture tree's regular file) is
// ErrNotCgroup2: only the kernel's cgroup2 files are ever written.
func OpenCgroup2(ctx context.Context, path string) (*Handle, error) {
	return within(ctx, func() (*Handle, error) {
		f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK, 0)
		if err != nil {
			return nil, err
		}
		var st syscall.Statfs_t
		if err := syscall.Fstatfs(int(f.Fd()), &st); err != nil || st.Type != cgroup2Magic {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, ErrNotCgroup2)
		}
		return &Handle{f: f}, nil
	}, func(h *Handle) { h.Close() })
}

// Write writes b to the open file within ctx (a cgroup file takes it in
// one write, or refuses it).
func (h *Handle) Write(ctx context.Context, b []byte) error {
	_, err := within(ctx, func() (int, error) { return h.f.Write(b) }, nil)
	return err
}

// Read reads the file from offset 0 into buf's storage: at most its
// capacity (a caller that knows the value is short gives a small buffer),
// and never more than Value. A file that fills it is ErrTooLarge.
func (h *Handle) Read(buf []byte) ([]byte, error) {
	if cap(buf) == 0 {
		buf = make([]byte, 0, Value)
	}
	buf = buf[:min(cap(buf), Value)]
	n, err := h.f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return buf[:0], fmt.Errorf("reading %s: %w", h.f.Name(), err)
	}
	if n == len(buf) {
		return buf[:0], fmt.Errorf("%s: %w", h.f.Name(), ErrTooLarge)
	}
	return buf[:n], nil
}

// Name is the path the file was opened as.
func (h *Handle) Name() string { return h.f.Name() }

// Close closes the file; a second Close does nothing harmful.
func (h *Handle) Close() error { return h.f.Close() }
