package spool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
	s, err := OpenWithin(context.Background(), path, Options{}, 30*time.Second)
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
	s, err = OpenWithin(context.Background(), path, Options{}, time.Second)
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
		again, err = OpenWithin(context.Background(), path, Options{}, 30*time.Second)
		return err == nil
	})
	defer again.Close()
	if n := again.NextSeq(); n != 2 {
		t.Errorf("reopened spool's next sequence %d, want 2 (its one sample kept)", n)
	}
}

// A ctx that ends (a signal before the child starts) ends an open stalled
// on a dead disk at once, with the ctx's cause, before the stall bound.
func TestOpenWithinCancelled(t *testing.T) {
	fs := stallfs.Mount(t)
	path := filepath.Join(fs.Dir, "spool.jsonl")
	fs.StallAll()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		s, err := OpenWithin(ctx, path, Options{}, time.Hour)
		if s != nil {
			s.Close()
		}
		done <- err
	}()
	waitfor.Cond(t, time.Minute, "the open blocked on the dead disk", func() bool { return fs.Waiting() >= 1 })
	cancel()
	var err error
	waitfor.Cond(t, time.Minute, "the open given up once its ctx ended (the stall bound is an hour)", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrStalled) {
		t.Errorf("open cancelled: %v; want the ctx's cause, not a stall", err)
	}
}

// Only a regular file is a spool: /dev/zero (read without end), a FIFO
// (O_RDWR opens it at once, then its read waits) or a directory is an
// error at once, naming what it is.
func TestOpenNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.jsonl")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, kind string }{{fifo, "a FIFO"}, {zero, "a character device"}, {dir, "directory"}} {
		done := make(chan error, 1)
		go func() {
			s, err := OpenWithin(context.Background(), tc.path, Options{}, time.Minute)
			if s != nil {
				s.Close()
			}
			done <- err
		}()
		var err error
		waitfor.Cond(t, time.Minute, "opening "+tc.kind+" as a spool answering", func() bool {
			select {
			case err = <-done:
				return true
			default:
				return false
			}
		})
		if err == nil || !strings.Contains(err.Error(), tc.kind) {
			t.Errorf("spool at %s: %v; want an error naming %s", tc.path, err, tc.kind)
		}
	}
}
