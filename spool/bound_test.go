package spool

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/metrics"
)

func names(pts []metrics.Point) string {
	var n []string
	for _, p := range pts {
		n = append(n, p.Name())
	}
	return strings.Join(n, ",")
}

// bound keeps names within MaxKey, at most maxPoints points and at most
// budget bytes; passed-through series go first, from the end, and the
// order of what is kept stays.
func TestBound(t *testing.T) {
	own := func(n string) metrics.Point { return metrics.Named(n, 0) }
	prom := func(n string) metrics.Point { return metrics.At(metrics.Passthrough(n), 0) }
	long := strings.Repeat("x", MaxKey+1)
	size := func(p *metrics.Point) int { return 10 }
	for _, tc := range []struct {
		name      string
		pts       []metrics.Point
		max, bud  int
		want      string
		long, ovr int
	}{
		{"within", []metrics.Point{own("a"), prom("b"), own("c")}, 3, -1, "a,b,c", 0, 0},
		{"long name", []metrics.Point{own("a"), own(long), own("c")}, 3, -1, "a,c", 1, 0},
		{"count: passed-through first", []metrics.Point{own("a"), prom("b"), own("c"), prom("d")}, 2, -1, "a,c", 0, 2},
		{"count: then own, from the end", []metrics.Point{own("a"), prom("b"), own("c"), own("d")}, 2, -1, "a,c", 0, 2},
		{"bytes", []metrics.Point{own("a"), prom("b"), own("c"), own("d")}, 10, 25, "a,c", 0, 2},
		{"bytes and a long name", []metrics.Point{own(long), own("a"), own("b"), own("c")}, 10, 25, "a,b", 1, 1},
		{"nothing fits", []metrics.Point{own("a")}, 10, 5, "", 0, 1},
	} {
		b := bound(tc.pts, tc.max, tc.bud, size)
		if got := names(b.pts); got != tc.want || b.longName != tc.long || b.over != tc.ovr {
			t.Errorf("%s: kept %q (long %d, over %d), want %q (%d, %d)", tc.name, got, b.longName, b.over, tc.want, tc.long, tc.ovr)
		}
	}
}

