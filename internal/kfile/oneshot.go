package kfile

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
)

// openFlags open a file to read; a terminal never becomes bridge's.
const openFlags = syscall.O_RDONLY | syscall.O_NOCTTY | syscall.O_CLOEXEC

// openFile opens a file a sample reads (a Reader's, ReadInto's) as the
// kernel files it expects: an open that waits (a FIFO in their place, a
// wedged driver) is bounded by the caller's goroutine, which bridge stops
// waiting for.
func openFile(path string) (int, error) { return syscall.Open(path, openFlags, 0) }

// openOnce opens a file for a one-shot read, without waiting: a FIFO does
// not wait for a writer (its type is then refused).
func openOnce(path string) (int, error) { return syscall.Open(path, openFlags|syscall.O_NONBLOCK, 0) }

// ReadFile returns the contents of the regular file at path, at most limit
// bytes (Value, Table or a cap of the caller's), within ctx (see the
// package doc). A FIFO, a device, a socket or a directory is
// ErrNotRegular, a file of more than limit bytes ErrTooLarge; the open
// descriptor is what is checked, so a rename between a check and the read
// changes nothing.
func ReadFile(ctx context.Context, path string, limit int) ([]byte, error) {
	return within(ctx, func() ([]byte, error) { return readRegular(path, limit) }, nil)
}

// ReadInto is ReadFile into buf's storage (grown as needed, never past
// limit+1 bytes) for a file read every sample; it returns buf emptied on an
// error. It checks the file's type only when a read fails or fills limit:
// a read that succeeds costs open, one pread and close. Off a Bounded ctx
// the read gets a buffer of its own (one left behind must not write into
// buf once its caller has it back).
func ReadInto(ctx context.Context, buf []byte, path string, limit int) ([]byte, error) {
	if on, err := inline(ctx); on {
		if err != nil {
			return buf[:0], err
		}
		return readInto(buf, path, limit)
	}
	return within(ctx, func() ([]byte, error) { return readInto(nil, path, limit) }, nil)
}

func readInto(buf []byte, path string, limit int) ([]byte, error) {
	fd, err := openFile(path)
	if err != nil {
		return buf[:0], err
	}
	defer syscall.Close(fd)
	out, err := readWhole(syscall.Pread, fd, buf, 512, limit)
	return out, describe(fd, err)
}

func readRegular(path string, limit int) ([]byte, error) {
	fd, err := openOnce(path)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, fmt.Errorf("%w (%s)", ErrNotRegular, kind(st.Mode))
	}
	if st.Size > int64(limit) {
		return nil, fmt.Errorf("%w: %d bytes, at most %d are read", ErrTooLarge, st.Size, limit)
	}
	// A regular file may answer less than asked before its end (FUSE, a
	// signal): read on until it says there is no more.
	b := make([]byte, 0, min(max(int(st.Size), 511)+1, limit+1))
	for {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(cap(b), limit+1-cap(b)))
		}
		n, err := syscall.Pread(fd, b[len(b):cap(b)], int64(len(b)))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
		if len(b) > limit {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
		}
	}
}

// readWhole reads the whole file behind fd, from offset 0, into buf's
// storage (first bytes when buf has none), growing it by doubling to at
// most limit+1 bytes, until one read is not cut short: a kernel file is
// made afresh on each read from 0, so a file read in one call is one
// snapshot. A file that fills limit+1 is ErrTooLarge.
func readWhole(pread func(int, []byte, int64) (int, error), fd int, buf []byte, first, limit int) ([]byte, error) {
	buf = buf[:min(cap(buf), limit+1)]
	if len(buf) == 0 {
		buf = make([]byte, min(first, limit+1))
	}
	for {
		n, err := pread(fd, buf, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return buf[:0], err
		}
		if n < len(buf) {
			return buf[:n], nil
		}
		if len(buf) > limit {
			return buf[:0], fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
		}
		buf = make([]byte, min(2*len(buf), limit+1)) // may have been cut: read again, whole
	}
}

// describe words a failed read of fd by what fd is: a read of a FIFO,
// a socket or a directory (ESPIPE, EISDIR), or one that filled its cap from
// a device (/dev/zero), is ErrNotRegular. It costs a system call on a
// failure only.
func describe(fd int, err error) error {
	if err == nil {
		return nil
	}
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return fmt.Errorf("%w (%s): %w", ErrNotRegular, kind(st.Mode), err)
	}
	return err
}

// KindOf words what a file that is not a regular file is: "a FIFO", "a
// character device"...
func KindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "an unknown kind of file"
}

