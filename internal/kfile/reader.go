package kfile

import (
	"errors"
	"sync"
	"syscall"
	"time"
)

// Options configure a Reader. The zero value keeps every descriptor it can
// and remembers no absence.
type Options struct {
	// Size is the first buffer size for a read into an empty buffer
	// (default 4096, at most Max+1); a file that fills it is read again,
	// twice as large.
	Size int
	// Max is the most a file may hold (default Value; Table for a table):
	// a file that holds more is ErrTooLarge.
	Max int
	// MaxKept bounds the descriptors kept open (0: no bound). Past it,
	// files are read with open, pread and close: a huge process tree must
	// not spend bridge's descriptors.
	MaxKept int
	// Absent makes a file found absent (see IsAbsent) answer that error
	// without a system call until Absent says to look again: a kernel
	// without PSI, or a controller not delegated here, costs no open a
	// sample. For the fixed files of a source, never for per-process files
	// (a pid that is gone may come back as another process).
	Absent bool
	// Now is the clock of the absence records (default time.Now).
	Now func() time.Time
}

// Reader reads files by key (a path, a pid). It is safe for concurrent use,
// and no lock is held across a system call: Close and Sweep never wait for
// a read, however long it hangs.
//
// A kept descriptor is never closed under a read in flight on it: Close,
// Sweep and a failed read drop it from the Reader at once, and the last
// read using it closes it. Its number can therefore not be given to another
// file while a read may still use it (a read of the wrong file).
type Reader[K comparable] struct {
	path func(K) string
	o    Options

	// Tests replace these to count opens or make a read fail or wait;
	// the Reader calls them without holding mu.
	open  func(path string) (int, error)
	pread func(fd int, p []byte, off int64) (int, error)

	mu     sync.Mutex
	files  map[K]*entry
	kept   int  // entries holding a descriptor
	closed bool // Close was called: nothing is kept any more
}

// entry is what the Reader knows of one key.
type entry struct {
	d      *desc  // the kept descriptor; nil: none
	used   bool   // read since the last Sweep
	absent Absent // with Options.Absent
}

// desc is a kept descriptor and the reads in flight on it.
type desc struct {
	fd   int
	refs int  // reads in flight
	dead bool // dropped from its entry: the last read closes fd
}

