package node

import (
	"syscall"
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

// isProcfs reports whether dir is on a procfs (PROC_SUPER_MAGIC).
func isProcfs(dir string) bool {
	var st syscall.Statfs_t
	return syscall.Statfs(dir, &st) == nil && st.Type == 0x9fa0
}

// read reads the whole file into buf's storage, growing it as needed.
func (f *kfile) read(buf []byte) ([]byte, error) {
	fd := f.fd
	if fd < 0 {
		var err error
		if fd, err = syscall.Open(f.path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err != nil {
			return buf[:0], err
		}
		if f.keep {
			f.fd = fd
		} else {
			defer syscall.Close(fd)
		}
	}
	buf = buf[:cap(buf)]
	if len(buf) == 0 {
		buf = make([]byte, 4096)
	}
	for {
		n, err := syscall.Pread(fd, buf, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			f.close() // open afresh next time
			return buf[:0], err
		}
		if n < len(buf) {
			return buf[:n], nil
		}
		buf = make([]byte, 2*len(buf)) // may have been cut: read again, whole
	}
}

func (f *kfile) close() {
	if f.fd >= 0 {
		_ = syscall.Close(f.fd)
		f.fd = -1
	}
}
