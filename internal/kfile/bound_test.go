package kfile

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

// devZero links name in a fresh directory to /dev/zero: a file that never
// ends.
func devZero(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.Symlink("/dev/zero", p); err != nil {
		t.Fatal(err)
	}
	return p
}

func fifoAt(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A sampled read stops at its cap: /dev/zero behind energy_uj costs one
// buffer of Value+1 bytes and says what the file is, a regular file over
// the cap is too large, and a table under its stated cap is read whole.
func TestReaderSizeBound(t *testing.T) {
	r := NewPathReader(Options{Size: 64})
	defer r.Close()
	buf, err := r.Read(devZero(t, "energy_uj"), nil)
	if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a character device") {
		t.Errorf("reading /dev/zero: %v; want too large, not a regular file (a character device)", err)
	}
	if cap(buf) > Value+1 {
		t.Errorf("reading /dev/zero grew the buffer to %d bytes, past the cap %d", cap(buf), Value+1)
	}

	big := filepath.Join(t.TempDir(), "memory.stat")
	if err := os.WriteFile(big, []byte(strings.Repeat("x", Value+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(big, nil); !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrNotRegular) {
		t.Errorf("reading %d bytes with the cap %d: %v; want too large only", Value+1, Value, err)
	}
	table := NewPathReader(Options{Max: Table})
	defer table.Close()
	if b, err := table.Read(big, nil); err != nil || len(b) != Value+1 {
		t.Errorf("a table under its cap: %d bytes, %v", len(b), err)
	}
	// A buffer larger than the cap, from the caller, is not read past it.
	if b, err := r.Read(devZero(t, "energy_uj"), make([]byte, 0, 1<<20)); !errors.Is(err, ErrTooLarge) || len(b) != 0 {
		t.Errorf("/dev/zero into a large buffer: %d bytes, %v", len(b), err)
	}
}

// ReadInto, a sampled read of a file not kept, has the same cap.
func TestReadIntoSizeBound(t *testing.T) {
	ctx := Bounded(context.Background())
	buf, err := ReadInto(ctx, nil, devZero(t, "cgroup.procs"), Table)
	if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrNotRegular) || cap(buf) > Table+1 {
		t.Errorf("ReadInto /dev/zero: cap %d, %v; want too large within %d", cap(buf), err, Table+1)
	}
	p := filepath.Join(t.TempDir(), "cgroup.procs")
	os.WriteFile(p, []byte("1\n2\n"), 0o644)
	if b, err := ReadInto(ctx, buf, p, Table); err != nil || string(b) != "1\n2\n" {
		t.Errorf("ReadInto: %q, %v", b, err)
	}
}

// A one-shot read takes a regular file of at most its cap, and answers at
// once for a FIFO nobody writes, /dev/zero, a directory or a larger file.
func TestReadFileBounds(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ok := filepath.Join(dir, "name")
	os.WriteFile(ok, []byte("package-0\n"), 0o644)
	big := filepath.Join(dir, "big")
	os.WriteFile(big, []byte(strings.Repeat("x", 100)), 0o644)
	for _, tc := range []struct {
		path string
		want error
		kind string
	}{
		{fifoAt(t, "name"), ErrNotRegular, "a FIFO"},
		{devZero(t, "unique_id"), ErrNotRegular, "a character device"},
		{dir, ErrNotRegular, "a directory"},
		{big, ErrTooLarge, "100 bytes"},
	} {
		done := make(chan error, 1)
		go func() { _, err := ReadFile(ctx, tc.path, 99); done <- err }()
		var err error
		waitfor.Cond(t, time.Minute, "ReadFile of "+tc.kind+" answering", func() bool {
			select {
			case err = <-done:
				return true
			default:
				return false
			}
		})
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.kind) {
			t.Errorf("ReadFile of %s: %v; want %v naming %q", tc.path, err, tc.want, tc.kind)
		}
	}
	if b, err := ReadFile(ctx, ok, Value); err != nil || string(b) != "package-0\n" {
		t.Errorf("ReadFile: %q, %v", b, err)
	}
	// Exactly the cap is read; one byte more is not.
	if b, err := ReadFile(ctx, big, 100); err != nil || len(b) != 100 {
		t.Errorf("ReadFile at its cap: %d bytes, %v", len(b), err)
	}
}

