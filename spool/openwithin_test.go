package spool

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/stallfs"
	"github.com/bridge-dev/bridge/harness/waitfor"
)

// A disk that answers nothing (not even the open) makes OpenWithin give up
// with ErrStalled once one step went unanswered for the bound, and the
// abandoned open closes its file (releasing the writer lock) once the disk
// answers again; a live disk opens as OpenWith does, records and all.
func TestOpenWithinStalledDisk(t *testing.T) {
	fs := stallfs.Mount(t)
	path := filepath.Join(fs.Dir, "sub", "spool.jsonl")
	// A live disk gets a bound no loaded machine reaches; only the dead
	// one below gets the short one.
	s, err := OpenWithin(path, Options{}, 30*time.Second)
	if err != nil {
		t.Fatalf("a live disk: %v", err)
	}
	if err := s.Append(sample(1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	fs.StallAll()
	start := time.Now()
	s, err = OpenWithin(path, Options{}, time.Second)
	took := time.Since(start)
	if !errors.Is(err, ErrStalled) || s != nil {
		t.Fatalf("a dead disk: spool %v, err %v; want ErrStalled", s, err)
	}
	if took < time.Second {
		t.Errorf("gave up after %v, before the 1s bound", took)
	}
	t.Logf("gave up %v after the open began (bound 1s)", took)
	fs.Release()
	// The abandoned open finishes and lets go of the lock: the next open
	// gets the spool and its sample.
	var again *Spool
	waitfor.Cond(t, 60*time.Second, "the abandoned open to release the spool", func() bool {
		again, err = OpenWithin(path, Options{}, 30*time.Second)
		return err == nil
	})
	defer again.Close()
	if n := again.NextSeq(); n != 2 {
		t.Errorf("reopened spool's next sequence %d, want 2 (its one sample kept)", n)
	}
}
