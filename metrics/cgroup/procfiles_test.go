package cgroup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/internal/kfile"
)

// The cgroup and mountinfo files of this process, parsed here, are what
// procfs makes of them.
func TestProcFilesAsProcfs(t *testing.T) {
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self, err := fs.Proc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	want, err := self.Cgroups()
	if err != nil {
		t.Fatal(err)
	}
	got, err := readCgroups(context.Background(), "/proc", os.Getpid())
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("cgroups %+v, %v; procfs: %+v", got, err, want)
	}
	wantM, err := fs.GetProcMounts(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	gotM, err := readMounts(context.Background(), "/proc", os.Getpid())
	if err != nil || !reflect.DeepEqual(gotM, wantM) {
		t.Errorf("mounts differ from procfs's (%v):\n%+v\n%+v", err, gotM, wantM)
	}
}

func TestParseProcFiles(t *testing.T) {
	cgs, err := parseCgroups("12:memory:/kubepods/pod1\n1:name=systemd:/x\n0::/\n")
	want := []procfs.Cgroup{
		{HierarchyID: 12, Controllers: []string{"memory"}, Path: "/kubepods/pod1"},
		{HierarchyID: 1, Controllers: []string{"name=systemd"}, Path: "/x"},
		{HierarchyID: 0, Path: "/"},
	}
	if err != nil || !reflect.DeepEqual(cgs, want) {
		t.Errorf("parseCgroups: %+v, %v", cgs, err)
	}
	for _, bad := range []string{"12:memory\n", "x::/\n"} {
		if _, err := parseCgroups(bad); err == nil {
			t.Errorf("parseCgroups(%q) accepted", bad)
		}
	}
	ms, err := parseMountInfo("30 25 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n")
	if err != nil || len(ms) != 1 || ms[0].FSType != "cgroup2" || ms[0].MountPoint != "/sys/fs/cgroup" || ms[0].Root != "/" ||
		ms[0].OptionalFields["shared"] != "4" || ms[0].SuperOptions["nsdelegate"] != "" {
		t.Errorf("parseMountInfo: %+v, %v", ms, err)
	}
	for _, bad := range []string{"30 25 0:26 / /x rw\n", "30 25 0:26 / /x rw - cgroup2\n", "a 25 0:26 / /x rw - cgroup2 c rw\n"} {
		if _, err := parseMountInfo(bad); err == nil {
			t.Errorf("parseMountInfo(%q) accepted", bad)
		}
	}
}

// A mountinfo that never ends (/dev/zero in its place) is refused, not read
// without end.
func TestMountInfoBounded(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "7")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "mountinfo")); err != nil {
		t.Fatal(err)
	}
	if _, err := readMounts(context.Background(), root, 7); !errors.Is(err, kfile.ErrNotRegular) {
		t.Errorf("mountinfo behind /dev/zero: %v, want not a regular file", err)
	}
}
