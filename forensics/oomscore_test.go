package forensics

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSetOOMScoreAdjReal changes a real child's oom_score_adj and reads it
// back: raising it needs no privilege; lowering it to -1000 must succeed
// with CAP_SYS_RESOURCE and, without it (root in a container usually lacks
// it), fail with ErrOOMScorePermission and leave the value alone.
func TestSetOOMScoreAdjReal(t *testing.T) {
	if _, err := os.Stat("/proc/self/oom_score_adj"); err != nil {
		t.Skipf("no /proc/<pid>/oom_score_adj here: %v", err)
	}
	privileged := hasCapSysResource(t)
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a child: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	want := func(v int) {
		t.Helper()
		got, err := readOOMScoreAdj("/proc", pid)
		if err != nil {
			t.Fatal(err)
		}
		if got != v {
			t.Fatalf("oom_score_adj = %d, want %d", got, v)
		}
	}
	before, err := readOOMScoreAdj("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := SetOOMScoreAdj("/proc", pid, 500); err != nil {
		t.Fatalf("raising to 500: %v", err)
	}
	want(500)
	if err := SetOOMScoreAdj("/proc", pid, before); err != nil {
		t.Fatalf("back to %d: %v", before, err)
	}
	want(before)

	err = SetOOMScoreAdj("/proc", pid, OOMScoreAdjMin)
	if !privileged {
		if !errors.Is(err, ErrOOMScorePermission) {
			t.Fatalf("SetOOMScoreAdj(-1000) without CAP_SYS_RESOURCE = %v, want ErrOOMScorePermission", err)
		}
		want(before)
		t.Logf("no CAP_SYS_RESOURCE (euid %d), refused as expected: %v", os.Geteuid(), err)
		return
	}
	if err != nil {
		t.Fatalf("SetOOMScoreAdj(-1000) with CAP_SYS_RESOURCE: %v", err)
	}
	want(OOMScoreAdjMin)
}

// hasCapSysResource reads CAP_SYS_RESOURCE (bit 24) from CapEff.
func hasCapSysResource(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("cannot read /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("CapEff %q: %v", v, err)
			}
			return caps&(1<<24) != 0
		}
	}
	t.Skip("no CapEff line in /proc/self/status")
	return false
}

func TestSetOOMScoreAdjFixture(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "77")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oom_score_adj"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := SetOOMScoreAdj(root, 77, -500); err != nil {
		t.Fatal(err)
	}
	if got, err := readOOMScoreAdj(root, 77); err != nil || got != -500 {
		t.Fatalf("oom_score_adj = %d, %v; want -500", got, err)
	}

	for _, v := range []int{-1001, 1001} {
		if err := SetOOMScoreAdj(root, 77, v); err == nil {
			t.Errorf("SetOOMScoreAdj(%d) accepted an out-of-range value", v)
		}
	}
	// A missing process is an error naming the path, and no file is created.
	err := SetOOMScoreAdj(root, 78, -1000)
	missing := filepath.Join(root, "78", "oom_score_adj")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing pid: %v, want ErrNotExist", err)
	}
	if err != nil && !strings.Contains(err.Error(), missing) {
		t.Errorf("error %q does not name %s", err, missing)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("SetOOMScoreAdj created %s", missing)
	}
}

// readOOMScoreAdj reads <procRoot>/<pid>/oom_score_adj for the tests.
func readOOMScoreAdj(procRoot string, pid int) (int, error) {
	path := filepath.Join(procRoot, strconv.Itoa(pid), "oom_score_adj")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not an integer: %w", path, strings.TrimSpace(string(b)), err)
	}
	return v, nil
}
