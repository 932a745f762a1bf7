package spool

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/metrics"
)

// failingFile is the spool's file with a switch: while full, a write stores
// half of what it was given and fails with ENOSPC, like a filling disk.
type failingFile struct {
	*os.File
	mu      sync.Mutex
	full    bool
	largest int // the longest write that succeeded
}

func (f *failingFile) setFull(v bool) { f.mu.Lock(); f.full = v; f.mu.Unlock() }

func (f *failingFile) Write(b []byte) (int, error) {
	f.mu.Lock()
	full := f.full
	f.mu.Unlock()
	if full {
		n, _ := f.File.Write(b[:len(b)/2])
		return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	f.mu.Lock()
	f.largest = max(f.largest, len(b))
	f.mu.Unlock()
	return f.File.Write(b)
}

func openFailing(t *testing.T, opt Options) (*Spool, *failingFile, *syncbuf.Buffer) {
	t.Helper()
	var ff *failingFile
	s, logs := openWrapped(t, opt, func(f *os.File, _ int64) file { ff = &failingFile{File: f}; return ff })
	return s, ff, logs
}

// openWrapped opens a spool in a temp dir whose file goes through wrap (a
// file that fails on demand; size is the file's at open), retrying at every
// write (the tests need no clock). Its log, at debug, is returned.
func openWrapped(t *testing.T, opt Options, wrap func(f *os.File, size int64) file) (*Spool, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	opt.Logger = logTo(logs)
	s, err := OpenWith(filepath.Join(t.TempDir(), "s.jsonl"), opt)
	if err != nil {
		t.Fatal(err)
	}
	s.w.f = wrap(s.w.f.(*os.File), s.w.size)
	s.w.gap = 0
	return s, logs
}

// Disk full: no write fails a sample or an ack; samples reach the sink from
// memory; one message when writing fails, one when it works again; the file
// then holds every record, in order, on whole lines.
func TestDiskFullThenRecovers(t *testing.T) {
	s, ff, logs := openFailing(t, Options{})
	s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "r"}})
	s.Track("mlflow", "r")
	s.Append(sample(0, 0))
	settle(s)
	ff.setFull(true)
	for i := int64(1); i < 20; i++ {
		if err := s.Append(sample(i, float64(i))); err != nil {
			t.Fatalf("append %d while full: %v", i, err)
		}
		settle(s) // each write retries
		if i%5 == 0 {
			if err := s.Ack("mlflow", "r", i-3); err != nil {
				t.Fatalf("ack while full: %v", err)
			}
		}
	}
	if got := s.Pending("mlflow", "r", 100); len(got) != 7 || got[0].Seq != 13 || got[6].Seq != 19 {
		t.Fatalf("pending while full = %v, want 13..19 from memory", got)
	}
	st := stats(s)
	if st.Outages != 1 || st.WriteFailures < 15 || st.Buffered == 0 || st.Written != 1 {
		t.Fatalf("stats while full: %+v", st)
	}
	if n := strings.Count(logs.String(), "cannot write the spool"); n != 1 {
		t.Fatalf("%d failure messages, want 1:\n%s", n, logs)
	}
	ff.setFull(false)
	s.Append(sample(20, 20)) // the next write flushes the buffer
	st = stats(s)
	if st.Buffered != 0 || st.Written != 21 || st.LostUnwritten != 0 {
		t.Fatalf("stats after recovery: %+v", st)
	}
	if n := strings.Count(logs.String(), "writable again"); n != 1 {
		t.Fatalf("%d recovery messages, want 1:\n%s", n, logs)
	}
	s2 := reopen(t, s)
	if st := s2.Stats(); st.BadLines != 0 || st.TornTail {
		t.Fatalf("file after the outage has bad lines: %+v", st)
	}
	want := []int64{}
	for i := int64(0); i <= 20; i++ {
		want = append(want, i)
	}
	if got := pendingSeqs(t, s2); !slices.Equal(got, want) {
		t.Fatalf("samples in the file %v, want %v", got, want)
	}
	if a := s2.Acked("mlflow", "r"); a != 12 {
		t.Fatalf("ack in the file = %d, want the newest (12)", a)
	}
}

