package kfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/waitfor"
)

// countOpens makes r count its opens by path.
func countOpens(r *Reader[string]) func(path string) int {
	var mu sync.Mutex
	n := map[string]int{}
	r.open = func(path string) (int, error) {
		mu.Lock()
		n[path]++
		mu.Unlock()
		return openFile(path)
	}
	return func(path string) int {
		mu.Lock()
		defer mu.Unlock()
		return n[path]
	}
}

// openFDs lists this process's descriptors whose target is path.
// kept is the number of descriptors r keeps open.
func kept[K comparable](r *Reader[K]) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kept
}

func openFDs(t *testing.T, path string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == path {
			out = append(out, e.Name())
		}
	}
	return out
}

// A procfs file is read whole through one kept descriptor, growing a buffer
// that is too small, and each read is fresh (from offset 0).
func TestReadKeepsProcfs(t *testing.T) {
	for _, path := range []string{"/proc/self/cmdline", "/proc/self/cgroup", "/proc/version"} {
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{1, 4, 4096} {
			r := NewPathReader(Options{Size: size})
			opens := countOpens(r)
			got, err := r.Read(path, nil)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s, size %d: Read = %q, %v; want %q", path, size, got, err, want)
			}
			again, err := r.Read(path, got) // reuses the storage
			if err != nil || !bytes.Equal(again, want) {
				t.Errorf("%s, size %d, second read: %q, %v; want %q", path, size, again, err, want)
			}
			if opens(path) != 1 || kept(r) != 1 {
				t.Errorf("%s: %d opens, %d kept; want 1 open, kept", path, opens(path), kept(r))
			}
			r.Close()
		}
	}
	// /proc/self/stat changes between reads: a kept descriptor reads it
	// afresh (utime grows while this loop spins).
	r := NewPathReader(Options{})
	defer r.Close()
	first, err := r.Read("/proc/self/stat", nil)
	if err != nil {
		t.Fatal(err)
	}
	first = bytes.Clone(first)
	waitfor.Cond(t, time.Minute, "a re-read of /proc/self/stat that differs", func() bool {
		b, err := r.Read("/proc/self/stat", nil)
		return err == nil && !bytes.Equal(b, first)
	})
}

// A plain file (a fixture tree) is opened on each read: a replaced file is
// read as it is now, and nothing stays open.
func TestPlainFileNotKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memory.current")
	r := NewPathReader(Options{Absent: true})
	defer r.Close()
	for _, body := range []string{"1\n", "22\n"} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := r.Read(path, nil); err != nil || string(got) != body {
			t.Errorf("Read = %q, %v; want %q", got, err, body)
		}
	}
	if kept(r) != 0 || len(openFDs(t, path)) != 0 {
		t.Errorf("a plain file kept open: %d kept, descriptors %v", kept(r), openFDs(t, path))
	}
}

