// Package kfile reads small kernel files (procfs, cgroupfs) whole through a
// descriptor kept open: pread from offset 0 regenerates their content, so a
// sample costs one syscall instead of open, read and close, and none of the
// Go poller's set-up that os.Open does.
package kfile

import "syscall"

// IsProcfs reports whether dir is on a procfs (PROC_SUPER_MAGIC): only there
// are descriptors worth keeping; a fixture tree is re-opened each time, since
// tests replace its files.
func IsProcfs(dir string) bool {
	var st syscall.Statfs_t
	return syscall.Statfs(dir, &st) == nil && st.Type == 0x9fa0
}

// Open opens path read-only for ReadWhole.
func Open(path string) (int, error) {
	return syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
}

// ReadWhole reads the whole file behind fd into buf's storage, growing it
// (from size when buf has none) until one read is not cut short.
func ReadWhole(fd int, buf []byte, size int) ([]byte, error) {
	buf = buf[:cap(buf)]
	if len(buf) == 0 {
		buf = make([]byte, size)
	}
	for {
		n, err := syscall.Pread(fd, buf, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return buf[:0], err
		}
		if n < len(buf) {
			return buf[:n], nil
		}
		buf = make([]byte, 2*len(buf)) // may have been cut: read again, whole
	}
}
