// Package flock takes bridge's lock files (a spool's, a node's lead, a
// run's `bridge attach`): an exclusive flock, which the kernel drops when
// its holder dies, on the file that is still at its path.
package flock

import (
	"errors"
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
