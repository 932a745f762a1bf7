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

// Keep reports whether the descriptor fd is on a filesystem whose files
// regenerate their content on every read from offset 0, so that it is worth
// keeping open: procfs, cgroup (v1) and cgroup2. Anything else (a fixture
// tree on tmpfs or disk) is opened afresh each time, since tests replace it.
func Keep(fd int) bool {
	var st syscall.Statfs_t
	if syscall.Fstatfs(fd, &st) != nil {
		return false
	}
	switch st.Type {
	case 0x9fa0, 0x27e0eb, 0x63677270: // PROC, CGROUP, CGROUP2 _SUPER_MAGIC
		return true
	}
	return false
}
