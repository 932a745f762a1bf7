package kfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadUserFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.yaml")
	if err := os.WriteFile(small, []byte("interval: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, 2049), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want error // nil: read
	}{
		{small, nil},
		{link, nil},
		{"/proc/self/status", nil}, // regular, size 0: read within the bound
		{big, ErrTooLarge},
		{fifo, ErrNotRegular},
		{dir, ErrNotRegular},
		{"/dev/zero", ErrNotRegular},
		{"/dev/null", ErrNotRegular},
		{filepath.Join(dir, "missing"), os.ErrNotExist},
	} {
		done := make(chan struct{})
		var b []byte
		var err error
		go func() { defer close(done); b, err = ReadUserFile(tc.path, 2048) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("Read(%s) did not return", tc.path)
		}
		if tc.want == nil {
			if err != nil || len(b) == 0 {
				t.Errorf("Read(%s) = %d bytes, %v", tc.path, len(b), err)
			}
			continue
		}
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("Read(%s): %v, want %v naming the path", tc.path, err, tc.want)
		}
	}
}

// A file that reports no size (procfs) and holds more than the bound.
func TestReadUserFileBoundsUnsized(t *testing.T) {
	if _, err := ReadUserFile("/proc/self/status", 16); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
}
