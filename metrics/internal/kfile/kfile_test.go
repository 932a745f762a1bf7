package kfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// ReadKept (the raw pread) reads what ReadWhole and os.ReadFile read,
// growing a buffer that is too small, and reports the kernel's errors.
func TestReadKept(t *testing.T) {
	for _, path := range []string{"/proc/self/cmdline", "/proc/self/cgroup", "/proc/version"} {
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fd, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if !Keep(fd) {
			t.Errorf("%s: Keep = false, want true (procfs)", path)
		}
		for _, size := range []int{1, 4, 4096} {
			got, err := ReadKept(fd, nil, size)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s, size %d: ReadKept = %q, %v; want %q", path, size, got, err, want)
			}
			again, err := ReadKept(fd, got, size) // reuses the storage, from offset 0
			if err != nil || !bytes.Equal(again, want) {
				t.Errorf("%s, size %d, second read: %q, %v; want %q", path, size, again, err, want)
			}
			whole, err := ReadWhole(fd, nil, size)
			if err != nil || !bytes.Equal(whole, want) {
				t.Errorf("%s, size %d: ReadWhole = %q, %v; want %q", path, size, whole, err, want)
			}
		}
		syscall.Close(fd)
		if _, err := ReadKept(fd, nil, 16); !errors.Is(err, syscall.EBADF) {
			t.Errorf("%s closed: err %v, want EBADF", path, err)
		}
	}
	dir, err := Open("/proc/self")
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(dir)
	if _, err := ReadKept(dir, nil, 16); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("a directory: err %v, want EISDIR", err)
	}
}

// Only kernel filesystems are kept (and so read raw): a plain file is not.
func TestKeepPlainFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if Keep(fd) {
		t.Error("Keep of a file on disk = true, want false")
	}
}
