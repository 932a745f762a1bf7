package spool

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/bridge-dev/bridge/internal/flock"
)

// One writer per spool: a second open fails with ErrLocked while the first
// holds the file, also after a size-cap rewrite replaced it; the lock goes
// with Close, and a removed spool leaves no lock behind.
func TestOneWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	s, err := OpenWith(path, Options{MaxSize: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	for i := int64(0); s.Stats().Compactions < 2; i++ {
		s.Append(sample(i, 1))
	}
	if _, err := Open(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open after the file was rewritten: %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatalf("open after Close: %v", err)
	}
	if s2.NextSeq() == 0 {
		t.Error("the reopened spool lost its samples")
	}
	if err := s2.Remove(); err != nil {
		t.Fatal(err)
	}
	s3, err := Open(path)
	if err != nil {
		t.Fatalf("open after Remove: %v", err)
	}
	defer s3.Close()
	if s3.NextSeq() != 0 {
		t.Errorf("a removed spool came back with seq %d", s3.NextSeq())
	}
}

// A file locked after it was replaced at its path (the writer rewrote it
// between another process's open and its lock) is let go and the path
// opened again.
func TestLockFollowsTheFileAtPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	if err := os.WriteFile(path, []byte(`{"type":"start","time":1}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	// Replace it as a size-cap rewrite does.
	tmp := filepath.Join(dir, "new")
	if err := os.WriteFile(tmp, []byte(`{"type":"start","time":2}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if same, err := flock.StillAt(old, path); err != nil || same {
		t.Fatalf("StillAt(replaced) = %v, %v; want false", same, err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if at := s.Attempts(); len(at) != 1 || at[0].Start.Time != 2 {
		t.Fatalf("attempts %+v, want the new file's", at)
	}
}
