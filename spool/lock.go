package spool

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/bridge-dev/bridge/internal/flock"

	"golang.org/x/sys/unix"
)

// ErrLocked is returned by OpenWithin when another live process writes the
// spool: a spool has one writer at a time.
var ErrLocked = errors.New("another bridge is writing this spool")

// openLocked opens path and takes the spool's writer lock on it: an
// exclusive flock(2), never waited for. The kernel releases it when the
// last descriptor of that open file is closed, however the holder ends
// (kill -9, an OOM kill), so a dead writer never blocks the next one.
// flock rather than a classic POSIX lock, which closing any descriptor of
// the file drops (the spool opens its file again to re-read it); an OFD
// lock would do too. On NFS, Linux turns flock into a whole-file NFS lock
// (NFSv4, or NLM for v3) that other clients see; with `-o nolock` (or
// local_lock=flock) it is only local to the client, so bridges on two
// nodes can both write one file. A lock of a client that died is released
// when its NFSv4 lease expires (90 s by default), or under NLM only once
// that client reboots.
//
// The lock is on the file, and a size-cap rewrite replaces the file by
// rename (with the new file locked first): a lock taken on a file that is
// no longer at path is let go, and path opened again (flock.Open).
func openLocked(path string, flags int, log *slog.Logger) (*os.File, error) {
	f, err := flock.Open(path, flags, 0o600)
	var nolock *flock.NoLockError
	switch {
	case errors.Is(err, unix.EWOULDBLOCK):
		return nil, fmt.Errorf("spool %s: %w", path, ErrLocked)
	case errors.As(err, &nolock):
		// A filesystem without locks: write anyway (samples matter
		// more), but say that one writer is not enforced there.
		log.Warn("cannot lock the spool; nothing stops a second bridge from writing it", "err", nolock.Err)
		return f, nil
	}
	return f, err
}
