package kfile

import (
	"errors"
	"io/fs"
	"syscall"
	"time"
)

// A file found absent is not looked for on every sample: it is probed again
// at the AbsentLookups-th lookup after, or once AbsentFor has passed,
// whichever comes first. The count keeps probes rare at short intervals,
// where the per-sample cost matters; the time bound says when a file that
// appears (PSI turned on, a controller delegated) is read at long intervals.
const (
	AbsentLookups = 64
	AbsentFor     = 30 * time.Second
)

// Absent remembers that one file was found absent; the zero value knows
// nothing.
type Absent struct {
	err   error     // why it was found absent; nil: not known absent
	left  int       // lookups left that answer err without a syscall
	until time.Time // the latest those lookups run to
}

// IsAbsent reports whether err says the file is not there: ENOENT, or
// EOPNOTSUPP, which a pressure file gives on a kernel booted with psi=0.
func IsAbsent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EOPNOTSUPP)
}

// Known is a lookup at now: the remembered error while no probe is due, else
// nil (and the record is forgotten: look at the file).
func (a *Absent) Known(now time.Time) error {
	if a.err == nil {
		return nil
	}
	if a.left > 0 && now.Before(a.until) {
		a.left--
		return a.err
	}
	a.err = nil
	return nil
}

// Note remembers err, met at now, when it says the file is absent.
func (a *Absent) Note(err error, now time.Time) {
	if IsAbsent(err) {
		a.err, a.left, a.until = err, AbsentLookups-1, now.Add(AbsentFor)
	}
}
