package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/tracker"
)

// stuckSink ignores its contexts: Start never returns (until release), and
// Finish blocks until its ctx is done.
type stuckSink struct {
	fakeSink
	release chan struct{}
	started chan struct{} // closed when Start was entered
}

func (s *stuckSink) Start(context.Context, tracker.StartInfo) ([]string, error) {
	close(s.started)
	<-s.release
	return nil, nil
}

// A sink whose Start ignores its context does not hold StartSinksWith past the
// deadline; the others are started and kept.
func TestStartSinksBoundedByDeadline(t *testing.T) {
	stuck := &stuckSink{fakeSink: fakeSink{t: t, name: "stuck", runID: "s"}, release: make(chan struct{}), started: make(chan struct{})}
	defer close(stuck.release)
	good := &fakeSink{t: t, name: "good", runID: "g"}
	done := make(chan Started, 1)
	go func() {
		done <- StartSinksWith(context.Background(), []tracker.Sink{stuck, good}, tracker.StartInfo{},
			StartPolicy{Timeout: 200 * time.Millisecond, Background: true}, quiet())
	}()
	var st Started
	select {
	case st = <-done:
	case <-time.After(deadline):
		t.Fatal("StartSinksWith waited on a sink that ignores its context")
	}
	if len(st.Runs) != 1 || st.Runs[0].Sink.Name() != "good" {
		t.Errorf("runs = %+v, want only the good sink", st.Runs)
	}
	if len(st.Failed) != 1 || !strings.Contains(st.Failed[0].Value, "--start-timeout") {
		t.Errorf("failed = %+v, want the stuck sink, naming --start-timeout", st.Failed)
	}
}

// hangFinish blocks in Finish until its ctx is done.
type hangFinish struct{ fakeSink }

func (h *hangFinish) Finish(ctx context.Context, _ tracker.EndInfo) error {
	<-ctx.Done()
	return ctx.Err()
}

// Stop and Finish together end by EndBy's deadline even when the sink
// never takes a sample nor answers Finish.
func TestEndByBoundsStopAndFinish(t *testing.T) {
	sink := &hangFinish{fakeSink{t: t, name: "hung", runID: "r", hang: true}}
	set := settings(t)
	set.FlushTimeout = time.Hour // EndBy, not this, is the bound
	s := open(t, set, []metrics.Collector{&counter{}}, nil, sink)
	s.Run()
	waitfor.Cond(t, deadline, "a sample", func() bool { return s.spool.NextSeq() > 0 })
	end := time.Now().Add(500 * time.Millisecond)
	s.EndBy(end)
	finished := make(chan struct{})
	go func() {
		s.Stop(nil)
		s.Finish(tracker.EndInfo{Time: time.Now()})
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(deadline):
		t.Fatal("Stop and Finish outlived EndBy's deadline by far")
	}
}

// Closing Stop's abort channel also cuts Finish short.
func TestAbortCutsFinish(t *testing.T) {
	sink := &hangFinish{fakeSink{t: t, name: "hung", runID: "r"}}
	set := settings(t)
	set.FlushTimeout = time.Hour
	s := open(t, set, []metrics.Collector{&counter{}}, nil, sink)
	s.Run()
	abort := make(chan struct{})
	s.Stop(abort) // the sink takes every sample: Stop returns
	close(abort)
	finished := make(chan struct{})
	go func() {
		s.Finish(tracker.EndInfo{Time: time.Now()})
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(deadline):
		t.Fatal("Finish ignored the abort")
	}
}

// createdSink is a fake sink that created its run (a delivered default
// spool of such a run is removed unless --keep-spool).
type createdSink struct{ fakeSink }

func (c *createdSink) Run() tracker.RunInfo {
	ri := c.fakeSink.Run()
	ri.Created = true
	return ri
}

