// Package userfile reads a file whose path the user gave (the --config
// file, a CA bundle, a credentials file) in bounded time and memory: only a
// regular file of at most a given size is read. /dev/zero, a FIFO, a
// directory or a huge file is an error naming the path, never an endless
// read or a wait for a writer that never comes.
package userfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrNotRegular: the path is a device, FIFO, socket or directory.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge: the file holds more than the bound.
var ErrTooLarge = errors.New("too large")

// Read returns the contents of the regular file at path, at most max bytes.
// The file is opened with O_NONBLOCK, so that opening a FIFO does not wait
// for a writer, and the open descriptor is what is checked (no race with a
// rename between a stat and the open); the read itself is bounded too, for
// a file that grows, or that reports no size (/proc).
func Read(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, kind(st.Mode()))
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%s: %w: %d bytes, at most %d are read", path, ErrTooLarge, st.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: %w: more than %d bytes", path, ErrTooLarge, max)
	}
	return b, nil
}

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	}
	return m.Type().String()
}
