package amdgpu

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/internal/kfile"
)

func replace(t *testing.T, root, rel string, make func(path string) error) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := make(p); err != nil {
		t.Fatal(err)
	}
}

func fifo(path string) error    { return syscall.Mkfifo(path, 0o600) }
func devZero(path string) error { return os.Symlink("/dev/zero", path) }

// A unique_id that is no regular file of one value (a FIFO nobody writes,
// /dev/zero) is answered at once: the GPU is found, its id unknown, and
// one WARN names the file.
func TestUniqueIDBounded(t *testing.T) {
	for _, mk := range []func(string) error{fifo, devZero} {
		root := t.TempDir()
		write(t, root, amdCard(files{}, 0, 128, "0000:03:00.0", "2ea8c1e4a2b6f0d3"))
		replace(t, root, "sys/class/drm/card0/device/unique_id", mk)
		var logs syncbuf.Buffer
		c, err := newIn(t, root, Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.gpus) != 1 || c.gpus[0].card.uniqueID != "" {
			t.Errorf("GPUs %+v: want the card, its unique_id unknown", c.gpus)
		}
		if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "unique_id") {
			t.Errorf("no WARN naming unique_id:\n%s", logs.String())
		}
	}
}

// While sampling, a GPU file turned into /dev/zero is a failed read of one
// buffer of the cap.
func TestBusyDevZeroWhileSampling(t *testing.T) {
	root := t.TempDir()
	write(t, root, amdCard(files{}, 0, 128, "0000:03:00.0", ""))
	c, err := newIn(t, root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	replace(t, root, "sys/class/drm/card0/device/gpu_busy_percent", devZero)
	if _, err := collect(t, c); !errors.Is(err, kfile.ErrNotRegular) || !strings.Contains(err.Error(), "gpu_busy_percent") {
		t.Errorf("Collect over /dev/zero: %v; want the file named, not a regular file", err)
	}
	if cap(c.buf) > kfile.Value+1 {
		t.Errorf("the read buffer grew to %d bytes, past the cap", cap(c.buf))
	}
}