func TestKeepSpool(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "keep"}[keep], func(t *testing.T) {
			t.Chdir(t.TempDir()) // the default spool goes to the working directory
			set := settings(t)
			set.Spool, set.KeepSpool = "", keep
			sink := &createdSink{fakeSink{t: t, name: "fake", runID: "r1"}}
			s := open(t, set, []metrics.Collector{&counter{}}, nil, sink)
			path := s.SpoolFile()
			s.Run()
			waitfor.Cond(t, deadline, "a sample", func() bool { return len(sink.received()) > 0 })
			s.Stop(nil)
			s.Finish(tracker.EndInfo{Time: time.Now()})
			_, err := os.Stat(path)
			if kept := err == nil; kept != keep {
				t.Errorf("--keep-spool=%v: delivered spool kept = %v", keep, kept)
			}
		})
	}
}

func TestSpoolOptionsNoCap(t *testing.T) {
	if o := spoolOptions(ForJob, config.Config{}, nil); o.MaxSize != 0 {
		t.Errorf("--spool-max-size=0 gives MaxSize %d, want no cap (0)", o.MaxSize)
	}
	if o := spoolOptions(ForJob, config.Config{SpoolMaxSize: 1 << 20}, nil); o.MaxSize != 1<<20 {
		t.Errorf("MaxSize = %d", o.MaxSize)
	}
}

// --spool-sync reaches the spool as its group commit, from the config on,
// for a job's spool and for sync's.
func TestSpoolOptionsSync(t *testing.T) {
	for _, use := range []SpoolUse{ForJob, ForSync} {
		if o := spoolOptions(use, config.Config{SpoolSync: time.Second}, nil); o.SyncEvery != time.Second {
			t.Errorf("use %d: --spool-sync=1s gives SyncEvery %v", use, o.SyncEvery)
		}
		if o := spoolOptions(use, config.Config{}, nil); o.SyncEvery != 0 {
			t.Errorf("use %d: --spool-sync=0 gives SyncEvery %v, want 0 (fsync every write)", use, o.SyncEvery)
		}
	}
}

// bridge sync never compacts away a sample it has yet to send, whatever
// --spool-max-size says: a spool far larger than the configured cap,
// opened for sync and acknowledged sample by sample, keeps every sample in
// the file until its acknowledgement, and each is offered once, in order.
func TestSyncSpoolNeverCapped(t *testing.T) {
	if o := spoolOptions(ForSync, config.Config{SpoolMaxSize: 4 << 10}, nil); o.MaxSize != 0 || !o.MustExist {
		t.Fatalf("sync's options %+v: want no cap and a file that must exist", o)
	}
	path := filepath.Join(t.TempDir(), "big.jsonl")
	w, err := OpenSpool(context.Background(), path, ForJob, config.Config{}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	w.WriteStart(spool.Record{Time: time.Now().UnixMilli()})
	const n = 400
	for i := range int64(n) {
		pts := make([]metrics.Point, 20)
		for k := range pts {
			pts[k] = metrics.Named(fmt.Sprintf("test_series_%02d_count", k), float64(i))
		}
		if err := w.Append(metrics.Sample{Seq: i, Time: time.Now(), Points: pts}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	set := config.Config{SpoolMaxSize: 16 << 10} // far below the file
	if fi.Size() < 4*int64(set.SpoolMaxSize) {
		t.Fatalf("the spool holds %d bytes, want well over the cap %d", fi.Size(), set.SpoolMaxSize)
	}
	sp, err := OpenSpool(context.Background(), path, ForSync, set, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if err := sp.Track("t", ""); err != nil {
		t.Fatal(err)
	}
	next := int64(0)
	for {
		batch := sp.Pending("t", "", 7)
		if len(batch) == 0 {
			break
		}
		for _, smp := range batch {
			if smp.Seq != next {
				t.Fatalf("offered seq %d, want %d: unsent samples were lost", smp.Seq, next)
			}
			next++
		}
		if err := sp.Ack("t", "", batch[len(batch)-1].Seq); err != nil {
			t.Fatal(err)
		}
	}
	if next != n {
		t.Fatalf("offered %d samples, want %d", next, n)
	}
	if st := sp.Stats(); st.Compactions != 0 || st.DroppedByCap != 0 {
		t.Errorf("sync's spool was compacted: %+v", st)
	}
}
