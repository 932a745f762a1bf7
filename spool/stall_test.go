package spool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/stallfs"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
)

// settle waits until the spool's writer has written (or failed to write)
// what was queued before the call: the tests look at the file and the
// counts that writing changes.
func settle(s *Spool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil {
		s.w.settle()
	}
}

// stats is Stats once the writer has settled.
func stats(s *Spool) Stats {
	settle(s)
	return s.Stats()
}

// stallFile is the spool's file with gates: while the gate of a kind of
// call ("write", "sync", "read") is shut, those calls block until release,
// as on a disk that stopped answering.
type stallFile struct {
	*os.File
	mu      sync.Mutex
	shut    map[string]chan struct{}
	waiting atomic.Int32 // calls blocked now
}

func (f *stallFile) stall(kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shut == nil {
		f.shut = map[string]chan struct{}{}
	}
	f.shut[kind] = make(chan struct{})
}

func (f *stallFile) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, ch := range f.shut {
		close(ch)
		delete(f.shut, k)
	}
}

func (f *stallFile) gate(kind string) {
	f.mu.Lock()
	ch := f.shut[kind]
	f.mu.Unlock()
	if ch != nil {
		f.waiting.Add(1)
		<-ch
		f.waiting.Add(-1)
	}
}

func (f *stallFile) Write(b []byte) (int, error) { f.gate("write"); return f.File.Write(b) }
func (f *stallFile) Sync() error                 { f.gate("sync"); return f.File.Sync() }
func (f *stallFile) ReadAt(b []byte, off int64) (int, error) {
	f.gate("read")
	return f.File.ReadAt(b, off)
}

func openStall(t *testing.T, opt Options) (*Spool, *stallFile) {
	t.Helper()
	var sf *stallFile
	s, _ := openWrapped(t, opt, func(f *os.File, _ int64) file { sf = &stallFile{File: f}; return sf })
	s.w.stallAfter = 0    // a blocked call is a stall at once
	t.Cleanup(sf.release) // before the spool's writer is waited for
	return s, sf
}

// returns fails t unless call returns within a deadline no healthy
// machine comes near: the call must not wait for the stalled disk.
func returns(t *testing.T, what string, call func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		call()
	}()
	waitfor.Cond(t, 30*time.Second, what+" while the disk is stalled", waitfor.Closed(done))
}

// While the disk stalls in an fsync (the deferred one, the size cap's, or
// one for every write), in a write or in a read-back, nothing but the
// writer waits for it: the sampler's appends, the trackers' Pending and
// Ack, the counts and the end record all return, from memory. Bytes
// written are not counted as synced before the fsync returns. Close with a
// deadline gives up at it, saying what stalled and what is not known to be
// on disk; once the disk answers, the writer writes and fsyncs every
// record, in order.
func TestStalledDiskHoldsOnlyTheWriter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opt     Options
		stall   string
		stalled string         // the call Stats names as stalled
		start   func(s *Spool) // makes the writer reach the stalled call
	}{
		{"deferred fsync", Options{SyncEvery: time.Hour}, "sync", "fsync", func(s *Spool) { s.w.fire() }},
		{"fsync of every write", Options{}, "sync", "fsync", func(s *Spool) { s.Append(sample(5, 5)) }},
		// The rewrite's own read-back stalls, after its first fsync.
		{"size cap rewrite", Options{SyncEvery: time.Hour, MaxSize: 2 << 10}, "read", "size-cap rewrite", func(s *Spool) {
			for i := int64(5); i < 40; i++ {
				s.Append(sample(i, float64(i)))
			}
		}},
		{"write", Options{SyncEvery: time.Hour}, "write", "write", func(s *Spool) { s.Append(sample(5, 5)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, sf := openStall(t, tc.opt)
			s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "r"}})
			s.Track("mlflow", "r")
			for i := int64(0); i < 5; i++ {
				s.Append(sample(i, float64(i)))
			}
			settle(s)
			sf.stall(tc.stall)
			tc.start(s)
			waitfor.Cond(t, 30*time.Second, "the writer to stall in "+tc.stall, func() bool { return sf.waiting.Load() == 1 })

			next := s.NextSeq()
			returns(t, "appends, acks, Pending and the counts", func() {
				for i := next; i < next+100; i++ {
					if err := s.Append(sample(i, float64(i))); err != nil {
						t.Errorf("append %d: %v", i, err)
					}
					if got := s.Pending("mlflow", "r", 1000); len(got) == 0 || got[len(got)-1].Seq != i {
						t.Errorf("pending after append %d ends at %v", i, got)
					}
					if i%10 == 0 {
						s.Ack("mlflow", "r", i-5)
					}
					s.PendingCount("mlflow", "r")
					s.Stats()
					s.Delivered()
				}
				s.WriteEnd(Record{Time: 2})
			})
			if st := s.Stats(); tc.stall == "sync" && tc.opt.SyncEvery > 0 && st.Unsynced == 0 {
				t.Errorf("stalled in an fsync, yet nothing is counted unsynced: %+v", st)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			var err error
			returns(t, "CloseContext", func() { err = s.CloseContext(ctx) })
			if !errors.Is(err, ErrStalled) {
				t.Fatalf("CloseContext = %v, want ErrStalled", err)
			}
			st := s.Stats()
			if st.Stalled != tc.stalled || st.Buffered == 0 {
				t.Fatalf("stats after giving up: %+v, want the stalled call %q and the records not written", st, tc.stalled)
			}
			if !strings.Contains(err.Error(), s.Path()) {
				t.Errorf("the error does not name the file: %v", err)
			}

			sf.release()
			waitfor.Cond(t, 30*time.Second, "the writer to finish once the disk answers", waitfor.Closed(s.w.done))
			if s.w.closeErr != nil {
				t.Fatalf("closing once the disk answered: %v", s.w.closeErr)
			}
			s2, err := Open(s.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			got := pendingSeqs(t, s2)
			if len(got) == 0 || got[len(got)-1] != next+99 || int64(len(got)) != got[len(got)-1]-got[0]+1 {
				t.Fatalf("samples in the file %v, want the newest up to %d, contiguous", got, next+99)
			}
			if a := s2.Attempts(); len(a) != 1 || a[0].End == nil {
				t.Fatalf("attempts %+v, want one with its end", a)
			}
		})
	}
}