// Whatever a collector emits, the spool writes no record its reader would
// skip: names over MaxKey, points past MaxPoints, and a sample longer than
// the line limit are cut (passed-through series first), counted, and said
// once; every sample reads back.
func TestAppendNeverWritesWhatTheReaderRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	var logs syncbuf.Buffer
	const maxLine = 4096
	s, err := OpenWith(path, Options{MaxLine: maxLine, MaxPoints: 100, Logger: logTo(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	s.Track("mlflow", "")
	mk := func(seq int64, own, passed, nameLen int) metrics.Sample {
		smp := metrics.Sample{Seq: seq, Time: time.UnixMilli(1)}
		for i := range own {
			smp.Points = append(smp.Points, metrics.Named(fmt.Sprintf("node_%03d", i), 1))
		}
		for i := range passed {
			n := fmt.Sprintf("prom_%03d_", i)
			smp.Points = append(smp.Points, metrics.At(metrics.Passthrough(n+strings.Repeat("l", max(nameLen-len(n), 0))), 2))
		}
		return smp
	}
	s.Append(mk(0, 5, 500, 20))      // past MaxPoints
	s.Append(mk(1, 5, 1, MaxKey+10)) // a long name
	s.Append(mk(2, 20, 30, 200))     // past the line limit
	s.Append(mk(3, 5, 5, 10))        // within every bound
	st := stats(s)
	if st.PointsLeftOut == 0 {
		t.Fatal("nothing counted as left out")
	}
	pend := s.Pending("mlflow", "", 10)
	s.Close()
	if n := strings.Count(logs.String(), "excess points are left out"); n != 1 {
		t.Errorf("%d messages about points left out, want 1:\n%s", n, &logs)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
		if len(l)+1 > maxLine+1 {
			t.Errorf("line %d is %d bytes, over the limit of %d", i+1, len(l)+1, maxLine+1)
		}
	}
	s2, err := OpenWith(path, Options{MaxLine: maxLine})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if st := s2.Stats(); st.BadLines != 0 {
		t.Fatalf("%d lines skipped on read", st.BadLines)
	}
	s2.Track("mlflow", "")
	got := s2.Pending("mlflow", "", 10)
	if len(got) != 4 || len(pend) != 4 {
		t.Fatalf("read back %d samples (%d pending before), want 4", len(got), len(pend))
	}
	for i, smp := range got {
		if names(smp.Points) != names(pend[i].Points) {
			t.Errorf("sample %d reads back %d points, was sent %d", i, len(smp.Points), len(pend[i].Points))
		}
	}
	if n := len(got[0].Points); n != 100 || !strings.HasPrefix(names(got[0].Points), "node_000,node_001,node_002,node_003,node_004,prom_000") {
		t.Errorf("sample 0 keeps %d points (%.80s...), want 100: bridge's own, then the first passed through", n, names(got[0].Points))
	}
	if n := len(got[1].Points); n != 5 {
		t.Errorf("sample 1 keeps %d points, want the 5 with short names", n)
	}
	if !strings.HasPrefix(names(got[2].Points), "node_000") || len(got[2].Points) == 50 {
		t.Errorf("sample 2 keeps %d points, want bridge's own first and fewer than 50", len(got[2].Points))
	}
	if n := len(got[3].Points); n != 10 {
		t.Errorf("sample 3 keeps %d points, want all 10", n)
	}
}

// A start record whose tags do not fit the line limit loses its longest
// value, not the record.
func TestLongStartRecordFits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	s, err := OpenWith(path, Options{MaxLine: 1000, Logger: logTo(&syncbuf.Buffer{})})
	if err != nil {
		t.Fatal(err)
	}
	s.WriteStart(Record{Time: 1, Info: map[string]string{"bridge.command": strings.Repeat("c", 5000), "bridge.version": "1"}})
	s.Close()
	s2, err := OpenWith(path, Options{MaxLine: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	at := s2.Attempts()
	if len(at) != 1 || at[0].Start.Info["bridge.version"] != "1" || at[0].Start.Info["bridge.command"] != "" {
		t.Fatalf("attempts %+v, want the start record with its short tag", at)
	}
}

// A memory spool keeps samples for the trackers until they acknowledge
// them, at most MaxBuffered holding at most MaxBufferedBytes (the oldest
// dropped, counted, said once; the newest kept).
func TestMemorySpool(t *testing.T) {
	_, mem := heldBy(sample(10, 1)) // samples 10..17: lines of one length
	for _, tc := range []struct {
		name string
		opt  Options
		keep int
	}{
		{"samples", Options{MaxBuffered: 5}, 5},
		{"bytes", Options{MaxBufferedBytes: 5 * mem}, 5},
		{"bytes under one sample", Options{MaxBufferedBytes: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			tc.opt.Logger = logTo(&logs)
			s := NewMemory(tc.opt)
			if !s.InMemory() || s.Path() != "" {
				t.Fatal("NewMemory is not in memory")
			}
			s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "r"}})
			s.Track("mlflow", "r")
			for i := int64(10); i < 18; i++ {
				if err := s.Append(sample(i, 1)); err != nil {
					t.Fatal(err)
				}
			}
			got := s.Pending("mlflow", "r", 100)
			if len(got) != tc.keep || got[0].Seq != int64(18-tc.keep) {
				t.Fatalf("pending %v, want the newest %d", got, tc.keep)
			}
			s.Ack("mlflow", "r", 16)
			if n := s.PendingCount("mlflow", "r"); n != 1 {
				t.Fatalf("pending after the ack %d, want 1", n)
			}
			if st := s.Stats(); st.LostUnwritten != int64(8-tc.keep) || st.Written != 0 {
				t.Fatalf("stats %+v, want %d lost, none written", st, 8-tc.keep)
			}
			if n := strings.Count(logs.String(), "dropping the oldest"); n != 1 {
				t.Fatalf("%d buffer-full messages, want 1:\n%s", n, &logs)
			}
			if s.Delivered() {
				t.Fatal("a memory spool cannot be delivered: nothing is kept")
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Append(sample(19, 1)); err != ErrClosed {
				t.Fatalf("append after close: %v", err)
			}
		})
	}
}
