package node

import (
	"syscall"
	"time"

	kfileio "github.com/bridge-dev/bridge/metrics/internal/kfile"
)

// kfile is one kernel file read every sample. On a real procfs it stays open
// and is re-read with pread from offset 0, which regenerates its content:
// one syscall a sample instead of open, read and close, and none of the Go
// poller's set-up that os.Open does. A plain file (a fixture tree) is opened
// each time, since tests replace it.
//
// A kept file found absent (no PSI: /proc/pressure/* missing, or failing
// with EOPNOTSUPP under psi=0) answers the same error without a syscall
// until kfileio.Absent says to probe it again: a kernel without PSI costs no
// open a sample.
type kfile struct {
	path   string
	keep   bool
	fd     int // -1: not open
	absent kfileio.Absent
}

// now is the clock of the absence records (tests replace it).
var now = time.Now

func newKfile(path string, keep bool) *kfile { return &kfile{path: path, keep: keep, fd: -1} }

// read reads the whole file into buf's storage, growing it as needed.
func (f *kfile) read(buf []byte) ([]byte, error) {
	if f.keep {
		if err := f.absent.Known(now()); err != nil {
			return buf[:0], err
		}
	}
	fd := f.fd
	if fd < 0 {
		var err error
		if fd, err = kfileio.Open(f.path); err != nil {
			f.noteAbsent(err)
			return buf[:0], err
		}
		// Only a file of procfs itself: under lxcfs, /proc/meminfo and
		// others are FUSE files, read afresh and the ordinary way.
		if f.keep && kfileio.Keep(fd) {
			f.fd = fd
		} else {
			defer syscall.Close(fd)
		}
	}
	read := kfileio.ReadWhole
	if f.fd >= 0 { // kept: a file of procfs itself
		read = kfileio.ReadKept
	}
	out, err := read(fd, buf, 4096)
	if err != nil {
		f.close() // open afresh next time
		f.noteAbsent(err)
	}
	return out, err
}

// noteAbsent starts answering err without a syscall, for a kept file that is
// absent (see kfile).
func (f *kfile) noteAbsent(err error) {
	if f.keep {
		f.absent.Note(err, now())
	}
}

func (f *kfile) close() {
	if f.fd >= 0 {
		_ = syscall.Close(f.fd)
		f.fd = -1
	}
}
