package kfile

import (
	"os"
	"path/filepath"
	"testing"
)

// A sample's read of a kept procfs file: one pread.
func BenchmarkReadKept(b *testing.B) {
	r := NewPathReader(Options{})
	defer r.Close()
	var buf []byte
	var err error
	for b.Loop() {
		if buf, err = r.Read("/proc/loadavg", buf); err != nil {
			b.Fatal(err)
		}
	}
	if kept(r) != 1 {
		b.Fatalf("%d descriptors kept, want 1", kept(r))
	}
}

// A sample's read of a file not kept (a sysfs attribute, a fixture):
// open, pread, close.
func BenchmarkReadFresh(b *testing.B) {
	p := filepath.Join(b.TempDir(), "energy_uj")
	if err := os.WriteFile(p, []byte("123456789\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	r := NewPathReader(Options{Size: 64})
	defer r.Close()
	var buf []byte
	var err error
	for b.Loop() {
		if buf, err = r.Read(p, buf); err != nil {
			b.Fatal(err)
		}
	}
}
