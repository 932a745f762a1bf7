// Command workload is the cgroup v2 guest's load generator: a small static
// program (CGO_ENABLED=0) that the guest's /init runs inside a cgroup.
//
//	workload alloc STEP_MIB MAX_MIB HOLD   touch memory in steps up to MAX_MIB, then sleep HOLD
//	workload burn K DURATION               K threads busy for DURATION
//	workload read PATH[@OFFSET_MIB] MIB ANON_MIB HOLD
//	                                       read MIB of PATH from OFFSET_MIB (page cache), touch
//	                                       ANON_MIB, sleep HOLD
//	workload fork N HOLD                   start N children at once, kill them, report how many
//	                                       forks failed, then sleep HOLD
//	workload cgns PROG ARGS...             exec PROG in a new cgroup and mount namespace with a
//	                                       fresh cgroup2 at /sys/fs/cgroup (/proc/self/cgroup reads 0::/)
//
//	workload nocap PROG ARGS...            exec PROG without CAP_SYS_RESOURCE (dropped from the
//	                                       bounding set), as in Docker's default set: it cannot
//	                                       lower its oom_score_adj
//
// cgns stands in for `unshare -C`, which busybox lacks.
//
// A file named by $WORKLOAD_READY is created once the load is in place, so
// the guest can sample a steady state instead of guessing a delay.
package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

const mib = 1 << 20

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch a := os.Args[2:]; os.Args[1] {
	case "alloc":
		err = alloc(atoi(arg(a, 0)), atoi(arg(a, 1)), dur(arg(a, 2)))
	case "burn":
		err = burn(atoi(arg(a, 0)), dur(arg(a, 1)))
	case "read":
		err = readCache(arg(a, 0), atoi(arg(a, 1)), atoi(arg(a, 2)), dur(arg(a, 3)))
	case "fork":
		err = fork(atoi(arg(a, 0)), arg(a, 1))
	case "cgns":
		err = cgns(a)
	case "nocap":
		err = nocap(a)
	case "sleep":
		time.Sleep(dur(arg(a, 0)))
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: workload alloc|burn|read|fork|sleep ARGS (see the package comment)")
	os.Exit(2)
}

func arg(a []string, i int) string {
	if i >= len(a) {
		usage()
	}
	return a[i]
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "workload: %q is not a number\n", s)
		os.Exit(2)
	}
	return n
}

func dur(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "workload: %q is not a duration\n", s)
		os.Exit(2)
	}
	return d
}

func ready() {
	if p := os.Getenv("WORKLOAD_READY"); p != "" {
		_ = os.WriteFile(p, nil, 0o644)
	}
}

// touch allocates n MiB and writes every page, so it is charged at once.
func touch(n int) []byte {
	b := make([]byte, n*mib)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return b
}

var keep [][]byte

func alloc(step, max int, hold time.Duration) error {
	for n := step; n <= max; n += step {
		keep = append(keep, touch(step))
		fmt.Fprintf(os.Stderr, "allocated %d MiB\n", n)
	}
	ready()
	time.Sleep(hold)
	return nil
}

func burn(k int, d time.Duration) error {
	runtime.GOMAXPROCS(k + 1)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < k; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			x := 0
			for time.Since(start) < d {
				for j := 0; j < 1e5; j++ {
					x += j
				}
			}
			_ = x
		}()
	}
	ready()
	wg.Wait()
	return nil
}

func readCache(path string, n, anon int, hold time.Duration) error {
	// Distinct regions for distinct cases: pages already cached (and
	// charged to an earlier case's cgroup) would not be charged again.
	path, off, _ := strings.Cut(path, "@")
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if off != "" {
		if _, err := f.Seek(int64(atoi(off))*mib, io.SeekStart); err != nil {
			return fmt.Errorf("seeking %s to %s MiB: %w", path, off, err)
		}
	}
	got, err := io.Copy(io.Discard, io.LimitReader(f, int64(n)*mib))
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	keep = append(keep, touch(anon))
	fmt.Fprintf(os.Stderr, "read %d MiB of %s, %d MiB anonymous\n", got/mib, path, anon)
	ready()
	time.Sleep(hold)
	return nil
}

func fork(n int, hold string) error {
	var cmds []*exec.Cmd
	failed := 0
	for i := 0; i < n; i++ {
		c := exec.Command("sleep", "30")
		if err := c.Start(); err != nil {
			failed++
			continue
		}
		cmds = append(cmds, c)
	}
	// The cgroup sits at pids.max only for the burst: bridge shares it and
	// its Go runtime cannot survive failing to create a thread.
	for _, c := range cmds {
		_ = c.Process.Kill()
	}
	for _, c := range cmds {
		_ = c.Wait()
	}
	fmt.Printf("forks ok=%d failed=%d\n", len(cmds), failed)
	ready()
	time.Sleep(dur(hold))
	return nil
}

func cgns(argv []string) error {
	if len(argv) == 0 {
		usage()
	}
	// Namespaces are unshared per thread: unshare and exec on the same one.
	runtime.LockOSThread()
	if err := syscall.Unshare(syscall.CLONE_NEWCGROUP | syscall.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := syscall.Unmount("/sys/fs/cgroup", syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("unmounting the outer cgroup2: %w", err)
	}
	if err := syscall.Mount("none", "/sys/fs/cgroup", "cgroup2", 0, ""); err != nil {
		return fmt.Errorf("mounting cgroup2: %w", err)
	}
	prog, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	return syscall.Exec(prog, argv, os.Environ())
}

func nocap(argv []string) error {
	if len(argv) == 0 {
		usage()
	}
	// The bounding set is per thread, like namespaces: drop and exec on the
	// same one. Without the lock the exec could run on another thread that
	// still has the capability, and bridge would keep it.
	runtime.LockOSThread()
	const prCapbsetDrop, capSysResource = 24, 24
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prCapbsetDrop, capSysResource, 0); e != 0 {
		return fmt.Errorf("dropping CAP_SYS_RESOURCE from the bounding set: %w", e)
	}
	if err := checkNoCap(capSysResource); err != nil {
		return err
	}
	prog, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	// Root's capabilities are recomputed from the bounding set at exec.
	return syscall.Exec(prog, argv, os.Environ())
}

// checkNoCap confirms that the calling thread's bounding set lacks capability
// bit: the case's premise, checked rather than assumed.
func checkNoCap(bit uint) error {
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		return err
	}
	p, err := fs.Proc(syscall.Gettid()) // the thread's own status, not the leader's
	if err != nil {
		return err
	}
	st, err := p.NewStatus()
	if err != nil {
		return err
	}
	if st.CapBnd&(1<<bit) != 0 {
		return fmt.Errorf("capability %d is still in this thread's bounding set (%x)", bit, st.CapBnd)
	}
	return nil
}