// A tracker reading samples back from a file whose disk stalled waits
// alone: the sampler appends, the other tracker reads from memory and
// acknowledges.
func TestStalledReadBackHoldsOnlyItsReader(t *testing.T) {
	s, sf := openStall(t, Options{MemSamples: 2}) // fsynced: older samples leave memory
	defer s.Close()
	s.WriteStart(Record{Time: 1, Runs: map[string]string{"a": "r", "b": "r"}})
	s.Track("a", "r")
	s.Track("b", "r")
	for i := int64(0); i < 20; i++ {
		s.Append(sample(i, float64(i)))
	}
	s.Ack("b", "r", 17) // b needs only what memory holds
	settle(s)
	sf.stall("read")
	read := make(chan []metrics.Sample, 1)
	go func() { read <- s.Pending("a", "r", 100) }()
	waitfor.Cond(t, 30*time.Second, "a's read-back to stall", func() bool { return sf.waiting.Load() == 1 })
	returns(t, "appends and b's Pending and Ack", func() {
		for i := int64(20); i < 30; i++ {
			s.Append(sample(i, float64(i)))
			if got := s.Pending("b", "r", 100); len(got) == 0 || got[0].Seq != 18 {
				t.Errorf("b's pending %v, want from 18", got)
			}
		}
		s.Ack("b", "r", 29)
		settle(s) // the writer too: it never reads
	})
	sf.release()
	got := <-read
	if len(got) != 20 || got[0].Seq != 0 || got[19].Seq != 19 {
		t.Fatalf("a's batch read back after the stall: %d samples from %v", len(got), got)
	}
	for i, smp := range got {
		if v, _ := smp.Value("container_memory_working_set_megabytes"); smp.Seq != int64(i) || v != float64(i) {
			t.Fatalf("sample %d read back as seq %d value %v", i, smp.Seq, v)
		}
	}
}

// On a real file system whose fsync blocks (FUSE, as a hard NFS mount
// whose server went away): the deferred fsync stalls, appends and acks go
// on, a bounded Close gives up and says so, and once the disk answers
// every sample is in the file.
func TestStalledFUSEFsync(t *testing.T) {
	fs := stallfs.Mount(t)
	logs := &syncbuf.Buffer{}
	s, err := OpenWith(filepath.Join(fs.Dir, "s.jsonl"), Options{SyncEvery: time.Millisecond, Logger: logTo(logs)})
	if err != nil {
		t.Fatal(err)
	}
	s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "r"}})
	s.Track("mlflow", "r")
	s.Append(sample(0, 0))
	waitfor.Cond(t, 30*time.Second, "the first deferred fsync", func() bool { return fs.Syncs() >= 1 })
	fs.Stall(false)
	s.Append(sample(1, 1))
	waitfor.Cond(t, 30*time.Second, "the deferred fsync to stall", func() bool { return fs.Waiting() == 1 })
	returns(t, "appends and acks", func() {
		for i := int64(2); i < 200; i++ {
			s.Append(sample(i, float64(i)))
			s.Ack("mlflow", "r", i-1)
		}
		s.WriteEnd(Record{Time: 2})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var cerr error
	returns(t, "CloseContext", func() { cerr = s.CloseContext(ctx) })
	if !errors.Is(cerr, ErrStalled) || s.Stats().Stalled != "fsync" {
		t.Fatalf("CloseContext = %v, stalled in %q; want ErrStalled in the fsync", cerr, s.Stats().Stalled)
	}
	msg := logs.String()
	if !strings.Contains(msg, "does not answer") || !strings.Contains(msg, s.Path()) {
		t.Errorf("no message naming the file and the stall:\n%s", msg)
	}
	fs.Release()
	waitfor.Cond(t, 30*time.Second, "the writer to finish once the disk answers", waitfor.Closed(s.w.done))
	s2, err := Open(filepath.Join(fs.Backing, "s.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	want := make([]int64, 200)
	for i := range want {
		want[i] = int64(i)
	}
	if got := pendingSeqs(t, s2); !slices.Equal(got, want) {
		t.Fatalf("samples in the file %v, want 0..199", got)
	}
}
