// Package closetest checks a collector against metrics.Closer's contract,
// through a real Sampler: Close, and Detect, beside a Collect that is stuck
// in a call (the test makes one of its reads hang for real: a FIFO in a
// fixture tree, a server that does not answer). Run under -race, it also
// reports any state Close or Detect share with Collect unguarded.
package closetest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
)

// deadline bounds every wait: long, since the machine may be loaded and
// the binary built with -race; a Close that waits for the hung call never
// returns at all.
const deadline = time.Minute

// watched tells when its collector's Collect has returned.
type watched struct {
	metrics.Collector
	returned chan struct{}
}

func (w *watched) Collect(ctx context.Context, b *metrics.Batch) error {
	defer close(w.returned)
	return w.Collector.Collect(ctx, b)
}

func (w *watched) Close() error {
	if c, ok := w.Collector.(metrics.Closer); ok {
		return c.Close()
	}
	return nil
}

// CloseWhileStuck samples c once with a short timeout, so that the Sampler
// gives up on c's Collect, which the test has made hang. While the hung
// call is in flight it runs c's Detect (if any) on another goroutine and
// closes the Sampler, which closes c: Close must return without waiting for
// the hung call. Then release ends the hang, and the Collect and Detect
// return; once they have, no descriptor may be open under root ("" skips
// this), neither after one more Collect made after Close.
//
// inFlight says whether the Collect itself was still in flight when Close
// had returned: it must be for a collector stuck in a read (a system call
// cannot be interrupted); one that honours its context and leaves the hung
// call to a goroutine of its own (NVML, HTTP) has returned by then.
func CloseWhileStuck(t *testing.T, c metrics.Collector, root string, release func()) (inFlight bool) {
	t.Helper()
	w := &watched{Collector: c, returned: make(chan struct{})}
	s := metrics.NewSampler([]metrics.Collector{w}, 20*time.Millisecond, slog.New(slog.DiscardHandler))
	s.Sample(context.Background())

	detected := make(chan struct{})
	if d, ok := c.(metrics.Detector); ok {
		go func() { defer close(detected); d.Detect(context.Background()) }()
	} else {
		close(detected)
	}
	closed := make(chan struct{})
	go func() { defer close(closed); s.Close() }()
	waitfor.Cond(t, deadline, c.Name()+": Sampler.Close beside a call stuck in Collect", waitfor.Closed(closed))
	inFlight = !waitfor.Closed(w.returned)()

	release()
	waitfor.Cond(t, deadline, c.Name()+": the stuck Collect returning once released", waitfor.Closed(w.returned))
	waitfor.Cond(t, deadline, c.Name()+": Detect returning", waitfor.Closed(detected))
	noneOpen(t, root)
	if _, err := collecttest.Collect(context.Background(), c); err != nil {
		t.Logf("%s: Collect after Close: %v", c.Name(), err)
	}
	noneOpen(t, root)
	return inFlight
}

// CloseWhileReadHangs is CloseWhileStuck for a collector whose read of a
// file under root hangs: its Collect must still be in flight when Close
// returns, else the hang the test set up did not happen.
func CloseWhileReadHangs(t *testing.T, c metrics.Collector, root string, release func()) {
	t.Helper()
	if !CloseWhileStuck(t, c, root, release) {
		t.Fatalf("%s: Collect returned before its read was released: the hang the test set up did not happen", c.Name())
	}
}

// Race runs Collects on one goroutine while another runs Detect and Close
// over and over until they end, with no synchronisation between them, on a
// collector that reads real kernel files (so that it keeps descriptors):
// under -race any state they share unguarded is reported. The calls'
// errors do not matter here, only that every call returns.
func Race(t *testing.T, c metrics.Collector) {
	t.Helper()
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for range 100 {
			collecttest.Collect(context.Background(), c)
		}
	}()
	for !waitfor.Closed(collected)() {
		if d, ok := c.(metrics.Detector); ok {
			d.Detect(context.Background())
		}
		if cl, ok := c.(metrics.Closer); ok {
			cl.Close()
		}
	}
}

// noneOpen waits until no descriptor of this process is open on a file
// under root: the last read on a descriptor closes it, just after it ends.
func noneOpen(t *testing.T, root string) {
	t.Helper()
	if root == "" {
		return
	}
	for end := time.Now().Add(deadline); ; time.Sleep(10 * time.Millisecond) {
		open := OpenUnder(t, root)
		if len(open) == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("descriptors left open under %s: %v", root, open)
		}
	}
}

// OpenUnder lists this process's descriptors open on files under root.
func OpenUnder(t testing.TB, root string) []string {
	t.Helper()
	root, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && strings.HasPrefix(target, root+"/") {
			out = append(out, fmt.Sprintf("%s -> %s", e.Name(), target))
		}
	}
	return out
}

// Fifo replaces the file at path with a FIFO that nobody writes: opening it
// for reading hangs in the kernel. The returned release lets the opens in
// flight return (a pread of a FIFO then fails with ESPIPE) and puts body
// back as a regular file, so that later reads answer.
func Fifo(t testing.TB, path, body string) (release func()) {
	t.Helper()
	fifo := path + ".fifo"
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fifo, path); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		plain := path + ".plain"
		if err := os.WriteFile(plain, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		// A writer's open ends every hung open for reading. Non-blocking:
		// with no reader waiting it fails (ENXIO), and there is nothing to
		// end.
		w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err := os.Rename(plain, path); err != nil {
			t.Fatal(err)
		}
		if err == nil {
			w.Close()
		}
	}
}