// A file found absent is not looked for again until AbsentLookups reads or
// AbsentFor have passed, whichever comes first; then a file that appeared
// is read. Without Options.Absent it is looked at on every read.
func TestAbsentReprobe(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	path := filepath.Join(t.TempDir(), "cpu.pressure")
	for _, by := range []string{"reads", "time"} {
		os.Remove(path)
		r := NewPathReader(Options{Absent: true, Now: func() time.Time { return clock }})
		opens := countOpens(r)
		if _, err := r.Read(path, nil); !IsAbsent(err) {
			t.Fatalf("%s: missing file: err = %v, want absent", by, err)
		}
		if err := os.WriteFile(path, []byte("some avg10=1.00 avg60=0.00 avg300=0.00 total=1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if by == "time" {
			clock = clock.Add(AbsentFor)
		} else {
			for i := 2; i <= AbsentLookups; i++ {
				if _, err := r.Read(path, nil); !IsAbsent(err) {
					t.Fatalf("read %d: err = %v, want the remembered absence (looked at again at read %d)", i, err, AbsentLookups+1)
				}
			}
			if opens(path) != 1 {
				t.Fatalf("%d opens in %d reads of an absent file, want 1", opens(path), AbsentLookups)
			}
		}
		if b, err := r.Read(path, nil); err != nil || len(b) == 0 {
			t.Fatalf("%s: once a probe is due the file that appeared is read: %q, %v", by, b, err)
		}
		r.Close()
	}
	os.Remove(path)
	r := NewPathReader(Options{})
	defer r.Close()
	if _, err := r.Read(path, nil); !IsAbsent(err) {
		t.Fatalf("err = %v, want absent", err)
	}
	if err := os.WriteFile(path, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := r.Read(path, nil); err != nil || len(b) == 0 {
		t.Fatalf("without Options.Absent: read at once: %q, %v", b, err)
	}
}

// A file that opens but fails with EOPNOTSUPP (a pressure file of a kernel
// booted with psi=0) is remembered as absent too: no open a read.
func TestEOPNOTSUPPIsAbsent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memory.pressure")
	if err := os.WriteFile(path, []byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(1_000_000, 0)
	r := NewPathReader(Options{Absent: true, Now: func() time.Time { return clock }})
	defer r.Close()
	opens := countOpens(r)
	r.pread = func(int, []byte, int64) (int, error) { return 0, syscall.EOPNOTSUPP }
	for i := 1; i <= AbsentLookups; i++ {
		if _, err := r.Read(path, nil); !errors.Is(err, syscall.EOPNOTSUPP) {
			t.Fatalf("read %d: err = %v, want EOPNOTSUPP", i, err)
		}
	}
	if opens(path) != 1 {
		t.Fatalf("opened %d times in %d reads, want 1", opens(path), AbsentLookups)
	}
	r.Read(path, nil)
	if opens(path) != 2 {
		t.Errorf("opened %d times after %d reads, want 2 (probed again)", opens(path), AbsentLookups+1)
	}
	if n := len(openFDs(t, path)); n != 0 {
		t.Errorf("%d descriptors left open on a file whose read failed", n)
	}
}

// A kept descriptor whose read fails is dropped (closed) and the file
// opened again at once: the read still answers.
func TestFailedKeptReadReopensOnce(t *testing.T) {
	const path = "/proc/self/cgroup"
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := NewPathReader(Options{})
	defer r.Close()
	opens := countOpens(r)
	if _, err := r.Read(path, nil); err != nil {
		t.Fatal(err)
	}
	fail := true
	r.pread = func(fd int, p []byte, off int64) (int, error) {
		if fail {
			fail = false
			return 0, syscall.ENODEV // as a removed cgroup's file
		}
		return syscall.Pread(fd, p, off)
	}
	got, err := r.Read(path, nil)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Read after a failed kept read = %q, %v; want %q", got, err, want)
	}
	if opens(path) != 2 || kept(r) != 1 {
		t.Errorf("%d opens, %d kept; want 2 opens and the new descriptor kept", opens(path), kept(r))
	}
	if fds := openFDs(t, "/proc/"+strconv.Itoa(os.Getpid())+"/cgroup"); len(fds) != 1 {
		t.Errorf("descriptors open on the file: %v, want the new one only (the failed one closed)", fds)
	}
}

// A kept /proc/<pid>/stat whose process has exited reads ESRCH, and the
// path is not opened again: the pid may already be another process's.
func TestExitedProcessNotReopened(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	r := NewReader(func(pid int) string { return "/proc/" + strconv.Itoa(pid) + "/stat" }, Options{MaxKept: 8})
	defer r.Close()
	var opens int
	r.open = func(path string) (int, error) { opens++; return openFile(path) }
	b, err := r.Read(pid, nil)
	if err != nil || !bytes.HasPrefix(b, []byte(strconv.Itoa(pid)+" (sleep)")) {
		t.Fatalf("Read = %q, %v", b, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := r.Read(pid, nil); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("read of an exited process: err = %v, want ESRCH", err)
	}
	if opens != 1 || kept(r) != 0 {
		t.Errorf("%d opens, %d kept; want 1 open and the descriptor dropped", opens, kept(r))
	}
}

// MaxKept bounds the descriptors kept; Sweep closes those of keys not read
// since the last Sweep; every read still answers.
func TestMaxKeptAndSweep(t *testing.T) {
	names := []string{"stat", "statm", "status", "cmdline"}
	self := strconv.Itoa(os.Getpid())
	r := NewReader(func(name string) string { return "/proc/" + self + "/" + name }, Options{MaxKept: 2})
	defer r.Close()
	for _, n := range names {
		if b, err := r.Read(n, nil); err != nil || len(b) == 0 {
			t.Fatalf("%s: %q, %v", n, b, err)
		}
	}
	if kept(r) != 2 {
		t.Fatalf("kept %d, want MaxKept = 2", kept(r))
	}
	r.Sweep() // all were read: nothing dropped
	if kept(r) != 2 {
		t.Fatalf("kept %d after a Sweep with every key read, want 2", kept(r))
	}
	r.Read(names[0], nil)
	r.Sweep()
	if kept(r) > 1 {
		t.Errorf("kept %d after a Sweep with one key read, want at most 1", kept(r))
	}
	for _, n := range names[1:] {
		if fds := openFDs(t, "/proc/"+self+"/"+n); len(fds) != 0 {
			t.Errorf("/proc/%s/%s still open (%v) after a Sweep that did not see it read", self, n, fds)
		}
	}
}

// Close while a read hangs for real (the open of a FIFO nobody writes):
// Close returns at once, the read returns once a writer comes (with ESPIPE:
// a FIFO has no offset 0 to pread), and its descriptor is closed.
func TestCloseDuringHungRead(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "memory.stat")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	r := NewPathReader(Options{Absent: true})
	entered := make(chan struct{})
	r.open = func(path string) (int, error) {
		if path == fifo {
			close(entered)
		}
		return openFile(path)
	}
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() { b, err := r.Read(fifo, nil); done <- result{b, err} }()
	<-entered
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	waitfor.Cond(t, 30*time.Second, "Close beside a hung read", waitfor.Closed(closed))
	// A read after Close still answers, and keeps nothing.
	if b, err := r.Read("/proc/self/stat", nil); err != nil || len(b) == 0 || kept(r) != 0 {
		t.Errorf("read after Close: %q, %v, %d kept; want content and nothing kept", b, err, kept(r))
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // the hung open returns
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if res := <-done; !errors.Is(res.err, syscall.ESPIPE) {
		t.Errorf("the hung read answered %q, %v; want ESPIPE", res.b, res.err)
	}
	if fds := openFDs(t, fifo); len(fds) != 0 || kept(r) != 0 {
		t.Errorf("after the hung read ended: descriptors %v on the FIFO, %d kept; want none", fds, kept(r))
	}
}

// A kept descriptor that Close drops while a read is in flight on it stays
// open until that read ends: its number cannot go to another file, and the
// read reads its own file. The read is held inside the pread call.
func TestCloseDefersInFlightKeptRead(t *testing.T) {
	const path = "/proc/self/stat"
	r := NewPathReader(Options{})
	if _, err := r.Read(path, nil); err != nil {
		t.Fatal(err)
	}
	fd := r.files[path].d.fd
	entered, release := make(chan struct{}), make(chan struct{})
	r.pread = func(fd int, p []byte, off int64) (int, error) {
		close(entered)
		<-release
		return syscall.Pread(fd, p, off)
	}
	done := make(chan []byte, 1)
	go func() { b, _ := r.Read(path, nil); done <- b }()
	<-entered
	r.Close()
	if _, err := fcntlGetFD(fd); err != nil {
		t.Fatalf("descriptor %d closed under a read in flight: %v", fd, err)
	}
	other, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if int(other.Fd()) == fd {
		t.Fatalf("descriptor number %d given to another file while a read used it", fd)
	}
	close(release)
	b := <-done
	if !bytes.HasPrefix(b, []byte(strconv.Itoa(os.Getpid())+" (")) {
		t.Errorf("the read in flight read %q, want its own /proc/self/stat", b)
	}
	if target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil && strings.HasSuffix(target, "/stat") {
		t.Errorf("descriptor %d still open on %s after the last read on it ended", fd, target)
	}
}

func fcntlGetFD(fd int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// Reads, Sweeps and Closes on many goroutines at once: no data race (run
// with -race), and every read reads its own file even while other
// goroutines open files that could take a closed descriptor's number.
func TestConcurrentReadsSweepClose(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	for range 20 {
		r := NewReader(func(name string) string { return "/proc/" + self + "/" + name }, Options{MaxKept: 1})
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := range 4 {
			wg.Go(func() {
				for i := range 50 {
					name, want := "stat", self+" ("
					if (g+i)%2 == 1 {
						name, want = "status", "Name:"
					}
					b, err := r.Read(name, nil)
					if err != nil || !bytes.HasPrefix(b, []byte(want)) {
						errs <- fmt.Errorf("read of %s = %.20q, %v", name, b, err)
						return
					}
				}
			})
		}
		wg.Go(func() {
			for range 50 {
				r.Sweep()
				if f, err := os.Open("/proc/self/statm"); err == nil {
					f.Close()
				}
			}
		})
		wg.Go(func() { r.Close() })
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		r.Close()
	}
}
