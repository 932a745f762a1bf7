package spool

import (
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
)

// syncFile counts fsyncs and can make them fail with EIO. A failed fsync
// drops what was written since the last good one, as Linux may (it reports a
// writeback error once and marks the pages clean).
type syncFile struct {
	*os.File
	mu    sync.Mutex
	syncs int   // fsyncs that succeeded
	tries int   // fsyncs asked for
	fail  bool  // fsync fails
	good  int64 // the file's size at the last good fsync
}

func (f *syncFile) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tries++
	if f.fail {
		f.File.Truncate(f.good)
		return &os.PathError{Op: "fsync", Path: f.Name(), Err: syscall.EIO}
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.syncs++
	st, err := f.File.Stat()
	if err != nil {
		return err
	}
	f.good = st.Size()
	return nil
}

func (f *syncFile) setFail(v bool) { f.mu.Lock(); f.fail = v; f.mu.Unlock() }

func (f *syncFile) counts() (syncs, tries int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncs, f.tries
}

func openSync(t *testing.T, opt Options) (*Spool, *syncFile, *syncbuf.Buffer) {
	t.Helper()
	var sf *syncFile
	s, logs := openWrapped(t, opt, func(f *os.File, size int64) file { sf = &syncFile{File: f, good: size}; return sf })
	return s, sf, logs
}

// SyncEvery 0 keeps the old contract: one fsync for every write.
func TestSyncEveryZeroSyncsEachAppend(t *testing.T) {
	s, sf, _ := openSync(t, Options{})
	defer s.Close()
	s.Track("mlflow", "r")
	for i := int64(0); i < 10; i++ {
		s.Append(sample(i, 1))
		settle(s)
		if n, _ := sf.counts(); n != int(2*i+1) {
			t.Fatalf("after append %d: %d fsyncs, want %d", i, n, 2*i+1)
		}
		s.Ack("mlflow", "r", i)
		settle(s)
		if n, _ := sf.counts(); n != int(2*i+2) {
			t.Fatalf("after ack %d: %d fsyncs, want %d", i, n, 2*i+2)
		}
	}
}

// With SyncEvery the records are in the file at once (a crash of bridge
// loses nothing: the kernel has them), the fsync is deferred, and Close
// does it.
func TestSyncEveryDefersAndCloseSyncs(t *testing.T) {
	s, sf, _ := openSync(t, Options{SyncEvery: time.Hour})
	s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "r"}})
	s.Track("mlflow", "r")
	for i := int64(0); i < 5; i++ {
		s.Append(sample(i, 1))
		s.Ack("mlflow", "r", i-1)
	}
	settle(s)
	if n, _ := sf.counts(); n != 0 {
		t.Fatalf("%d fsyncs before the deferred one, want 0", n)
	}
	raw, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), `"type":"sample"`); n != 5 {
		t.Fatalf("the file holds %d samples before any fsync, want 5:\n%s", n, raw)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n, _ := sf.counts(); n != 1 {
		t.Fatalf("%d fsyncs after Close, want 1", n)
	}
}

// The timer fsyncs what a sample wrote; acks alone do not arm it.
func TestSyncEveryTimer(t *testing.T) {
	s, sf, _ := openSync(t, Options{SyncEvery: 5 * time.Millisecond})
	defer s.Close()
	s.Track("mlflow", "r")
	s.Append(sample(0, 1))
	waitfor.Cond(t, 20*time.Second, "the deferred fsync", func() bool { n, _ := sf.counts(); return n >= 1 })
	waitfor.Cond(t, 20*time.Second, "nothing unsynced", func() bool { armed, n := syncState(s); return !armed && n == 0 })
	ackWritten(t, s, func() { s.Ack("mlflow", "r", 0) })
	s.Append(sample(1, 1))
	waitfor.Cond(t, 20*time.Second, "the second deferred fsync", func() bool { _, n := syncState(s); return n == 0 })

	// Whether a record arms the timer, with one that cannot fire meanwhile
	// (a 5 ms one may have fired before the check on a loaded machine).
	s, _, _ = openSync(t, Options{SyncEvery: time.Hour})
	defer s.Close()
	s.Track("mlflow", "r")
	s.Append(sample(0, 1))
	fire(s)
	ackWritten(t, s, func() { s.Ack("mlflow", "r", 0) })
	s.Append(sample(1, 1))
	if armed, _ := syncState(s); !armed {
		t.Fatal("a sample did not arm the deferred fsync")
	}
}