// kind is KindOf for a mode of stat(2).
func kind(mode uint32) string {
	var m fs.FileMode
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return "a regular file"
	case syscall.S_IFDIR:
		m = fs.ModeDir
	case syscall.S_IFIFO:
		m = fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		m = fs.ModeSocket
	case syscall.S_IFCHR:
		m = fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		m = fs.ModeDevice
	case syscall.S_IFLNK:
		m = fs.ModeSymlink
	}
	return KindOf(m)
}

// Entry is one entry of a directory.
type Entry struct {
	Name string
	Type uint8 // syscall.DT_*; DT_UNKNOWN where the filesystem does not say
}

// ReadDir lists the directory dir (but . and ..), sorted by name, within
// ctx: at most limit entries (Entries, or a cap of the caller's), more is
// ErrTooLarge. A path that is not a directory is an error at once (the
// open says ENOTDIR, a FIFO included).
func ReadDir(ctx context.Context, dir string, limit int) ([]Entry, error) {
	list := func() ([]Entry, error) {
		var out []Entry
		err := listDir(dir, limit, nil, func(name string, typ uint8) { out = append(out, Entry{Name: name, Type: typ}) })
		if err != nil {
			return nil, err
		}
		slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
		return out, nil
	}
	if on, err := inline(ctx); on {
		if err != nil {
			return nil, err
		}
		return list()
	}
	return within(ctx, list, nil)
}

// ReadDirNames is ReadDir's names.
func ReadDirNames(ctx context.Context, dir string, limit int) ([]string, error) {
	list := func() ([]string, error) {
		var out []string
		if err := listDir(dir, limit, nil, func(name string, _ uint8) { out = append(out, name) }); err != nil {
			return nil, err
		}
		slices.Sort(out)
		return out, nil
	}
	if on, err := inline(ctx); on {
		if err != nil {
			return nil, err
		}
		return list()
	}
	return within(ctx, list, nil)
}

// Subdirs lists the subdirectories of dir by the entries' d_type (which
// procfs, sysfs and cgroupfs fill in), sorted by name, within ctx: at
// most limit, more is ErrTooLarge. The other entries cost no allocation
// (a cgroup's files, listed every sample).
func Subdirs(ctx context.Context, dir string, limit int) ([]string, error) {
	list := func() ([]string, error) {
		var out []string
		isDir := func(typ uint8) bool { return typ == syscall.DT_DIR }
		if err := listDir(dir, limit, isDir, func(name string, _ uint8) { out = append(out, name) }); err != nil {
			return nil, err
		}
		slices.Sort(out)
		return out, nil
	}
	if on, err := inline(ctx); on {
		if err != nil {
			return nil, err
		}
		return list()
	}
	return within(ctx, list, nil)
}

// listDir calls each for at most limit entries of dir that keep (nil:
// all) takes, and fails with ErrTooLarge when it has more.
func listDir(dir string, limit int, keep func(typ uint8) bool, each func(name string, typ uint8)) error {
	n := 0
	err := dirents(dir, keep, func(name string, typ uint8) bool {
		if n++; n > limit {
			return false
		}
		each(name, typ)
		return true
	})
	if err == nil && n > limit {
		err = fmt.Errorf("%w: more than %d entries", ErrTooLarge, limit)
	}
	return err
}

// dirents calls each for every entry of dir but . and .. that keep (nil:
// all) takes by its type, until each returns false, with raw getdents:
// os.Open would register the descriptor with the Go poller and stat
// nothing useful. An entry keep leaves costs no allocation.
func dirents(dir string, keep func(typ uint8) bool, each func(name string, typ uint8) bool) error {
	fd, err := syscall.Open(dir, openFlags|syscall.O_NONBLOCK|syscall.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	buf := make([]byte, 8192)
	for {
		n, err := syscall.ReadDirent(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		// struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name NUL-terminated.
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				break
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if (keep == nil || keep(b[18])) && string(name) != "." && string(name) != ".." {
				if !each(string(name), b[18]) {
					return nil
				}
			}
			b = b[reclen:]
		}
	}
}

// Stat is os.Stat within ctx.
func Stat(ctx context.Context, path string) (fs.FileInfo, error) {
	if on, err := inline(ctx); on {
		if err != nil {
			return nil, err
		}
		return os.Stat(path)
	}
	return within(ctx, func() (fs.FileInfo, error) { return os.Stat(path) }, nil)
}

// Exists reports whether path can be stat'ed within ctx.
func Exists(ctx context.Context, path string) bool {
	_, err := Stat(ctx, path)
	return err == nil
}

// Readlink is os.Readlink within ctx.
func Readlink(ctx context.Context, path string) (string, error) {
	return within(ctx, func() (string, error) { return os.Readlink(path) }, nil)
}
