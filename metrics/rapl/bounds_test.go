package rapl

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
)

// replace puts what make makes (a FIFO, a link to /dev/zero) in place of
// the zone's file.
func replace(t *testing.T, root, rel string, make func(path string) error) {
	t.Helper()
	p := filepath.Join(root, "class/powercap", rel)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := make(p); err != nil {
		t.Fatal(err)
	}
}

func fifo(path string) error    { return syscall.Mkfifo(path, 0o600) }
func devZero(path string) error { return os.Symlink("/dev/zero", path) }

// A name or a range that is no regular file of one value (a FIFO nobody
// writes, /dev/zero) leaves the collector off at once, saying which file,
// at warn; an energy_uj behind /dev/zero too (a FIFO there waits as a
// wedged driver would: the Build deadline bounds it).
func TestZoneFilesBounded(t *testing.T) {
	for _, tc := range []struct {
		file string
		make func(string) error
	}{
		{"name", fifo}, {"name", devZero},
		{"max_energy_range_uj", fifo}, {"max_energy_range_uj", devZero},
		{"energy_uj", devZero},
	} {
		root := tree(t, zoneFiles("intel-rapl:0", "package-0", 5, nil))
		replace(t, root, "intel-rapl:0/"+tc.file, tc.make)
		_, err := New(Options{SysRoot: root})
		if !errors.Is(err, errUnavailable) || !errors.Is(err, kfile.ErrNotRegular) || !strings.Contains(err.Error(), tc.file) {
			t.Errorf("%s as a FIFO or /dev/zero: %v; want unavailable, naming it as no regular file", tc.file, err)
		}
		if off := metrics.Absent(err); off.Level != slog.LevelWarn {
			t.Errorf("%s: logged at %v, want warn", tc.file, off.Level)
		}
	}
}

// While sampling, energy_uj turned into /dev/zero is a failed read of one
// buffer of the cap, not an endless one.
func TestEnergyDevZeroWhileSampling(t *testing.T) {
	root := tree(t, zoneFiles("intel-rapl:0", "package-0", 5, nil))
	c, err := New(Options{SysRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	replace(t, root, "intel-rapl:0/energy_uj", devZero)
	if _, err := values(t, c); !errors.Is(err, kfile.ErrNotRegular) || !errors.Is(err, kfile.ErrTooLarge) {
		t.Errorf("Collect over /dev/zero: %v; want too large, not a regular file", err)
	}
	if cap(c.buf) > kfile.Value+1 {
		t.Errorf("the read buffer grew to %d bytes, past the cap", cap(c.buf))
	}
}
