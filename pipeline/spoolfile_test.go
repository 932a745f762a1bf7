package pipeline

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/tracker"
)

// The default spool name holds the node, the task and the run: bridges of
// one run on two nodes, or on one node (srun --ntasks-per-node), never share
// a file, and a restart on one node finds its own.
func TestSpoolPathUniquePerBridge(t *testing.T) {
	runs := []SinkRun{{RunID: "run/1"}}
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	names := map[string]bool{}
	for _, node := range []string{"node-a", "node-b"} {
		for _, task := range []string{"", "task-1", "task-2"} {
			p := SpoolPath("", node, task, runs, now)
			if names[p] {
				t.Errorf("node %s task %q: %s is another bridge's", node, task, p)
			}
			names[p] = true
			if again := SpoolPath("", node, task, runs, now.Add(time.Hour)); again != p {
				t.Errorf("a restart of node %s task %q gets %s, not %s", node, task, again, p)
			}
		}
	}
	if a := SpoolPath("", "node-a", "", runs, now); a != "bridge-spool-node-a-run_1.jsonl" {
		t.Errorf("name %q, want bridge-spool-node-a-run_1.jsonl", a)
	}
	if a := SpoolPath("", "node-a", "task-1", runs, now); a != "bridge-spool-node-a.task-1-run_1.jsonl" {
		t.Errorf("name %q, want bridge-spool-node-a.task-1-run_1.jsonl", a)
	}
	if h := SpoolPath("", "", "", runs, now); h != "bridge-spool-"+safeName(hostname())+"-run_1.jsonl" {
		t.Errorf("without a node id: %s, want the host name in it", h)
	}
	if norun := SpoolPath("", "n1", "", nil, now); !strings.HasPrefix(norun, "bridge-spool-n1-20261204T000000-") {
		t.Errorf("without a run: %s", norun)
	}
	if given := SpoolPath("/x/s.jsonl", "n1", "task-1", runs, now); given != "/x/s.jsonl" {
		t.Errorf("a given path became %s", given)
	}
}

// Any spool that cannot be opened (here: a path under a file, one that
// another writer holds, /dev/zero and a FIFO) gives a memory spool and one
// ERROR naming the path and --spool, at once.
func TestOpenSpoolFallsBackToMemory(t *testing.T) {
	dir := t.TempDir()
	held := filepath.Join(dir, "held.jsonl")
	first, err := spooltest.Open(held)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.jsonl")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, says string }{
		{filepath.Join(notDir, "s.jsonl"), "cannot open the spool"},
		{held, "another bridge is writing this spool"},
		{zero, "the spool is not a regular file"},
		{fifo, "the spool is not a regular file"},
	} {
		var logs bytes.Buffer
		sp, err := OpenSpool(context.Background(), tc.path, ForJob, config.Config{}, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatalf("%s: a job's spool never fails to open: %v", tc.path, err)
		}
		if !sp.InMemory() {
			t.Errorf("%s: not a memory spool", tc.path)
		}
		if out := logs.String(); strings.Count(out, "level=ERROR") != 1 || !strings.Contains(out, tc.says) ||
			!strings.Contains(out, "--spool") || !strings.Contains(out, tc.path) {
			t.Errorf("%s: message %q, want one ERROR saying %q, naming the path and --spool", tc.path, out, tc.says)
		}
		sp.Close()
	}
}

