package node

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	kfileio "github.com/bridge-dev/bridge/metrics/internal/kfile"
)

// A kept file found absent is not looked for again until 64 reads or 30 s
// have passed, whichever comes first; then a file that appeared is read.
func TestKfileAbsentReprobe(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	now = func() time.Time { return clock }
	defer func() { now = time.Now }()
	path := filepath.Join(t.TempDir(), "cpu")
	for _, by := range []string{"reads", "time"} {
		os.Remove(path)
		f := newKfile(path, true)
		defer f.close()
		if _, err := f.read(nil); !isAbsent(err) {
			t.Fatalf("%s: missing file: err = %v, want absent", by, err)
		}
		if err := os.WriteFile(path, []byte("some avg10=1.00 avg60=0.00 avg300=0.00 total=1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if by == "time" {
			clock = clock.Add(kfileio.AbsentFor)
		} else {
			// Reads 2..64: still answered as absent, without looking.
			for i := 2; i <= 64; i++ {
				if _, err := f.read(nil); !isAbsent(err) {
					t.Fatalf("read %d: err = %v, want the remembered absence (the file is looked at only at read 65)", i, err)
				}
			}
		}
		b, err := f.read(nil)
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: once a probe is due the file that appeared is read: %q, %v", by, b, err)
		}
	}
	// A file that is not kept (a fixture tree) is looked at every time.
	os.Remove(path)
	f := newKfile(path, false)
	if _, err := f.read(nil); !isAbsent(err) {
		t.Fatalf("err = %v, want absent", err)
	}
	if err := os.WriteFile(path, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := f.read(nil); err != nil || len(b) == 0 {
		t.Fatalf("not kept: read at once: %q, %v", b, err)
	}
}