// ackWritten checks that ack writes an acknowledgement that the trackers'
// holding everything leaves with no fsync to wait for: the timer not armed,
// nothing kept for it.
func ackWritten(t *testing.T, s *Spool, ack func()) {
	t.Helper()
	before := fileSize(t, s)
	ack()
	if armed, n := syncState(s); armed || n != 0 || fileSize(t, s) <= before {
		t.Fatalf("after an ack: timer armed %v, %d bytes kept for an fsync, file %d bytes (was %d); want not armed, nothing kept, the ack written",
			armed, n, fileSize(t, s), before)
	}
}

func fileSize(t *testing.T, s *Spool) int64 {
	t.Helper()
	settle(s)
	fi, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// syncState is whether the fsync timer is armed and how much waits for it.
func syncState(s *Spool) (bool, int) {
	settle(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.armed, len(s.w.unsynced)
}

// fire does what the fsync timer does when it fires (the tests set an hour,
// so that the real one never fires during them), and waits for the writer
// to fsync.
func fire(s *Spool) {
	settle(s)
	s.mu.Lock()
	armed := s.w.armed
	s.mu.Unlock()
	if armed {
		s.w.fire()
	}
	settle(s)
}

// 1 MiB waiting for an fsync is fsynced at once.
func TestSyncEveryBoundsUnsynced(t *testing.T) {
	s, sf, _ := openSync(t, Options{SyncEvery: time.Hour})
	defer s.Close()
	pts := make([]metrics.Point, 100)
	for i := range pts {
		pts[i] = metrics.Named(strings.Repeat("x", 60)+string(rune('a'+i%26))+string(rune('a'+i/26)), 1)
	}
	for i := int64(0); stats(s).Written*8000 < 2*maxUnsynced; i++ {
		s.Append(metrics.Sample{Seq: i, Time: time.UnixMilli(1), Points: pts})
	}
	if n, _ := sf.counts(); n < 1 {
		t.Fatalf("%d fsyncs after 2 MiB written, want at least 1", n)
	}
	if _, n := syncState(s); n >= maxUnsynced {
		t.Fatalf("%d bytes unsynced, want under %d", n, maxUnsynced)
	}
}

// A failed deferred fsync costs no record: it is reported as a failed
// write, the unsynced bytes are written again before the next fsync, and
// the file ends with every record in order.
func TestDeferredSyncFailureRewrites(t *testing.T) {
	s, sf, logs := openSync(t, Options{SyncEvery: time.Hour})
	s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "r"}})
	s.Track("mlflow", "r")
	for i := int64(0); i < 5; i++ {
		s.Append(sample(i, float64(i)))
	}
	s.Ack("mlflow", "r", 1)
	sf.setFail(true)
	fire(s)
	st := stats(s)
	if st.WriteFailures != 1 || st.Outages != 1 {
		t.Fatalf("stats after a failed fsync: %+v", st)
	}
	if fi, _ := os.Stat(s.Path()); fi.Size() != 0 {
		t.Fatalf("the fake did not drop the unsynced bytes: %d", fi.Size())
	}
	if err := s.Append(sample(5, 5)); err != nil { // retried: fails again
		t.Fatal(err)
	}
	settle(s)
	if got := s.Pending("mlflow", "r", 100); len(got) != 4 || got[0].Seq != 2 || got[3].Seq != 5 {
		t.Fatalf("pending while failing = %v, want 2..5", got)
	}
	sf.setFail(false)
	s.Append(sample(6, 6)) // rewrites, fsyncs, then writes 5 and 6
	if st := stats(s); st.WriteFailures != 2 || st.Buffered != 0 || st.Written != 7 {
		t.Fatalf("stats after recovery: %+v", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "cannot write the spool"); n != 1 {
		t.Errorf("%d failure messages, want 1:\n%s", n, logs)
	}
	if n := strings.Count(logs.String(), "writable again"); n != 1 {
		t.Errorf("%d recovery messages, want 1:\n%s", n, logs)
	}

	s2, err := Open(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if st := s2.Stats(); st.BadLines != 0 || st.TornTail {
		t.Fatalf("file after the failed fsync has bad lines: %+v", st)
	}
	if got := pendingSeqs(t, s2); !slices.Equal(got, []int64{0, 1, 2, 3, 4, 5, 6}) {
		t.Fatalf("samples in the file %v, want 0..6", got)
	}
	if a := s2.Acked("mlflow", "r"); a != 1 {
		t.Fatalf("ack in the file = %d, want 1", a)
	}
	if at := s2.Attempts(); len(at) != 1 {
		t.Fatalf("attempts %+v, want the start record once", at)
	}
}

// A failed fsync at Close is reported, not hidden.
func TestCloseReportsFailedSync(t *testing.T) {
	s, sf, logs := openSync(t, Options{SyncEvery: time.Hour})
	s.Append(sample(0, 1))
	sf.setFail(true)
	if err := s.Close(); err == nil || !strings.Contains(err.Error(), "input/output error") {
		t.Fatalf("Close = %v, want the fsync's EIO", err)
	}
	if !strings.Contains(logs.String(), "may not survive a machine crash") {
		t.Errorf("no message about the unsynced records:\n%s", logs)
	}
}

// The size cap's rewrite fsyncs what is unsynced first (the old file stays
// if the rewrite fails), and the new file holds the newest samples.
func TestSyncEveryCompaction(t *testing.T) {
	s, sf, _ := openSync(t, Options{SyncEvery: time.Hour, MaxSize: 16 << 10})
	s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "r"}})
	s.Track("mlflow", "r")
	var i int64
	for ; stats(s).Compactions == 0; i++ {
		s.Append(sample(i, float64(i)))
	}
	if n, _ := sf.counts(); n != 1 {
		t.Fatalf("%d fsyncs before the first rewrite, want 1", n)
	}
	for end := i + 200; i < end; i++ {
		s.Append(sample(i, float64(i)))
	}
	path := s.Path()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got := pendingSeqs(t, s2)
	if len(got) == 0 || got[len(got)-1] != i-1 || int64(len(got)) != got[len(got)-1]-got[0]+1 {
		t.Fatalf("samples after compaction %v, want the newest, contiguous", got)
	}
}

