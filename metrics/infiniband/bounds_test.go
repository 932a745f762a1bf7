package infiniband

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bridge-dev/bridge/internal/kfile"
)

func replace(t *testing.T, root, rel string, make func(path string) error) {
	t.Helper()
	p := filepath.Join(root, "class/infiniband", rel)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := make(p); err != nil {
		t.Fatal(err)
	}
}

func fifo(path string) error    { return syscall.Mkfifo(path, 0o600) }
func devZero(path string) error { return os.Symlink("/dev/zero", path) }

// A device's fw_ver or a port's state that is no regular file of one
// value (a FIFO nobody writes, /dev/zero) is answered at once: the
// device's facts are unknown, naming the file, and its counters are still
// read.
func TestFactsBounded(t *testing.T) {
	for _, rel := range []string{"mlx5_0/fw_ver", "mlx5_0/ports/1/state"} {
		for _, mk := range []func(string) error{fifo, devZero} {
			root := t.TempDir()
			write(t, root, device(files{}, "mlx5_0", "200 Gb/sec (4X HDR)", "InfiniBand", 1, nil))
			replace(t, root, rel, mk)
			c, err := New(Options{SysRoot: root})
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			d := c.Detect(context.Background())
			ports, _ := d["ports"].([]map[string]any)
			if len(ports) != 1 || !strings.Contains(ports[0]["facts"].(string), filepath.Base(rel)) ||
				!strings.Contains(ports[0]["facts"].(string), kfile.ErrNotRegular.Error()) {
				t.Errorf("%s as a FIFO or /dev/zero: detected %v; want the port, its facts unknown naming the file", rel, d)
			}
			c.Close()
		}
	}
}

// While sampling, a counter turned into /dev/zero is a failed read of one
// buffer of the cap.
func TestCounterDevZeroWhileSampling(t *testing.T) {
	root := t.TempDir()
	write(t, root, device(files{}, "mlx5_0", "200 Gb/sec (4X HDR)", "InfiniBand", 1, nil))
	c, err := New(Options{SysRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	replace(t, root, "mlx5_0/ports/1/counters/port_xmit_data", devZero)
	if _, err := collect(t, c); !errors.Is(err, kfile.ErrNotRegular) || !strings.Contains(err.Error(), "port_xmit_data") {
		t.Errorf("Collect over /dev/zero: %v; want the counter named, not a regular file", err)
	}
	if cap(c.buf) > kfile.Value+1 {
		t.Errorf("the read buffer grew to %d bytes, past the cap", cap(c.buf))
	}
}
