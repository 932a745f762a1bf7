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
// until it is probed again, after absentReads reads or absentFor, whichever
// comes first: a kernel without PSI costs no open a sample.
type kfile struct {
	path string
	keep bool
	fd   int // -1: not open

	absentErr   error     // why the file was found absent; nil: not known absent
	absentLeft  int       // reads left that answer absentErr without a syscall
	absentUntil time.Time // the latest those reads run to
}

const (
	absentReads = 63 // probed again at the 64th read
	absentFor   = 30 * time.Second
)

// now is the clock of the absence records (tests replace it).
var now = time.Now

func newKfile(path string, keep bool) *kfile { return &kfile{path: path, keep: keep, fd: -1} }

// read reads the whole file into buf's storage, growing it as needed.
func (f *kfile) read(buf []byte) ([]byte, error) {
	if f.absentErr != nil {
		if f.absentLeft > 0 && now().Before(f.absentUntil) {
			f.absentLeft--
			return buf[:0], f.absentErr
		}
		f.absentErr = nil
	}
	fd := f.fd
	if fd < 0 {
		var err error
		if fd, err = kfileio.Open(f.path); err != nil {
			f.noteAbsent(err)
			return buf[:0], err
		}
		if f.keep {
			f.fd = fd
		} else {
			defer syscall.Close(fd)
		}
	}
	out, err := kfileio.ReadWhole(fd, buf, 4096)
	if err != nil {
		f.close() // open afresh next time
		f.noteAbsent(err)
	}
	return out, err
}

// noteAbsent starts answering err without a syscall, for a kept file that is
// absent (see kfile).
func (f *kfile) noteAbsent(err error) {
	if f.keep && isAbsent(err) {
		f.absentErr, f.absentLeft, f.absentUntil = err, absentReads, now().Add(absentFor)
	}
}

func (f *kfile) close() {
	if f.fd >= 0 {
		_ = syscall.Close(f.fd)
		f.fd = -1
	}
}