// The rule with no tracker: the first write starts the timer, writes
// while it runs wait for it, and its fsync covers them all: one fsync a
// SyncEvery whatever the sample rate, none before it fires.
func TestSyncRuleNoTracker(t *testing.T) {
	s, sf, _ := openSync(t, Options{SyncEvery: time.Hour})
	defer s.Close()
	for round := 1; round <= 3; round++ {
		for i := range 5 {
			s.Append(sample(int64(5*round+i), 1))
			if armed, _ := syncState(s); !armed {
				t.Fatalf("round %d: sample %d did not leave the timer armed", round, i)
			}
		}
		if n, _ := sf.counts(); n != round-1 {
			t.Fatalf("round %d: %d fsyncs before the timer fired, want %d", round, n, round-1)
		}
		fire(s)
		if armed, n := syncState(s); armed || n != 0 {
			t.Fatalf("round %d: after the timer: armed %v, %d bytes unsynced", round, armed, n)
		}
		if n, _ := sf.counts(); n != round {
			t.Fatalf("round %d: %d fsyncs after the timer, want %d", round, n, round)
		}
	}
}

// Samples every tracked sink acknowledged need no fsync (the trackers have
// them): an ack that leaves nothing waiting stops the timer, and a timer
// that fires finds nothing to do. Start, run and end records, and samples
// while a sink has given up, are fsynced.
func TestSyncSkippedWhenAcked(t *testing.T) {
	s, sf, _ := openSync(t, Options{SyncEvery: time.Hour})
	defer s.Close()
	s.Track("mlflow", "r")
	s.Track("wandb", "w")
	for i := range 5 {
		s.Append(sample(int64(i), 1))
	}
	if armed, _ := syncState(s); !armed {
		t.Fatal("samples did not arm the fsync timer")
	}
	s.Ack("mlflow", "r", 4)
	s.Ack("wandb", "w", 3)
	if armed, _ := syncState(s); !armed {
		t.Fatal("disarmed with sample 4 not acknowledged by wandb")
	}
	s.Ack("wandb", "w", 4)
	if armed, n := syncState(s); armed || n != 0 {
		t.Fatalf("all acknowledged: timer armed %v, %d bytes unsynced; want neither", armed, n)
	}
	// Acknowledged before the timer fires: it finds nothing to do.
	s.Append(sample(5, 1))
	s.mu.Lock()
	s.ix.ack(ackKey("mlflow", "r"), 5) // as if the ack came just before
	s.ix.ack(ackKey("wandb", "w"), 5)
	s.mu.Unlock()
	fire(s)
	if n, _ := sf.counts(); n != 0 {
		t.Fatalf("%d fsyncs, want 0", n)
	}

	// A run record is not a sample: acknowledgements leave its fsync.
	s.WriteRun(Record{Type: TypeRun, Sink: "mlflow", Run: "r"})
	s.Append(sample(6, 1))
	s.Ack("mlflow", "r", 6)
	s.Ack("wandb", "w", 6)
	if armed, _ := syncState(s); !armed {
		t.Fatal("a run record's fsync was cancelled by acknowledgements")
	}
	fire(s)
	if n, _ := sf.counts(); n != 1 {
		t.Fatalf("%d fsyncs, want 1 (the run record's)", n)
	}

	// A sink that gave up: its samples are only in the file.
	s.Untrack("wandb", "w")
	s.Append(sample(7, 1))
	s.Ack("mlflow", "r", 7)
	if armed, _ := syncState(s); !armed {
		t.Fatal("fsync cancelled though a sink gave up")
	}
	fire(s)
	if n, _ := sf.counts(); n != 2 {
		t.Fatalf("%d fsyncs, want 2", n)
	}
}

