package stallfs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/waitfor"
)

// A stalled fsync blocks until Release, a write to the same file waits
// behind it (the kernel's inode lock), reads do not, and both calls then
// succeed with the data in the backing directory.
func TestStallAndRelease(t *testing.T) {
	s := Mount(t)
	path := filepath.Join(s.Dir, "f")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("one\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("an fsync before the stall: %v", err)
	}
	s.Stall(false)
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	waitfor.Cond(t, 30*time.Second, "the fsync to block", func() bool { return s.Waiting() == 1 })
	wrote := make(chan error, 1)
	go func() { _, err := f.Write([]byte("two\n")); wrote <- err }()
	b := make([]byte, 4)
	if _, err := f.ReadAt(b, 0); err != nil || string(b) != "one\n" {
		t.Fatalf("a read during the stall: %q %v", b, err)
	}
	select {
	case err := <-synced:
		t.Fatalf("the fsync returned during the stall: %v", err)
	default:
	}
	s.Release()
	if err := <-synced; err != nil {
		t.Fatalf("the released fsync: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the write behind it: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(s.Backing, "f"))
	if err != nil || string(got) != "one\ntwo\n" {
		t.Fatalf("backing file %q %v", got, err)
	}
	if s.Syncs() != 2 {
		t.Fatalf("%d fsyncs served, want 2", s.Syncs())
	}
}

// StallAll blocks even opening a file (new or old) until Release, after
// which the open succeeds.
func TestStallAllBlocksOpen(t *testing.T) {
	s := Mount(t)
	old := filepath.Join(s.Dir, "old")
	if err := os.WriteFile(old, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.StallAll()
	for _, path := range []string{old, filepath.Join(s.Dir, "new")} {
		opened := make(chan error, 1)
		go func() {
			f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
			if err == nil {
				f.Close()
			}
			opened <- err
		}()
		waitfor.Cond(t, 30*time.Second, "the open of "+path+" to block", func() bool { return s.Waiting() >= 1 })
		select {
		case err := <-opened:
			t.Fatalf("open of %s returned during the stall: %v", path, err)
		default:
		}
		s.Release()
		select {
		case err := <-opened:
			if err != nil {
				t.Fatalf("open of %s after the release: %v", path, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("open of %s still blocked 30s after the release", path)
		}
		s.StallAll()
	}
	s.Release()
}
