// Package stallfs mounts, for tests, a FUSE file system that passes every
// call through to a directory (a loopback) except that its fsync, on
// demand its write, and on demand every call (lookup, open, create, read,
// stat, mkdir too) can be made to block until released: the stalled disk
// of a hard NFS mount whose server went away, on a machine where only
// /dev/fuse and root are needed.
//
// The kernel serializes a file's fsync and write under the inode lock, so
// a stalled fsync also holds every write to that file, as on a real stalled
// disk. A caller interrupted by a signal gets EINTR (the kernel's FUSE
// interrupt), and Go's os.File retries it: the call stays stalled.
package stallfs

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is a mounted stallfs. Its methods are safe for concurrent use.
type FS struct {
	Dir     string // the mount point: put the files to stall here
	Backing string // the directory it passes through to

	mu      sync.Mutex
	sync    bool          // fsyncs block
	write   bool          // writes block
	all     bool          // every call blocks
	release chan struct{} // closed by Release: blocked calls go on
	waiting atomic.Int32  // calls blocked now
	syncs   atomic.Int64  // fsyncs served (blocked ones once they return)
}

// Mount mounts a stallfs on a fresh directory of t, unmounted (after every
// blocked call is released) when t ends. It skips t, loudly, where FUSE
// cannot be mounted: no /dev/fuse, or not root (mount(2) needs
// CAP_SYS_ADMIN; there is no fusermount fallback).
func Mount(t testing.TB) *FS {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("SKIPPED: the stalled-disk test needs FUSE, and /dev/fuse is missing (%v): load the fuse module or run the test in a container with --device /dev/fuse", err)
	}
	f := &FS{Dir: t.TempDir(), Backing: t.TempDir(), release: make(chan struct{})}
	root, err := fs.NewLoopbackRoot(f.Backing)
	if err != nil {
		t.Fatal(err)
	}
	lb := root.(*fs.LoopbackNode)
	top := &node{LoopbackNode: lb, fs: f}
	lb.RootData.RootNode = top
	srv, err := fs.Mount(f.Dir, top, &fs.Options{MountOptions: fuse.MountOptions{
		DirectMountStrict: true, // mount(2) as root; no fusermount
		FsName:            "stallfs",
		Name:              "stallfs",
	}})
	if err != nil {
		t.Skipf("SKIPPED: the stalled-disk test cannot mount FUSE at %s (it needs root and /dev/fuse): %v", f.Dir, err)
	}
	t.Cleanup(func() {
		f.Release()
		if err := srv.Unmount(); err != nil {
			// A process still holding a file there: detach it anyway.
			if err := syscall.Unmount(f.Dir, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmounting %s: %v", f.Dir, err)
			}
		}
		srv.Wait()
	})
	return f
}

// Stall makes every fsync (and, with writes, every write) from now on
// block until Release.
func (f *FS) Stall(writes bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.release:
		f.release = make(chan struct{})
	default:
	}
	f.sync, f.write = true, writes
}

// StallAll makes every call from now on block until Release: a disk whose
// server is gone, which cannot even be opened.
func (f *FS) StallAll() {
	f.Stall(true)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.all = true
}

// Release lets every blocked call go on, and the later ones pass.
func (f *FS) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sync, f.write, f.all = false, false, false
	select {
	case <-f.release:
	default:
		close(f.release)
	}
}

// Waiting is how many calls are blocked now.
func (f *FS) Waiting() int { return int(f.waiting.Load()) }

// Syncs is how many fsyncs returned so far.
func (f *FS) Syncs() int64 { return f.syncs.Load() }

// gate blocks a call of the kind asked to stall until Release; a call the
// kernel interrupts (a signal) ends with EINTR, which the caller retries.
func (f *FS) gate(ctx context.Context, k kind) syscall.Errno {
	f.mu.Lock()
	stall := f.all || (k == fsync && f.sync) || (k == write && f.write)
	release := f.release
	f.mu.Unlock()
	if !stall {
		return 0
	}
	f.waiting.Add(1)
	defer f.waiting.Add(-1)
	select {
	case <-release:
		return 0
	case <-ctx.Done():
		return syscall.EINTR
	}
}

// kind is the kind of a call, for gate.
type kind int

const (
	fsync kind = iota
	write
	other // stalled only by StallAll
)

// node is a loopback node whose calls pass the gate first.
type node struct {
	*fs.LoopbackNode
	fs *FS
}

var (
	_ fs.NodeWrapChilder = (*node)(nil)
	_ fs.NodeFsyncer     = (*node)(nil)
	_ fs.NodeWriter      = (*node)(nil)
	_ fs.NodeWritever    = (*node)(nil)
	_ fs.NodeLookuper    = (*node)(nil)
	_ fs.NodeOpener      = (*node)(nil)
	_ fs.NodeCreater     = (*node)(nil)
	_ fs.NodeReader      = (*node)(nil)
	_ fs.NodeGetattrer   = (*node)(nil)
	_ fs.NodeMkdirer     = (*node)(nil)
)

func (n *node) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fs: n.fs}
}

func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if errno := n.fs.gate(ctx, fsync); errno != 0 {
		return errno
	}
	defer n.fs.syncs.Add(1)
	if s, ok := f.(fs.FileFsyncer); ok {
		return s.Fsync(ctx, flags)
	}
	return syscall.ENOTSUP
}

func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := n.fs.gate(ctx, write); errno != 0 {
		return 0, errno
	}
	if w, ok := f.(fs.FileWriter); ok {
		return w.Write(ctx, data, off)
	}
	return 0, syscall.ENOTSUP
}

func (n *node) Writev(ctx context.Context, f fs.FileHandle, iov [][]byte, off int64) (uint32, syscall.Errno) {
	var data []byte
	for _, b := range iov {
		data = append(data, b...)
	}
	return n.Write(ctx, f, data, off)
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.fs.gate(ctx, other); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Lookup(ctx, name, out)
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.fs.gate(ctx, other); errno != 0 {
		return nil, 0, errno
	}
	return n.LoopbackNode.Open(ctx, flags)
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.fs.gate(ctx, other); errno != 0 {
		return nil, nil, 0, errno
	}
	return n.LoopbackNode.Create(ctx, name, flags, mode, out)
}

func (n *node) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if errno := n.fs.gate(ctx, other); errno != 0 {
		return nil, errno
	}
	if r, ok := f.(fs.FileReader); ok {
		return r.Read(ctx, dest, off)
	}
	return nil, syscall.ENOTSUP
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.fs.gate(ctx, other); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Getattr(ctx, f, out)
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.fs.gate(ctx, other); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Mkdir(ctx, name, mode, out)
}
