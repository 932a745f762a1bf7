package node

import (
	"syscall"

	kfileio "github.com/bridge-dev/bridge/metrics/internal/kfile"
)

// kfile is one kernel file read every sample. On a real procfs it stays open
// and is re-read with pread from offset 0, which regenerates its content:
// one syscall a sample instead of open, read and close, and none of the Go
// poller's set-up that os.Open does. A plain file (a fixture tree) is opened
// each time, since tests replace it.
type kfile struct {
	path string
	keep bool
	fd   int // -1: not open
}

func newKfile(path string, keep bool) *kfile { return &kfile{path: path, keep: keep, fd: -1} }

// read reads the whole file into buf's storage, growing it as needed.
func (f *kfile) read(buf []byte) ([]byte, error) {
	fd := f.fd
	if fd < 0 {
		var err error
		if fd, err = kfileio.Open(f.path); err != nil {
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
	}
	return out, err
}

func (f *kfile) close() {
	if f.fd >= 0 {
		_ = syscall.Close(f.fd)
		f.fd = -1
	}
}