// NewReader returns a Reader of the files path names.
func NewReader[K comparable](path func(K) string, o Options) *Reader[K] {
	if o.Size <= 0 {
		o.Size = 4096
	}
	if o.Max <= 0 {
		o.Max = Value
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Reader[K]{path: path, o: o, open: openFile, pread: syscall.Pread, files: map[K]*entry{}}
}

// NewPathReader returns a Reader whose keys are the paths themselves.
func NewPathReader(o Options) *Reader[string] {
	return NewReader(func(p string) string { return p }, o)
}

// Read reads the whole file of key into buf's storage, growing it as
// needed up to Options.Max (buf may be nil), and returns it with the error
// of the read: ErrTooLarge past Max, ErrNotRegular for a FIFO or a device
// (a file bridge reads is never one).
//
// A kept descriptor whose read fails is dropped and the file opened again
// once: a removed cgroup's files fail with ENODEV, and opening again says
// the file is gone, or reads the cgroup made in its place. Except on ESRCH:
// the process the descriptor was opened for has exited, and opening its
// path again could read another process under a reused pid.
func (r *Reader[K]) Read(key K, buf []byte) ([]byte, error) {
	r.mu.Lock()
	e := r.files[key]
	var d *desc
	if e != nil {
		e.used = true
		if d = e.d; d != nil {
			d.refs++
		} else if r.o.Absent {
			if err := e.absent.Known(r.o.Now()); err != nil {
				r.mu.Unlock()
				return buf[:0], err
			}
		}
	}
	r.mu.Unlock()
	if d != nil {
		out, err := r.readWhole(d.fd, buf)
		r.release(e, d, err != nil)
		if err == nil || errors.Is(err, syscall.ESRCH) {
			return out, err
		}
		buf = out
	}
	return r.fresh(key, buf)
}

// release ends a read on d; failed drops d from e.
func (r *Reader[K]) release(e *entry, d *desc, failed bool) {
	r.mu.Lock()
	d.refs--
	if failed && e.d == d {
		r.dropLocked(e) // closed below, or by the last read
	}
	closeFD := d.dead && d.refs == 0
	r.mu.Unlock()
	if closeFD {
		_ = syscall.Close(d.fd)
	}
}

// dropLocked takes e's descriptor out of the Reader; it is closed once no
// read uses it. The caller holds mu and closes what dropLocked returns.
func (r *Reader[K]) dropLocked(e *entry) (closeNow int, ok bool) {
	d := e.d
	if d == nil {
		return 0, false
	}
	e.d, d.dead = nil, true
	r.kept--
	return d.fd, d.refs == 0
}

// fresh opens the file of key, reads it and keeps the descriptor when it
// may.
func (r *Reader[K]) fresh(key K, buf []byte) ([]byte, error) {
	fd, err := r.open(r.path(key))
	if err != nil {
		r.noteAbsent(key, err)
		return buf[:0], err
	}
	out, err := r.readWhole(fd, buf)
	if err != nil {
		_ = syscall.Close(fd)
		r.noteAbsent(key, err)
		return out, err
	}
	if !r.keep(key, fd) {
		_ = syscall.Close(fd)
	}
	return out, nil
}

// keep stores fd as key's kept descriptor if its filesystem regenerates its
// files, the bound allows and the Reader is open; it reports whether it did.
func (r *Reader[K]) keep(key K, fd int) bool {
	if !r.room() || !Regenerated(fd) { // fstatfs outside the lock
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.roomLocked() {
		return false
	}
	e := r.entryLocked(key)
	if e.d != nil { // another read kept one meanwhile
		return false
	}
	e.d, e.used = &desc{fd: fd}, true
	r.kept++
	return true
}

func (r *Reader[K]) room() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.roomLocked()
}

func (r *Reader[K]) roomLocked() bool {
	return !r.closed && (r.o.MaxKept <= 0 || r.kept < r.o.MaxKept)
}

func (r *Reader[K]) entryLocked(key K) *entry {
	e := r.files[key]
	if e == nil {
		e = &entry{}
		r.files[key] = e
	}
	return e
}

// noteAbsent remembers key as absent when err says so (Options.Absent).
func (r *Reader[K]) noteAbsent(key K, err error) {
	if !r.o.Absent || !IsAbsent(err) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.entryLocked(key).absent.Note(err, r.o.Now())
}

// Sweep drops the descriptors (and entries) of keys not read since the last
// Sweep: the files of processes that left the tree.
func (r *Reader[K]) Sweep() {
	var fds []int
	r.mu.Lock()
	for k, e := range r.files {
		if e.used {
			e.used = false
			continue
		}
		if fd, ok := r.dropLocked(e); ok {
			fds = append(fds, fd)
		}
		delete(r.files, k)
	}
	r.mu.Unlock()
	closeAll(fds)
}

// Close drops every kept descriptor (a read in flight closes its own when
// it ends) and keeps none from then on: a read after Close, such as one
// from a Collect still running, opens, reads and closes its file, and so
// leaks nothing. Close never waits for a read. A second Close does nothing.
func (r *Reader[K]) Close() error {
	var fds []int
	r.mu.Lock()
	r.closed = true
	for _, e := range r.files {
		if fd, ok := r.dropLocked(e); ok {
			fds = append(fds, fd)
		}
	}
	clear(r.files)
	r.mu.Unlock()
	closeAll(fds)
	return nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = syscall.Close(fd)
	}
}

// readWhole reads the whole file behind fd into buf's storage, within
// Options.Max (readWhole).
func (r *Reader[K]) readWhole(fd int, buf []byte) ([]byte, error) {
	out, err := readWhole(r.pread, fd, buf, r.o.Size, r.o.Max)
	return out, describe(fd, err)
}

// Regenerated reports whether fd is on a filesystem whose files write their
// content afresh on every read from offset 0, so that keeping it open is
// worth it: procfs, cgroup (v1) and cgroup2. Under lxcfs, /proc/meminfo and
// others are FUSE files: not kept.
func Regenerated(fd int) bool {
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
