// Package cgrouptest creates real cgroup v1 children of the test process's
// own cgroups (a memory limit and a CFS quota) for tests that check what the
// kernel reports, and removes them afterwards.
package cgrouptest

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics/cgroup"
)

// Group is a set of sibling cgroups, one per v1 hierarchy, that a process
// joins together.
type Group struct {
	Memory  string // memory cgroup directory, with memory.limit_in_bytes set
	CPU     string // cpu cgroup directory, with the CFS quota set
	CPUAcct string // cpuacct cgroup directory (== CPU when co-mounted)
}

// Limits of a Group.
type Limits struct {
	MemoryBytes int64 // memory.limit_in_bytes
	QuotaUs     int64 // cpu.cfs_quota_us
	PeriodUs    int64 // cpu.cfs_period_us
}

// NewV1 creates the group under the test process's own v1 memory, cpu and
// cpuacct cgroups, or skips the test saying why it cannot (not v1, not
// root, read-only cgroupfs). Removal is registered with t.Cleanup: processes
// still inside are moved to the parent first.
func NewV1(t testing.TB, lim Limits) *Group {
	t.Helper()
	l, err := cgroup.FindLayout(cgroup.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Skipf("real-cgroup test: no cgroup of our own: %v", err)
	}
	if mode := l.Mode(); mode != cgroup.ModeV1 && mode != cgroup.ModeHybrid {
		t.Skipf("real-cgroup test needs cgroup v1 memory and cpu hierarchies; this host is %s", mode)
	}
	own := l.Paths()
	parents := map[string]string{"memory": own["memory"], "cpu": own["cpu"], "cpuacct": own["cpuacct"]}
	for ctl, marker := range map[string]string{"memory": "memory.limit_in_bytes", "cpu": "cpu.cfs_quota_us", "cpuacct": "cpuacct.usage"} {
		if parents[ctl] == "" || !exists(filepath.Join(parents[ctl], marker)) {
			t.Skipf("real-cgroup test needs a v1 %s hierarchy; own %s cgroup %q has no %s", ctl, ctl, parents[ctl], marker)
		}
	}
	name := fmt.Sprintf("bridge-test-%d-%08x", os.Getpid(), rand.Uint32())
	g := &Group{}
	made := map[string]bool{}
	mk := func(ctl string) string {
		dir := filepath.Join(parents[ctl], name)
		if made[dir] {
			return dir // cpu and cpuacct co-mounted
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
				t.Skipf("real-cgroup test: cgroupfs not writable: %v", err)
			}
			t.Fatalf("creating cgroup: %v", err)
		}
		made[dir] = true
		t.Cleanup(func() { remove(t, dir) })
		return dir
	}
	g.Memory, g.CPU, g.CPUAcct = mk("memory"), mk("cpu"), mk("cpuacct")
	write(t, filepath.Join(g.Memory, "memory.limit_in_bytes"), lim.MemoryBytes)
	// Zero values leave the kernel's defaults (no quota).
	if lim.PeriodUs > 0 {
		write(t, filepath.Join(g.CPU, "cpu.cfs_period_us"), lim.PeriodUs)
	}
	if lim.QuotaUs != 0 {
		write(t, filepath.Join(g.CPU, "cpu.cfs_quota_us"), lim.QuotaUs)
	}
	return g
}

// Sub creates the cgroup name under parent (a group's directory), removed
// at cleanup before its parent.
func Sub(t testing.TB, parent, name string) string {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("creating cgroup: %v", err)
	}
	t.Cleanup(func() { remove(t, dir) })
	return dir
}

// Dirs returns the distinct cgroup directories of the group.
func (g *Group) Dirs() []string {
	out := []string{g.Memory, g.CPU}
	if g.CPUAcct != g.CPU {
		out = append(out, g.CPUAcct)
	}
	return out
}

// Add moves pid into every cgroup of the group.
func (g *Group) Add(pid int) error {
	for _, d := range g.Dirs() {
		p := filepath.Join(d, "cgroup.procs")
		if err := os.WriteFile(p, []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("moving %d into %s: %w", pid, p, err)
		}
	}
	return nil
}

// ShellEnter is a shell snippet that moves the running shell ($$) into the
// group; an exec that follows runs inside it.
func (g *Group) ShellEnter() string {
	var b strings.Builder
	for _, d := range g.Dirs() {
		fmt.Fprintf(&b, "echo $$ > %s && ", filepath.Join(d, "cgroup.procs"))
	}
	return b.String()
}

// ShellEnterRootCPU is ShellEnter with the group's cpu and cpuacct cgroups
// replaced by the roots of their hierarchies: the shell joins the group's
// memory cgroup and the host's root cpu cgroups, as a process on a v1 host
// outside any container is placed (cpu:/).
func (g *Group) ShellEnterRootCPU() string {
	var b strings.Builder
	for _, d := range []string{g.Memory, RootOf(g.CPU), RootOf(g.CPUAcct)} {
		fmt.Fprintf(&b, "echo $$ > %s && ", filepath.Join(d, "cgroup.procs"))
	}
	return b.String()
}

// RootOf is the root cgroup of dir's v1 hierarchy: the nearest directory
// up from dir that holds cgroup.sane_behavior, which the kernel shows only
// there.
func RootOf(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if exists(filepath.Join(d, "cgroup.sane_behavior")) || d == filepath.Dir(d) {
			return d
		}
	}
}

func write(t testing.TB, path string, v int64) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strconv.FormatInt(v, 10)), 0); err != nil {
		t.Fatalf("setting %s: %v", path, err)
	}
}

// remove moves any process left in dir to its parent and removes dir. The
// kernel refuses rmdir while a task that just exited is still being torn
// down, hence the retries.
func remove(t testing.TB, dir string) {
	parent := filepath.Join(filepath.Dir(dir), "cgroup.procs")
	var err error
	for i := 0; i < 50; i++ {
		if b, rerr := os.ReadFile(filepath.Join(dir, "cgroup.procs")); rerr == nil {
			for _, pid := range strings.Fields(string(b)) {
				_ = os.WriteFile(parent, []byte(pid), 0) // best effort: it may have exited
			}
		}
		if err = syscall.Rmdir(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("removing cgroup %s: %v", dir, err)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
