package flock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTryIsExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	a, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := Try(a); err != nil {
		t.Fatalf("first lock: %v", err)
	}
	b, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := Try(b); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("second lock: %v, want EWOULDBLOCK", err)
	}
	a.Close() // the kernel drops the lock with the last descriptor
	if err := Try(b); err != nil {
		t.Fatalf("lock after the holder closed: %v", err)
	}
}

func TestStillAt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if same, err := StillAt(f, path); !same || err != nil {
		t.Fatalf("the file just opened: %v %v", same, err)
	}
	os.Remove(path)
	if same, err := StillAt(f, path); same || err != nil {
		t.Fatalf("after unlink: %v %v, want false", same, err)
	}
	g, err := os.Create(path) // a new holder's file at the same path
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if same, err := StillAt(f, path); same || err != nil {
		t.Fatalf("another file at the path: %v %v, want false", same, err)
	}
}

// Open locks the file at the path, refuses while another holds it, and
// after Release (the file removed while held) locks a new file there.
func TestOpenRelease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	a, err := Open(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, os.O_CREATE|os.O_RDWR, 0o600); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("second Open: %v, want EWOULDBLOCK", err)
	}
	if err := Release(a, path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file after Release: %v", err)
	}
	b, err := Open(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("Open after Release: %v", err)
	}
	if same, err := StillAt(b, path); !same || err != nil {
		t.Fatalf("the file Open locked is not at its path: %v %v", same, err)
	}
	Release(b, path)
}