// ReadDir lists at most its cap of entries.
func TestReadDirBound(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"c", "a", "b"} {
		os.Mkdir(filepath.Join(dir, n), 0o755)
	}
	os.WriteFile(filepath.Join(dir, "f"), nil, 0o644)
	ents, err := ReadDir(context.Background(), dir, 4)
	if err != nil || len(ents) != 4 || ents[0].Name != "a" || ents[0].Type != syscall.DT_DIR || ents[3].Name != "f" || ents[3].Type == syscall.DT_DIR {
		t.Errorf("ReadDir: %v, %v; want a, b, c (directories) and f, sorted", ents, err)
	}
	if _, err := ReadDir(context.Background(), dir, 3); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadDir of 4 entries with the cap 3: %v; want too large", err)
	}
	if _, err := ReadDir(context.Background(), fifoAt(t, "ports"), 3); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("ReadDir of a FIFO: %v; want ENOTDIR at once", err)
	}
}

// Call returns when ctx ends, whatever its function does; what the
// function makes once it returns is released, not leaked.
func TestCallTimeBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	unblock := make(chan struct{})
	released := make(chan int, 1)
	_, err := Call(ctx, func() (int, error) { <-unblock; return 7, nil }, func(v int) { released <- v })
	if !errors.Is(err, ErrNoAnswer) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Call past its deadline: %v; want no answer, deadline exceeded", err)
	}
	close(unblock)
	var got int
	waitfor.Cond(t, time.Minute, "the late result released", func() bool {
		select {
		case got = <-released:
			return true
		default:
			return false
		}
	})
	if got != 7 {
		t.Errorf("released %d, want the late result 7", got)
	}

	// A cancel (a signal) ends the wait at once, deadline or not.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := Call(ctx, func() (int, error) { select {} }, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Call under a cancelled ctx: %v", err)
	}

	// No deadline: DefaultWait.
	wctx, wcancel := withWait(context.Background())
	defer wcancel()
	if dl, ok := wctx.Deadline(); !ok || time.Until(dl) > DefaultWait {
		t.Errorf("a ctx without a deadline gets %v, %v; want at most DefaultWait", dl, ok)
	}
}

// Under a Bounded ctx the calls run on the caller's goroutine (its caller
// bounds it), and one made after the ctx ended does not start.
func TestBoundedRunsInline(t *testing.T) {
	ctx, cancel := context.WithCancel(Bounded(context.Background()))
	p := filepath.Join(t.TempDir(), "name")
	os.WriteFile(p, []byte("x"), 0o644)
	if b, err := ReadFile(ctx, p, Value); err != nil || string(b) != "x" {
		t.Errorf("ReadFile under a Bounded ctx: %q, %v", b, err)
	}
	cancel()
	if _, err := ReadFile(ctx, p, Value); !errors.Is(err, ErrNoAnswer) {
		t.Errorf("ReadFile after its Bounded ctx ended: %v; want no answer", err)
	}
}

// A one-shot read of a file whose disk does not answer (a hung mount:
// the FUSE file system stalls every call) returns when ctx ends; the
// abandoned read ends, and closes its file, once the disk answers.
func TestReadFileStalledDisk(t *testing.T) {
	fs := stallfs.Mount(t)
	p := filepath.Join(fs.Dir, "current_clocksource")
	if err := os.WriteFile(p, []byte("tsc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs.StallAll()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	for _, call := range []func() error{
		func() error { _, err := ReadFile(ctx, p, Value); return err },
		func() error { _, err := Stat(ctx, p); return err },
		func() error { _, err := ReadDir(ctx, fs.Dir, Entries); return err },
	} {
		if err := call(); !errors.Is(err, ErrNoAnswer) {
			t.Errorf("a call on a stalled disk: %v; want no answer", err)
		}
	}
	waitfor.Cond(t, time.Minute, "the calls blocked on the stalled disk", func() bool { return fs.Waiting() >= 1 })
	fs.Release()
	waitfor.Cond(t, time.Minute, "the abandoned calls ending", func() bool { return fs.Waiting() == 0 && len(openFDs(t, p)) == 0 })
}