// heldBy is what the spool counts for smp in memory: its line's length and
// its MemBytes.
func heldBy(smp metrics.Sample) (line int, mem int64) {
	var e encoder
	line = len(e.sample(&smp))
	return line, smp.MemBytes()
}

// reopen closes s and opens its file again (closed at the test's end).
func reopen(t *testing.T, s *Spool) *Spool {
	t.Helper()
	s.Close()
	s2, err := Open(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}

// A long outage keeps at most MaxBuffered samples, holding at most
// MaxBufferedBytes (their lines and samples), in memory: the oldest
// unwritten ones are dropped, counted, and reported once; the newest stays
// even when it alone is over the bytes.
func TestDiskFullBufferBounded(t *testing.T) {
	line, mem := heldBy(sample(10, 1)) // samples 10..21: lines of one length
	for _, tc := range []struct {
		name string
		opt  Options
		keep int
	}{
		{"samples", Options{MaxBuffered: 5}, 5},
		{"bytes", Options{MaxBufferedBytes: 5 * (int64(line) + mem)}, 5},
		{"bytes under one sample", Options{MaxBufferedBytes: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ff, logs := openFailing(t, tc.opt)
			defer s.Close()
			s.Track("mlflow", "r")
			ff.setFull(true)
			for i := int64(10); i < 22; i++ {
				s.Append(sample(i, 1))
			}
			st := stats(s)
			if lost := int64(12 - tc.keep); st.LostUnwritten != lost || st.Buffered != tc.keep {
				t.Fatalf("stats %+v, want %d lost and %d buffered", st, lost, tc.keep)
			}
			if got := s.Pending("mlflow", "r", 100); len(got) != tc.keep || got[0].Seq != int64(22-tc.keep) {
				t.Fatalf("pending %v, want the newest %d", got, tc.keep)
			}
			if n := strings.Count(logs.String(), "memory buffer is full"); n != 1 {
				t.Fatalf("%d buffer-full messages, want 1:\n%s", n, logs)
			}
			ff.setFull(false)
			s.Append(sample(22, 1))
			if st := stats(s); st.Buffered != 0 || st.Written != int64(tc.keep+1) {
				t.Fatalf("after recovery %+v", st)
			}
		})
	}
}

// A long buffer is written in pieces of at most maxKeptBuf when the disk
// works again, in order: writing it never holds a second copy of it.
func TestRecoveryWritesInPieces(t *testing.T) {
	s, ff, _ := openFailing(t, Options{SyncEvery: time.Hour})
	defer s.Close()
	s.Track("mlflow", "r")
	long := strings.Repeat("x", 90)
	pts := make([]metrics.Point, 1000)
	for i := range pts {
		pts[i] = metrics.Named(fmt.Sprintf("prom_%04d_%s", i, long), 1)
	}
	ff.setFull(true)
	const n = 40 // 4 MB of lines
	for i := int64(0); i < n; i++ {
		s.Append(metrics.Sample{Seq: i, Time: time.UnixMilli(i + 1), Points: pts})
	}
	if st := stats(s); st.Buffered != n || st.Written != 0 {
		t.Fatalf("stats while full %+v, want %d buffered", st, n)
	}
	ff.setFull(false)
	s.Append(metrics.Sample{Seq: n, Time: time.UnixMilli(n + 1), Points: pts[:1]})
	if st := stats(s); st.Buffered != 0 || st.Written != n+1 {
		t.Fatalf("stats after recovery %+v, want %d written", st, n+1)
	}
	ff.mu.Lock()
	largest := ff.largest
	ff.mu.Unlock()
	s.mu.Lock()
	kept, unsynced := cap(s.w.wbuf), len(s.w.unsynced)
	s.mu.Unlock()
	if largest > maxKeptBuf || kept > maxKeptBuf || unsynced > 2*maxKeptBuf {
		t.Fatalf("largest write %d, write buffer %d, unsynced %d bytes; want at most %d each (twice for unsynced)", largest, kept, unsynced, maxKeptBuf)
	}
	s2 := reopen(t, s)
	want := make([]int64, n+1)
	for i := range want {
		want[i] = int64(i)
	}
	if got := pendingSeqs(t, s2); !slices.Equal(got, want) || s2.Stats().BadLines != 0 {
		t.Fatalf("samples in the file %v (%d bad lines), want 0..%d in order", got, s2.Stats().BadLines, n)
	}
}

// Memory holds at most MemSamples written samples, holding at most
// MemBytes; older unacknowledged ones are read back from the file, in
// order, with their values: the bounds lose nothing. The counts stay true
// through appends, acks and a reopen.
func TestMemoryBoundedRereadsFromFile(t *testing.T) {
	_, mem := heldBy(sample(10, 10)) // the first 90 samples: lines of one length
	for _, tc := range []struct {
		name string
		opt  Options
	}{
		{"samples", Options{MemSamples: 10}},
		{"bytes", Options{MemBytes: 10 * mem}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.jsonl")
			s, err := OpenWith(path, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			s.Track("mlflow", "r")
			for i := int64(10); i < 110; i++ {
				s.Append(sample(i, float64(i)))
			}
			checkWindow(t, s, 10)
			got := s.Pending("mlflow", "r", 1000)
			if len(got) != 100 {
				t.Fatalf("pending %d, want 100", len(got))
			}
			for i, smp := range got {
				if v, _ := smp.Value("node_memory_used_megabytes"); smp.Seq != int64(i+10) || v != float64(i+10)*10 {
					t.Fatalf("sample %d = seq %d value %v", i, smp.Seq, v)
				}
			}
			s.Ack("mlflow", "r", 59)
			if got := s.Pending("mlflow", "r", 5); len(got) != 5 || got[0].Seq != 60 {
				t.Fatalf("pending after ack %v", got)
			}
			checkWindow(t, s, 10)
			s.Close()

			s, err = OpenWith(path, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			checkWindow(t, s, 10)
			if got := pendingSeqs(t, s); len(got) != 100 {
				t.Fatalf("%d samples after the reopen, want 100", len(got))
			}
		})
	}
}

// A batch Pending returns holds at most maxBatchBytes, whether its samples
// are in memory or read back from the file; the next batch goes on from
// where it stopped, and every sample is offered, in order.
func TestPendingBatchBounded(t *testing.T) {
	long := strings.Repeat("x", 200)
	pts := make([]metrics.Point, 1000)
	for i := range pts {
		pts[i] = metrics.Named(fmt.Sprintf("prom_%04d_%s", i, long), 1)
	}
	_, mem := heldBy(metrics.Sample{Seq: 10, Time: time.UnixMilli(1), Points: pts})
	for _, memSamples := range []int{0, 5} {
		t.Run(fmt.Sprintf("mem_samples=%d", memSamples), func(t *testing.T) {
			s, err := OpenWith(filepath.Join(t.TempDir(), "s.jsonl"), Options{MemSamples: memSamples})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.Track("mlflow", "r")
			const n = 40 // past 8 MiB held
			for i := int64(10); i < 10+n; i++ {
				s.Append(metrics.Sample{Seq: i, Time: time.UnixMilli(i), Points: pts})
			}
			settle(s)
			next, batches := int64(10), 0
			for batch := s.Pending("mlflow", "r", 100); len(batch) > 0; batch = s.Pending("mlflow", "r", 100) {
				if got := int64(len(batch)) * mem; got > maxBatchBytes || len(batch) != maxBatchBytes/int(mem) && batch[len(batch)-1].Seq != 10+n-1 {
					t.Fatalf("a batch of %d samples holding %d bytes, want as many as fit in %d", len(batch), got, maxBatchBytes)
				}
				for _, smp := range batch {
					if smp.Seq != next || len(smp.Points) != len(pts) {
						t.Fatalf("sample %d with %d points, want %d with %d", smp.Seq, len(smp.Points), next, len(pts))
					}
					next++
				}
				s.Ack("mlflow", "r", next-1)
				batches++
			}
			if next != 10+n || batches < 2 {
				t.Fatalf("%d samples in %d batches, want %d in more than one", next-10, batches, n)
			}
		})
	}
}

// checkWindow checks that at most want samples are in memory and that the
// window's counts are what it holds.
func checkWindow(t *testing.T, s *Spool, want int) {
	t.Helper()
	settle(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	n, b := 0, int64(0)
	for _, e := range s.ix.pend {
		if e.smp != nil && e.off >= 0 {
			n++
			b += e.held()
		}
	}
	if n > want || s.ix.inMem != n || s.ix.inMemBytes != b {
		t.Fatalf("%d samples holding %d bytes in memory (counted %d, %d), want at most %d", n, b, s.ix.inMem, s.ix.inMemBytes, want)
	}
	if n > 1 && (n > s.opt.MemSamples || b > s.opt.MemBytes) {
		t.Fatalf("%d samples holding %d bytes in memory, over the bounds (%d, %d)", n, b, s.opt.MemSamples, s.opt.MemBytes)
	}
}

// The size cap rewrites the file without its oldest samples: those every
// sink acknowledged are not counted as dropped, the others are; the file
// stays under the cap and reopens cleanly with its start record.
func TestSizeCap(t *testing.T) {
	for _, acked := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "s.jsonl")
		var logs bytes.Buffer
		const capBytes = 16 << 10
		s, err := OpenWith(path, Options{MaxSize: capBytes, Logger: logTo(&logs)})
		if err != nil {
			t.Fatal(err)
		}
		s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "r"}})
		s.Track("mlflow", "r")
		const n = 400
		for i := int64(0); i < n; i++ {
			s.Append(sample(i, float64(i)))
			if acked {
				s.Ack("mlflow", "r", i)
			}
			settle(s)
			if fi, _ := os.Stat(path); fi.Size() > capBytes {
				t.Fatalf("file is %d bytes, over the cap", fi.Size())
			}
		}
		st := stats(s)
		if st.Compactions == 0 {
			t.Fatalf("acked=%v: no compaction: %+v", acked, st)
		}
		if acked != (st.DroppedByCap == 0) {
			t.Fatalf("acked=%v: dropped %d", acked, st.DroppedByCap)
		}
		pend := s.Pending("mlflow", "r", n)
		s.Close()
		// Said once, however many rewrites (a small cap rewrites often).
		warns := 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, "size cap") {
				warns++
			}
		}
		if warns != 1 || st.Compactions < 2 {
			t.Errorf("%d size-cap warnings for %d rewrites, want 1:\n%s", warns, st.Compactions, logs.String())
		}
		if want := !acked; strings.Contains(logs.String(), "will never be sent") != want {
			t.Errorf("acked=%v: the message does not say whether undelivered samples were removed:\n%s", acked, logs.String())
		}
		s2, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got := pendingSeqs(t, s2)
		if len(got) == 0 || got[len(got)-1] != n-1 || int64(len(got)) != got[len(got)-1]-got[0]+1 {
			t.Fatalf("acked=%v: samples after compaction %v, want the newest, contiguous", acked, got)
		}
		if !acked && (len(pend) != len(got) || pend[0].Seq != got[0]) {
			t.Fatalf("pending in memory %d from %d, file holds %d from %d", len(pend), pend[0].Seq, len(got), got[0])
		}
		if a := s2.Attempts(); len(a) != 1 || a[0].Start.Runs["mlflow"] != "r" {
			t.Fatalf("attempts after compaction %+v", a)
		}
		if acked && s2.Acked("mlflow", "r") != n-1 {
			t.Fatalf("ack after compaction %d", s2.Acked("mlflow", "r"))
		}
		s2.Close()
	}
}