// A session without a spool file still samples, sends every sample to the
// tracker, records the end, and says in its table that the spool is none.
func TestSessionWithoutSpoolFile(t *testing.T) {
	sink := &fakeSink{t: t, name: "fake", runID: "r1"}
	set := settings(t)
	set.Spool = filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(set.Spool, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	set.Spool = filepath.Join(set.Spool, "s.jsonl") // under a file: cannot be opened
	s := open(t, set, []metrics.Collector{&counter{}}, nil, sink)
	s.Run()
	waitfor.Cond(t, deadline, "samples at the sink", func() bool { return len(sink.received()) >= 3 })
	s.Stop(nil)
	s.Finish(tracker.EndInfo{Time: time.Now()})
	if sink.finished != 1 {
		t.Errorf("Finish called %d times, want 1", sink.finished)
	}
	if got, taken := len(sink.received()), s.Acc().Samples(); got != taken {
		t.Errorf("sink got %d samples of %d", got, taken)
	}
	if r := report(s); !strings.Contains(r, "none: it could not be opened") || strings.Contains(r, "not sent") {
		t.Errorf("report:\n%s\nwant the spool row to say there is none, and nothing unsent", r)
	}
}

// The upload advice is a command a shell runs as is.
func TestSyncCommand(t *testing.T) {
	if got := SyncCommand("/a/b-1.jsonl"); got != "bridge sync /a/b-1.jsonl" {
		t.Errorf("plain path: %s", got)
	}
	if got := SyncCommand("/a/it's here.jsonl"); got != `bridge sync '/a/it'\''s here.jsonl'` {
		t.Errorf("path with a space and a quote: %s", got)
	}
	if got := SyncCommand("rel.jsonl"); !strings.HasPrefix(got, "bridge sync /") {
		t.Errorf("relative path not made absolute: %s", got)
	}
}

// createdLateSink is a tracker that was down when the job started, then
// created bridge's run (a late start), and counts what it was sent.
type createdLateSink struct {
	lateSink
	sent atomic.Int64
}

func (c *createdLateSink) Run() tracker.RunInfo {
	ri := c.lateSink.Run()
	ri.Created = true
	return ri
}

func (c *createdLateSink) Send(ctx context.Context, smp []metrics.Sample) (int, error) {
	n, err := c.lateSink.Send(ctx, smp)
	c.sent.Add(int64(n))
	return n, err
}

// A tracker that starts late has not given up: once it has every sample
// in the run bridge created, the default spool is removed as when it
// started in time (before, a late start counted as giving up and kept it).
func TestLateStartDefaultSpoolRemoved(t *testing.T) {
	t.Chdir(t.TempDir()) // the default spool goes to the working directory
	sink := &createdLateSink{}
	st := StartSinksWith(context.Background(), []tracker.Sink{sink}, tracker.StartInfo{},
		StartPolicy{Timeout: 100 * time.Millisecond, Background: true}, quiet())
	if len(st.Runs) != 1 || st.Runs[0].Late == nil {
		t.Fatalf("runs %+v: want the sink left to start late", st.Runs)
	}
	set := settings(t)
	set.Spool, set.Interval = "", 5*time.Millisecond
	s := Open(Options{Settings: set, Log: quiet(), Version: "test", Collectors: []metrics.Collector{&counter{}}, Started: st,
		Phase: func(d time.Duration) time.Duration { return d }})
	path := s.SpoolFile()
	s.Run()
	sink.up.Store(true)
	sink.accept.Store(true)
	waitfor.Cond(t, deadline, "samples sent to the late run", func() bool { return sink.sent.Load() >= 3 })
	s.Stop(nil)
	s.Finish(tracker.EndInfo{Time: time.Now()})
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the delivered default spool of a late run was kept (%v):\n%s", err, report(s))
	}
	if r := report(s); !strings.Contains(r, "every one reached every tracker, so the file was removed") || strings.Contains(r, "never written") {
		t.Errorf("report:\n%s\nwant the spool row to say it was removed, and nothing of records never written", r)
	}
}

// The spool row names what a sample's bounds left out, by kind, with a
// series of each, once for the whole run.
func TestLeftOutNoteNamesWhat(t *testing.T) {
	st := spool.Stats{PointsLeftOut: 30013, LongNames: 1}
	st.LeftOutByTier[spool.TierInstance] = 30012
	st.LeftOutExample[spool.TierInstance] = "node_infiniband_<device>_port_<port>_receive_megabytes_per_second"
	want := "30013 points were left out of samples over a sample's bounds (30012 per port or device, e.g. node_infiniband_<device>_port_<port>_receive_megabytes_per_second; 1 named in more than 250 bytes)"
	if got := leftOutNote(st); got != want {
		t.Errorf("note\n%s\nwant\n%s", got, want)
	}
}