// A tracker that starts late replaces its run-less tracking with its run:
// that is not giving up, even when the run-less key is then untracked (as
// a late start did). Once every tracker acknowledged, samples need no
// fsync and the spool is Delivered, as when every tracker started in
// time; a sink that gives up after its late start still counts as one.
func TestLateRunIsNotGivingUp(t *testing.T) {
	s, sf, _ := openSync(t, Options{SyncEvery: time.Hour})
	defer s.Close()
	s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "r", "wandb": ""}})
	s.Track("mlflow", "r")
	s.Track("wandb", "")
	for i := range 3 {
		s.Append(sample(int64(i), 1))
	}
	s.Ack("mlflow", "r", 2)
	if armed, _ := syncState(s); !armed {
		t.Fatal("samples no tracker holds did not arm the fsync timer")
	}
	// The late start: the run recorded, then tracked.
	s.WriteRun(Record{Sink: "wandb", Run: "w"})
	if err := s.Track("wandb", "w"); err != nil {
		t.Fatal(err)
	}
	s.Untrack("wandb", "")
	if got := pendingFor(t, s, "wandb", "w"); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("the late run is offered %v, want 0..2", got)
	}
	fire(s) // the run record's fsync
	before, _ := sf.counts()
	s.Append(sample(3, 1))
	s.Ack("mlflow", "r", 3)
	s.Ack("wandb", "w", 3)
	if armed, n := syncState(s); armed || n != 0 {
		t.Fatalf("every tracker acknowledged after a late start: timer armed %v, %d bytes unsynced; want neither", armed, n)
	}
	fire(s)
	if n, _ := sf.counts(); n != before {
		t.Fatalf("%d fsyncs of acknowledged samples, want none", n-before)
	}
	if !s.Delivered() {
		t.Fatal("not delivered, though every tracker has every sample (the late one included)")
	}

	s.Untrack("wandb", "w") // gives up
	s.Append(sample(4, 1))
	s.Ack("mlflow", "r", 4)
	if armed, _ := syncState(s); !armed {
		t.Fatal("fsync cancelled though a sink gave up after its late start")
	}
	if s.Delivered() {
		t.Fatal("delivered although a sink gave up")
	}
}