// A fully delivered spool says so; one a sink gave up on does not.
func TestDelivered(t *testing.T) {
	s, _ := Open(filepath.Join(t.TempDir(), "s.jsonl"))
	s.Track("a", "r")
	s.Append(sample(0, 1))
	if s.Delivered() {
		t.Fatal("delivered before the ack")
	}
	s.Ack("a", "r", 0)
	if !s.Delivered() {
		t.Fatal("not delivered after the ack")
	}
	path := s.Path()
	// The end record, queued as the file is removed (the writer sees
	// both at once): it goes with the file, and no record is said to wait
	// for a file that is gone.
	s.mu.Lock()
	if err := s.enqueueLocked(Record{Type: TypeEnd, Time: 2}); err != nil {
		t.Fatal(err)
	}
	s.closed = true
	err := s.w.close(context.Background(), true)
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("file still there: %v", err)
	}
	if st := s.Stats(); st.Buffered != 0 {
		t.Errorf("%d records waiting for a removed file", st.Buffered)
	}

	s, _ = Open(filepath.Join(t.TempDir(), "s.jsonl"))
	defer s.Close()
	s.Track("a", "r")
	s.Append(sample(0, 1))
	s.Untrack("a", "r")
	if s.Delivered() {
		t.Fatal("delivered although the sink gave up")
	}
}

