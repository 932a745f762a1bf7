// Package attachlock keeps one `bridge attach` per monitored process, run
// and node on a machine: a second attach for the same ones (a notebook
// cell run twice, a shell command beside the notebook's attach()) finds the
// first and does nothing, instead of logging every point twice.
//
// The lock is an exclusive flock(2) on a file in a directory every attach
// on the machine shares (the temporary directory), named after a hash of
// what it monitors. The kernel lets it go when the holder ends, however it
// ends, so a dead attach never blocks the next one. The file holds the
// holder's description (JSON) for the second attach to name it.
package attachlock

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/internal/flock"

	"golang.org/x/sys/unix"
)

// ErrHeld is returned by Acquire when another live attach monitors the
// same process, runs and node.
var ErrHeld = errors.New("another bridge attach monitors this process and run")

// Key is what one attach monitors: the process (its pid and start time,
// since a pid is reused once its process is gone), the run of each tracker
// and the node id its series are keyed under.
type Key struct {
	PID   int
	Start uint64 // the process's start time, clock ticks since boot (/proc/PID/stat)
	Runs  map[string]string
	Node  string
}

// name is the lock file's name: a hash of the key, so that any value
// (a node id with a '/') makes a file name.
func (k Key) name() string {
	parts := []string{"pid=" + strconv.Itoa(k.PID), "start=" + strconv.FormatUint(k.Start, 10), "node=" + k.Node}
	for t, r := range k.Runs {
		parts = append(parts, "run."+t+"="+r)
	}
	slices.Sort(parts[3:])
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return "bridge-attach-" + hex.EncodeToString(sum[:12]) + ".lock"
}

// Holder describes the attach that holds a lock.
type Holder struct {
	PID    int               `json:"pid"`        // bridge attach's own
	Target int               `json:"target_pid"` // the process it monitors
	Runs   map[string]string `json:"runs"`
	Node   string            `json:"node,omitempty"`
	Spool  string            `json:"spool,omitempty"`
	Since  time.Time         `json:"since"`
}

// String names the holder for the user.
func (h Holder) String() string {
	if h.PID == 0 {
		return "another bridge attach (starting)"
	}
	s := fmt.Sprintf("bridge attach pid %d, since %s", h.PID, h.Since.Format(time.RFC3339))
	if h.Spool != "" {
		s += ", spool " + h.Spool
	}
	return s
}

// Lock is a held lock.
type Lock struct {
	f    *os.File
	path string
}

// Acquire takes the lock of k in dir and writes me into it. When another
// live attach holds it, it returns ErrHeld and that attach's Holder (its
// zero value while that one is still writing it).
func Acquire(dir string, k Key, me Holder) (*Lock, Holder, error) {
	path := filepath.Join(dir, k.name())
	f, err := flock.Open(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil, read(path), fmt.Errorf("%s: %w", path, ErrHeld)
	}
	if err != nil {
		if f != nil { // a filesystem without locks: no lock to hold
			f.Close()
		}
		return nil, Holder{}, fmt.Errorf("attach lock %s: %w", path, err)
	}
	l := &Lock{f: f, path: path}
	if err := l.Update(me); err != nil {
		l.Release()
		return nil, Holder{}, err
	}
	return l, Holder{}, nil
}

// Update rewrites the holder's description (the spool, known once the
// session is open).
func (l *Lock) Update(me Holder) error {
	b, err := json.Marshal(me)
	if err != nil {
		return err
	}
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("attach lock %s: %w", l.path, err)
	}
	if _, err := l.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("attach lock %s: %w", l.path, err)
	}
	return nil
}

// Path is the lock file's path.
func (l *Lock) Path() string { return l.path }

// Release removes the file and lets the lock go (flock.Release).
func (l *Lock) Release() error {
	if err := flock.Release(l.f, l.path); err != nil {
		return fmt.Errorf("releasing attach lock %s: %w", l.path, err)
	}
	return nil
}

// read reads the holder's description from the file at path.
func read(path string) Holder {
	var h Holder
	f, err := os.Open(path)
	if err != nil {
		return h // its holder is just leaving
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err == nil {
		_ = json.Unmarshal(b, &h) // empty or torn: the holder is still writing it
	}
	return h
}
