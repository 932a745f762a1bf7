// Package flock takes bridge's lock files (a spool's, a node's lead, a
// run's `bridge attach`): an exclusive flock, which the kernel drops when
// its holder dies, on the file that is still at its path.
package flock

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Try takes an exclusive lock on f without waiting (again after EINTR);
// unix.EWOULDBLOCK means another holds it.
func Try(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// StillAt reports whether f is the file at path now: a holder that
// removes its lock file when it ends may have unlinked the one f opened,
// and a lock on that one guards nothing.
func StillAt(f *os.File, path string) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	pi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(fi, pi), nil
}

// maxTries bounds how often Open opens the path again because the file it
// locked was no longer at the path (its holder removed or replaced it).
const maxTries = 10

// NoLockError is Open's error, returned with the open file, when the
// filesystem cannot lock it (NFS mounted with -o nolock, some FUSE
// filesystems): a caller may use the file unlocked.
type NoLockError struct{ Err error }

func (e *NoLockError) Error() string { return "cannot lock: " + e.Err.Error() }
func (e *NoLockError) Unwrap() error { return e.Err }

// Open opens path (os.OpenFile's flag and perm) and takes the exclusive
// lock on the file that is at path once locked: a holder that removes or
// replaces its file as it lets go leaves the file this one opened guarding
// nothing, so path is opened again (a bounded number of times, and a file
// whose place cannot be checked is kept). When another process holds the
// lock the error wraps unix.EWOULDBLOCK; when the filesystem cannot lock,
// Open returns the file with a *NoLockError.
func Open(path string, flag int, perm os.FileMode) (*os.File, error) {
	for try := 0; ; try++ {
		f, err := os.OpenFile(path, flag, perm)
		if err != nil {
			return nil, err
		}
		err = Try(f)
		switch {
		case errors.Is(err, unix.EWOULDBLOCK):
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		case err != nil:
			return f, &NoLockError{Err: err}
		}
		if same, err := StillAt(f, path); err != nil || same || try >= maxTries {
			return f, nil
		}
		f.Close()
	}
}

// Release removes the lock file at path, then lets the lock on f go:
// removed while still held, so that no other process locks a file about
// to go. A file already gone is no error.
func Release(f *os.File, path string) error {
	rerr := os.Remove(path)
	cerr := f.Close()
	if rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return rerr
	}
	return cerr
}
