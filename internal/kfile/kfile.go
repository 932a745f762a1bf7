// Package kfile is bridge's one reader of the files it does not own:
// procfs, sysfs and cgroupfs under the roots it is given, the clock
// source, the config and other user files, the spool's stat. Every read
// it makes is bounded, whatever is behind the path:
//
//   - in size: a read stops at its cap (Value, a few KiB, for a file of one
//     value; a cap the caller states for a table); a file that holds more
//     is ErrTooLarge, never a larger buffer (/dev/zero behind a sysfs
//     attribute costs one buffer of the cap);
//   - in what it is: a one-shot read (ReadFile) opens without waiting (a
//     FIFO does not wait for a writer) and takes a regular file only
//     (ErrNotRegular); a sampled read (a Reader, ReadInto) uses pread,
//     which a FIFO or a socket refuses, and says ErrNotRegular when a read
//     fails on something not a regular file;
//   - in time: a system call blocked in the kernel (a hung mount, a wedged
//     driver, a memory.stat stalled in a flush) cannot be interrupted, so
//     its caller stops waiting and goes on. ReadFile, ReadDir, Stat (and
//     Call, for a step that is more than a read: the spool's open) make
//     their calls on a goroutine of their own and return when ctx ends
//     (the reads: DefaultWait when ctx has no deadline): the goroutine is
//     abandoned, no lock held, and closes what it opened if the kernel
//     ever answers. Under a ctx marked Bounded they run on the caller's
//     goroutine instead: one that bridge itself stops waiting for (a
//     collector's Collect at the collect timeout, its constructor and
//     detection at their deadlines), so a sample costs no goroutine.
//
// A Reader keeps a file's descriptor open where its filesystem regenerates
// the content on each read from offset 0 (procfs, cgroup, cgroup2): a
// sample then costs one pread a file instead of open, read and close.
// Anything else (sysfs, a fixture tree, an lxcfs FUSE file) is opened
// afresh on each read. A Reader reads on its caller's goroutine: it is for
// collectors, whose calls are bounded as above.
//
// Reads go through the ordinary system call path (syscall.Open, Pread),
// which hands the thread's P to the scheduler when a call blocks: a read
// that hangs in the kernel stalls its caller only, never the rest of
// bridge.
package kfile

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The size caps, stated once. A read past its cap fails with ErrTooLarge.
const (
	// Value is the cap of a file that holds one value or one short line
	// (energy_uj, a port's state, a GPU's unique_id, a pid's stat).
	Value = 4 << 10
	// Table is the cap of a kernel table (/proc/stat, memory.stat,
	// cgroup.procs, mountinfo, a KFD properties file), procfs's own.
	Table = 1 << 20
	// Entries is the cap of the entries of a directory bridge lists
	// (a class of devices, a port list, a cgroup's children).
	Entries = 1 << 16
)

// DefaultWait bounds a one-shot call whose ctx has no deadline: the
// default collect timeout.
const DefaultWait = 5 * time.Second

var (
	// ErrTooLarge: the file holds more than the read's cap.
	ErrTooLarge = errors.New("too large")
	// ErrNotRegular: the path is a FIFO, a device, a socket or a
	// directory where a regular file is read.
	ErrNotRegular = errors.New("not a regular file")
	// ErrNoAnswer: the call had not returned when ctx ended; it goes on
	// in the background, not waited for.
	ErrNoAnswer = errors.New("no answer")
)

// bounded is the context key of Bounded.
type bounded struct{}

// Bounded marks ctx as the context of a goroutine that its caller stops
// waiting for when ctx ends (a collector's call under the Sampler, a
// constructor under its deadline): the calls of this package under it run
// on that goroutine, with no goroutine of their own. Only the code that
// abandons the goroutine marks its context.
func Bounded(ctx context.Context) context.Context {
	return context.WithValue(ctx, bounded{}, true)
}

// IsBounded reports whether ctx was marked by Bounded.
func IsBounded(ctx context.Context) bool {
	b, _ := ctx.Value(bounded{}).(bool)
	return b
}

// Call runs f on a goroutine of its own and returns its result, or, when
// ctx ends first, an error wrapping ErrNoAnswer and ctx's cause. f is then
// abandoned: when it returns later, release (if not nil) gets what it made
// without an error, to close it. f must hold no lock its caller may need.
// Call waits as long as ctx lasts: the reads of this package add
// DefaultWait to a ctx without a deadline, Call does not.
func Call[T any](ctx context.Context, f func() (T, error), release func(T)) (T, error) {
	type outcome struct {
		v   T
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		v, err := f()
		done <- outcome{v, err}
	}()
	select {
	case o := <-done:
		return o.v, o.err
	case <-ctx.Done():
		go func() {
			if o := <-done; o.err == nil && release != nil {
				release(o.v)
			}
		}()
		var zero T
		return zero, fmt.Errorf("%w: %w", ErrNoAnswer, context.Cause(ctx))
	}
}

// withWait gives ctx a deadline of DefaultWait when it has none.
func withWait(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultWait)
}

// within runs f under ctx: on the caller's goroutine when ctx is Bounded
// (after a check that ctx has not ended), else through Call. A nil ctx is
// context.Background(). The hot paths call inline first, so that a
// sample's read makes no closure.
func within[T any](ctx context.Context, f func() (T, error), release func(T)) (T, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if on, err := inline(ctx); on {
		if err != nil {
			var zero T
			return zero, err
		}
		return f()
	}
	ctx, cancel := withWait(ctx)
	defer cancel()
	return Call(ctx, f, release)
}

// inline reports whether a call under ctx runs on the caller's goroutine
// (ctx is Bounded), and, if so, the error that ends it before it starts
// (ctx has ended).
func inline(ctx context.Context) (bool, error) {
	if ctx == nil || !IsBounded(ctx) {
		return false, nil
	}
	if ctx.Err() != nil {
		return true, fmt.Errorf("%w: %w", ErrNoAnswer, context.Cause(ctx))
	}
	return true, nil
}
