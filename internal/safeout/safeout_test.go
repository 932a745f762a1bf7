package safeout

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pipe returns a real pipe; both ends are closed at cleanup.
func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// Nobody drains the pipe: it fills, and Write still returns at once;
// past maxQueued lines are dropped, and once a reader drains it every
// queued line arrives in order, then the count of the lost ones.
func TestStalledReaderNeverBlocks(t *testing.T) {
	r, pw := pipe(t)
	w := New(pw)
	line := strings.Repeat("x", 1000) + "\n"
	// The pipe (64 KiB) and the queue hold about 320 lines of 1 KB; 2000
	// must not block.
	const n = 2000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if m, err := fmt.Fprintf(w, "%05d %s", i, line); err != nil || m != 6+len(line) {
				t.Errorf("write %d: %d, %v", i, m, err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("writes to a stalled pipe blocked")
	}
	if w.Flush(50 * time.Millisecond) {
		t.Fatal("Flush reported an empty queue while the pipe is full")
	}
	fmt.Fprintf(w, "after the stall\n")

	var got []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 4096)
	for sc.Scan() {
		got = append(got, sc.Text())
		if sc.Text() == "after the stall" {
			break
		}
	}
	if !w.Flush(time.Minute) {
		t.Fatal("the queue did not drain once the pipe was read")
	}
	// Every line is accounted for, in order: each gap is said where it is.
	next, gaps, dropped := 0, 0, 0
	for _, l := range got[:len(got)-1] {
		var k int
		if _, err := fmt.Sscanf(l, "bridge: %d lines of bridge's own output were lost here", &k); err == nil {
			next += k
			gaps++
			dropped += k
			continue
		}
		var i int
		if _, err := fmt.Sscanf(l, "%05d", &i); err != nil || i != next {
			t.Fatalf("line %q where line %d was due", l[:min(len(l), 20)], next)
		}
		next++
	}
	if next != n || dropped == 0 {
		t.Fatalf("%d lines accounted for, want %d; %d dropped", next, n, dropped)
	}
	kept := n - dropped
	t.Logf("%d lines written, %d dropped in %d gaps while the pipe was stalled", kept, dropped, gaps)
}

// The reader went away: every write fails with EPIPE (SIGPIPE is the
// caller's to handle, see cmd/bridge), and Write still succeeds.
func TestClosedReaderCostsOnlyTheLines(t *testing.T) {
	r, pw := pipe(t)
	r.Close()
	fw := &failingWriter{f: pw}
	w := New(fw)
	for i := range 100 {
		if _, err := fmt.Fprintf(w, "line %d\n", i); err != nil {
			t.Fatal(err)
		}
	}
	if !w.Flush(time.Minute) {
		t.Fatal("failing writes did not drain")
	}
	if fw.writes != 100 {
		t.Fatalf("%d writes for 100 lines: a dead output must cost one write a line, no retries", fw.writes)
	}
}

// failingWriter checks that the pipe really fails, so the test cannot pass
// by writing somewhere.
type failingWriter struct {
	f      *os.File
	writes int // only the Writer's goroutine writes
}

func (fw *failingWriter) Write(p []byte) (int, error) {
	fw.writes++
	n, err := fw.f.Write(p)
	if !errors.Is(err, syscall.EPIPE) {
		panic(fmt.Sprintf("write to a pipe without reader: %d, %v", n, err))
	}
	return n, err
}

// A Write larger than the queue, with nothing written after it, is not
// lost silently: the output says so once the queue drains.
func TestLastDropIsSaid(t *testing.T) {
	r, pw := pipe(t)
	w := New(pw)
	fmt.Fprintf(w, "first\n")
	if !w.Flush(time.Minute) { // the writer is idle: nothing else wakes it
		t.Fatal("the queue did not drain")
	}
	if m, err := w.Write(make([]byte, maxQueued+1)); err != nil || m != maxQueued+1 {
		t.Fatalf("Write = %d, %v", m, err)
	}
	if !w.Flush(time.Minute) {
		t.Fatal("the queue did not drain")
	}
	pw.Close()
	var got []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		got = append(got, sc.Text())
	}
	want := []string{"first", "bridge: 1 lines of bridge's own output were lost here (its output could not be written)"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("output %q, want %q", got, want)
	}
}
