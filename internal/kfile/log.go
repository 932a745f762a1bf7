package kfile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
)

// RecordMax is the largest record of the kernel's log a Log reads: the
// kernel's own bound on what one read of /dev/kmsg returns
// (CONSOLE_EXT_LOG_MAX). A record that does not fit is skipped.
const RecordMax = 8 << 10

// Log is the kernel's log as /dev/kmsg gives it: one record a read, the
// records logged after OpenLog only (the job's, when it is opened at the
// job's start). Its reads never wait for a record (O_NONBLOCK): the end of
// what is logged ends a read. Records and Close may run beside each
// other; a Records left behind at its ctx closes the descriptor when it
// ends, after a Close.
type Log struct {
	name string

	mu     sync.Mutex
	fd     int
	busy   bool // a Records is reading fd
	closed bool
}

// ErrNotLog means OpenLog found something other than a character device at its
// path (a regular file in its place holds no live log).
var ErrNotLog = errors.New("not the kernel's log device")

// OpenLog opens the kernel's log at path (/dev/kmsg) within ctx, at its
// end: Records then gives the records logged since. A path that is not a
// character device is ErrNotLog.
func OpenLog(ctx context.Context, path string) (*Log, error) {
	return within(ctx, func() (*Log, error) {
		fd, err := openOnce(path)
		if err != nil {
			return nil, err
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			syscall.Close(fd)
			return nil, err
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
			syscall.Close(fd)
			return nil, fmt.Errorf("%s: %w (%s)", path, ErrNotLog, kind(st.Mode))
		}
		// SEEK_END on /dev/kmsg: the next read gives the next record logged.
		if _, err := syscall.Seek(fd, 0, 2); err != nil {
			syscall.Close(fd)
			return nil, err
		}
		return &Log{name: path, fd: fd}, nil
	}, func(l *Log) { l.Close() })
}

var errLogClosed = errors.New("closed")

// LogRead is what one Records found besides the records it kept.
type LogRead struct {
	Read int // records read
	// Lost counts the times the kernel overwrote records before they were
	// read (EPIPE: its ring buffer wrapped); the read goes on from the
	// oldest record left.
	Lost int
	// More: the read stopped at its max, with records left unread.
	More bool
}

// Records reads the records logged since the open (or the last Records),
// at most max of them, within ctx, and returns the text of those keep
// accepts (keep sees each record in a buffer it must not keep, and may
// run on another goroutine than the caller's).
func (l *Log) Records(ctx context.Context, max int, keep func([]byte) bool) ([]string, LogRead, error) {
	type result struct {
		recs []string
		r    LogRead
	}
	res, err := within(ctx, func() (result, error) {
		var res result
		var err error
		res.recs, res.r, err = l.read(max, keep)
		return res, err
	}, nil)
	return res.recs, res.r, err
}

func (l *Log) read(max int, keep func([]byte) bool) ([]string, LogRead, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, LogRead{}, fmt.Errorf("reading %s: %w", l.name, errLogClosed)
	}
	l.busy = true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.busy = false
		if l.closed {
			syscall.Close(l.fd)
		}
		l.mu.Unlock()
	}()
	var out []string
	var r LogRead
	buf := make([]byte, RecordMax)
	for {
		if r.Read >= max {
			r.More = true
			return out, r, nil
		}
		n, err := syscall.Read(l.fd, buf)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EPIPE:
			r.Lost++
			continue
		case err == syscall.EINVAL:
			// A record larger than the buffer: the kernel moves past it.
			r.Read++
			continue
		case err == syscall.EAGAIN || (err == nil && n == 0):
			return out, r, nil
		case err != nil:
			return out, r, fmt.Errorf("reading %s: %w", l.name, err)
		}
		r.Read++
		if keep(buf[:n]) {
			out = append(out, string(buf[:n]))
		}
	}
}

// Close closes the log; a second Close does nothing. A Records in flight
// closes the descriptor when it ends.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if !l.busy {
		return syscall.Close(l.fd)
	}
	return nil
}
