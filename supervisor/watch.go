package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bridge-dev/bridge/internal/kfile"
)

// ErrNoProcess is returned by Watch for a pid that names no live process.
var ErrNoProcess = errors.New("no such process")

// Watched is a process bridge did not start (`bridge attach`'s): bridge is
// not its parent and cannot wait for it, so it watches for its exit.
type Watched struct {
	procRoot string
	pid      int
	ownNS    bool // procRoot is bridge's own /proc: pid is of bridge's pid namespace
}

// Watch finds pid in the pid namespace procRoot shows (--proc-root). It
// fails when procRoot cannot be read, or with ErrNoProcess when pid is
// gone (a zombie counts as gone: it has exited).
func Watch(procRoot string, pid int) (*Watched, error) {
	if st, err := kfile.Stat(context.Background(), procRoot); err != nil || !st.IsDir() {
		if err == nil {
			err = fmt.Errorf("%s is not a directory", procRoot)
		}
		return nil, err
	}
	w := &Watched{procRoot: procRoot, pid: pid, ownNS: filepath.Clean(procRoot) == "/proc"}
	if !w.Alive() {
		return nil, ErrNoProcess
	}
	return w, nil
}

// PID is the watched process's pid.
func (w *Watched) PID() int { return w.pid }

// Alive reports whether the process has not exited. A stat file that does
// not answer (a hung --proc-root) says nothing: alive.
func (w *Watched) Alive() bool { return w.alive(context.Background()) }

func (w *Watched) alive(ctx context.Context) bool {
	st, err := w.stat(ctx)
	if errors.Is(err, kfile.ErrNoAnswer) {
		return true
	}
	return err == nil && st.state != "Z" && st.state != "X"
}

// StartTime is the process's start time in clock ticks since boot: with
// the pid, it names one process (a pid is reused once its process is
// gone); 0 when it cannot be read.
func (w *Watched) StartTime() uint64 {
	st, _ := w.stat(context.Background())
	return st.start
}

// procStat is what Watched needs of /proc/<pid>/stat.
type procStat struct {
	state string // field 3
	start uint64 // field 22, starttime
}

// stat reads the process's stat file through the bounded reader.
func (w *Watched) stat(ctx context.Context) (procStat, error) {
	path := filepath.Join(w.procRoot, strconv.Itoa(w.pid), "stat")
	b, err := kfile.ReadFile(ctx, path, kfile.Value)
	if err != nil {
		return procStat{}, err
	}
	return parseStat(string(b))
}

// parseStat parses a stat line: "pid (comm) state ppid ...", where comm
// may hold spaces and parentheses, so the fields count from the last ')'.
func parseStat(s string) (procStat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, errors.New("no ')' after the command name")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("%d fields after the command name, want at least 20", len(f))
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("starttime %q: %w", f[19], err)
	}
	return procStat{state: f[0], start: start}, nil
}

// Wait returns nil once the process has exited, or ctx's error once ctx
// ends; either way it leaves nothing behind it. A pidfd (Linux 5.3)
// becomes readable at the exit, so one thread waits in poll without waking
// bridge (each wake-up costs about as much as a sample) and a reused pid
// is never mistaken for it; it names a process of bridge's own pid
// namespace, so only when the root is /proc. Else, or without pidfds, the
// root is looked at every pollEvery.
func (w *Watched) Wait(ctx context.Context) error {
	if w.ownNS {
		if exited, err := w.waitPidfd(ctx); err == nil {
			if exited {
				return nil
			}
			return ctx.Err()
		}
	}
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if !w.alive(ctx) {
				return nil
			}
		}
	}
}

// pollEvery is how often Wait looks at the process without a pidfd.
const pollEvery = 500 * time.Millisecond

// waitPidfd polls the process's pidfd beside a pipe that the end of ctx
// writes to, so that the poll returns either way: the process exited, or
// ctx ended. An error means no pidfd could be waited on (the caller looks
// at the root instead).
func (w *Watched) waitPidfd(ctx context.Context) (exited bool, err error) {
	fd, err := unix.PidfdOpen(w.pid, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	r, wake, err := os.Pipe()
	if err != nil {
		return false, err
	}
	defer r.Close()
	defer wake.Close()
	stop := context.AfterFunc(ctx, func() { wake.Write([]byte{0}) }) // a write after Close fails harmlessly
	defer stop()
	rc, err := r.SyscallConn()
	if err != nil {
		return false, err
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Events: unix.POLLIN}}
	var perr error
	if err := rc.Control(func(rfd uintptr) {
		fds[1].Fd = int32(rfd)
		for {
			if _, perr = unix.Poll(fds, -1); perr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return false, err
	}
	if perr != nil {
		return false, perr
	}
	return fds[0].Revents != 0, nil
}
