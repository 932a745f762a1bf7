package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"

	"github.com/bridge-dev/bridge/internal/kfile"
)

// procStat is what the collector needs of one /proc/<pid>/stat line.
type procStat struct {
	PID        int
	PPID       int
	State      byte   // R, S, D, Z...: the process's state at the read
	UTime      uint64 // ticks
	STime      uint64
	CUTime     int64 // ticks; signed in proc(5)
	CSTime     int64
	NumThreads int
	Starttime  uint64 // ticks since boot
	RSSPages   int64
	// comm is the process's name (comm, at most 15 bytes), in a fixed
	// array: reading it allocates nothing.
	comm  [15]byte
	commN uint8
}

// Comm is the process's name (/proc/<pid>/comm).
func (s *procStat) Comm() string { return string(s.comm[:s.commN]) }

// commIs reports whether the process's name is name, without allocating.
func (s *procStat) commIs(name string) bool { return string(s.comm[:s.commN]) == name }

var errGarbled = errors.New("malformed stat line")

// parseStat parses one /proc/<pid>/stat line. comm may hold spaces and
// parentheses, so the fields start after the last ')'. It allocates nothing:
// procfs's parser (fmt.Fscan) was the biggest cost of a sample.
func parseStat(b []byte) (procStat, error) {
	var s procStat
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 1 || closing < open {
		return s, errGarbled
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return s, errGarbled
	}
	s.PID = pid
	s.commN = uint8(copy(s.comm[:], b[open+1:closing]))
	// Fields after comm, 0-based: 0 state, 1 ppid, 11 utime, 12 stime,
	// 13 cutime, 14 cstime, 17 num_threads, 19 starttime, 21 rss.
	rest := b[closing+1:]
	field := 0
	for len(rest) > 0 && field <= 21 {
		for len(rest) > 0 && rest[0] == ' ' {
			rest = rest[1:]
		}
		end := bytes.IndexAny(rest, " \n")
		if end < 0 {
			end = len(rest)
		}
		tok := rest[:end]
		rest = rest[end:]
		if len(tok) == 0 {
			break
		}
		switch field {
		case 0:
			s.State = tok[0]
		case 1:
			v, ok := atoi(tok)
			if !ok {
				return s, errGarbled
			}
			s.PPID = int(v)
		case 11, 12, 19:
			v, ok := atou(tok)
			if !ok {
				return s, errGarbled
			}
			switch field {
			case 11:
				s.UTime = v
			case 12:
				s.STime = v
			default:
				s.Starttime = v
			}
		case 13, 14, 17, 21:
			v, ok := atoi(tok)
			if !ok {
				return s, errGarbled
			}
			switch field {
			case 13:
				s.CUTime = v
			case 14:
				s.CSTime = v
			case 17:
				s.NumThreads = int(v)
			default:
				s.RSSPages = v
			}
		}
		field++
	}
	if field <= 21 {
		return s, errGarbled
	}
	return s, nil
}

func atou(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

func atoi(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	u, ok := atou(b)
	if !ok {
		return 0, false
	}
	if neg {
		return -int64(u), true
	}
	return int64(u), true
}

// maxOpenStats bounds the files a reader keeps open, of each kind (stat
// files, children links): a huge tree, or one with hundreds of threads, reads
// the rest with open/read/close rather than spend bridge's descriptors.
const maxOpenStats = 256

// statFiles reads /proc/<pid>/stat files. On a real procfs each stays open
// and is re-read with pread (kfile.Reader): one syscall a process a sample.
// A kept descriptor stays bound to the process it was opened for, so a
// reused pid reads ESRCH (gone), never another process's figures; those of
// processes no longer in the tree are closed by sweep.
type statFiles struct {
	procRoot string
	files    *kfile.Reader[int]
	buf      []byte
}

func newStatFiles(procRoot string) *statFiles {
	f := &statFiles{procRoot: procRoot}
	f.files = kfile.NewReader(f.path, kfile.Options{Size: 1024, MaxKept: maxOpenStats})
	return f
}

// read returns the stat of pid; gone is true when the process no longer
// exists (or exited while being read).
func (f *statFiles) read(ctx context.Context, pid int) (s procStat, gone bool, err error) {
	f.buf, err = f.files.Read(pid, f.buf)
	if err != nil {
		if isGone(err) {
			return s, true, nil
		}
		return s, false, fmt.Errorf("reading %s: %w", f.path(pid), err)
	}
	s, err = parseStat(f.buf)
	if err != nil {
		if _, serr := kfile.Stat(ctx, f.dir(pid)); serr != nil {
			return s, true, nil // exited mid-read
		}
		return s, false, fmt.Errorf("reading the stat file of process %d (%s): %w", pid, f.path(pid), err)
	}
	return s, false, nil
}

func (f *statFiles) sweep() { f.files.Sweep() }
func (f *statFiles) close() { f.files.Close() }

func (f *statFiles) dir(pid int) string  { return f.procRoot + "/" + strconv.Itoa(pid) }
func (f *statFiles) path(pid int) string { return f.dir(pid) + "/stat" }

// isGone reports whether err means the process has exited.
func isGone(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESRCH)
}