// The sampler appends while two forwarders read and acknowledge, with a
// tiny memory window (reads from the file) and a small cap (rewrites): every
// sample reaches each forwarder once, in order, unless the cap dropped it.
// With SyncEvery, the deferred fsync's timer runs beside them too.
func TestConcurrentAppendPendingAck(t *testing.T) {
	for _, every := range []time.Duration{0, time.Millisecond} {
		t.Run("sync="+every.String(), func(t *testing.T) { concurrentAppendPendingAck(t, every) })
	}
}

func concurrentAppendPendingAck(t *testing.T, every time.Duration) {
	s, err := OpenWith(filepath.Join(t.TempDir(), "s.jsonl"), Options{MemSamples: 3, MaxSize: 64 << 10, SyncEvery: every})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Track("a", "r")
	s.Track("b", "r")
	const n = 600
	var wg sync.WaitGroup
	for _, sink := range []string{"a", "b"} {
		wg.Add(1)
		wake := s.Notify()
		go func() {
			defer wg.Done()
			last := int64(-1)
			for last < n-1 {
				batch := s.Pending(sink, "r", 7)
				if len(batch) == 0 {
					<-wake // no busy loop: wait for the next Append
					continue
				}
				for _, smp := range batch {
					if smp.Seq <= last {
						t.Errorf("%s: seq %d after %d", sink, smp.Seq, last)
						return
					}
					if v, _ := smp.Value("container_memory_working_set_megabytes"); v != float64(smp.Seq) {
						t.Errorf("%s: seq %d has value %v", sink, smp.Seq, v)
						return
					}
					last = smp.Seq
				}
				s.Ack(sink, "r", last)
			}
		}()
	}
	for i := int64(0); i < n; i++ {
		s.Append(sample(i, float64(i)))
	}
	wg.Wait()
	if st := stats(s); st.Written != n || st.Buffered != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A cap that first trims only delivered samples and later removes unsent
// ones warns once for each: the second is the news that samples are lost.
func TestSizeCapWarnsOncePerKind(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	var logs bytes.Buffer
	s, err := OpenWith(path, Options{MaxSize: 16 << 10, Logger: logTo(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "r"}})
	s.Track("mlflow", "r")
	const n = 800
	for i := int64(0); i < n; i++ {
		s.Append(sample(i, float64(i)))
		if i < n/2 { // the tracker goes away halfway
			s.Ack("mlflow", "r", i)
		}
		settle(s) // one rewrite at a time, as a sample every interval makes them
	}
	st := stats(s)
	s.Close()
	var trimmed, lost int
	for _, l := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "size cap") {
			continue
		}
		if strings.Contains(l, "will never be sent") {
			lost++
		} else {
			trimmed++
		}
	}
	if st.DroppedByCap == 0 || trimmed != 1 || lost != 1 {
		t.Errorf("dropped %d after %d rewrites: %d trim and %d loss warnings, want 1 each:\n%s",
			st.DroppedByCap, st.Compactions, trimmed, lost, logs.String())
	}
}
