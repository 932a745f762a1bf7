package kfile

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The kernel's log gives the records logged after the open, and only
// those: a record written to /dev/kmsg before the open is not read, one
// after it is, once.
func TestLogReadsRecordsAfterItsOpen(t *testing.T) {
	const dev = "/dev/kmsg"
	mark := fmt.Sprintf("bridge-kfile-test-%08x", rand.Uint32())
	write := func(what string) {
		t.Helper()
		if err := os.WriteFile(dev, []byte("<6>"+mark+" "+what+"\n"), 0); err != nil {
			t.Skipf("this test writes records to the kernel's log and needs %s writable (root): %v", dev, err)
		}
	}
	write("before")
	l, err := OpenLog(context.Background(), dev)
	if err != nil {
		t.Skipf("this test reads the kernel's log and needs %s readable: %v", dev, err)
	}
	defer l.Close()
	write("after")
	mine := func(b []byte) bool { return strings.Contains(string(b), mark) }
	recs, r, err := l.Records(context.Background(), 100000, mine)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || !strings.Contains(recs[0], mark+" after") || r.Read == 0 {
		t.Fatalf("records %q (%+v), want the one written after the open", recs, r)
	}
	if recs, _, err := l.Records(context.Background(), 100000, mine); err != nil || len(recs) != 0 {
		t.Fatalf("a second read gave %q, %v: want nothing new", recs, err)
	}
	// At most max records are read a call; the rest wait for the next.
	for i := range 3 {
		write(fmt.Sprint("burst ", i))
	}
	recs, r, err = l.Records(context.Background(), 2, mine)
	if err != nil || !r.More || r.Read != 2 {
		t.Fatalf("with max 2: %q, %+v, %v", recs, r, err)
	}
	l.Close()
	if _, _, err := l.Records(context.Background(), 10, mine); err == nil {
		t.Fatal("Records after Close succeeded")
	}
	if err := l.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// A regular file in the log's place holds no live log: refused, by name.
func TestLogRefusesARegularFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(p, []byte("6,1,1,-;Killed process 1 (x)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenLog(context.Background(), p); !errors.Is(err, ErrNotLog) || !strings.Contains(err.Error(), p+": not the kernel's log device (a regular file)") {
		t.Fatalf("OpenLog of a regular file: %v, want ErrNotLog naming it", err)
	}
	if _, err := OpenLog(context.Background(), filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenLog of a missing file: %v", err)
	}
}
