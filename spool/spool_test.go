package spool

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

func sample(seq int64, v float64) metrics.Sample {
	return metrics.Sample{Seq: seq, Time: time.UnixMilli(1_700_000_000_000 + seq*1000), Points: []metrics.Point{
		metrics.Named("container_memory_working_set_megabytes", v),
		metrics.Named("node_memory_used_megabytes", v*10),
	}}
}

func TestAppendAckReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "r1"}}); err != nil {
		t.Fatal(err)
	}
	s.Track("mlflow", "r1")
	for i := int64(0); i < 5; i++ {
		if err := s.Append(sample(i, float64(i))); err != nil {
			t.Fatal(err)
		}
	}
	settle(s) // a tracker is offered a sample once the file has it
	if got := s.Pending("mlflow", "r1", 2); len(got) != 2 || got[0].Seq != 0 || got[1].Seq != 1 {
		t.Fatalf("pending = %+v, want seq 0,1", got)
	}
	if err := s.Ack("mlflow", "r1", 2); err != nil {
		t.Fatal(err)
	}
	if n := s.PendingCount("mlflow", "r1"); n != 2 {
		t.Fatalf("pending after ack = %d, want 2", n)
	}
	s.Close() // no end record: a crash

	// A restarted bridge sees the unacknowledged samples, in order, and the
	// attempt that ended without a clean shutdown.
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.NextSeq() != 5 {
		t.Errorf("next seq = %d, want 5", s2.NextSeq())
	}
	s2.Track("mlflow", "r1")
	got := s2.Pending("mlflow", "r1", 100)
	if len(got) != 2 || got[0].Seq != 3 || got[1].Seq != 4 {
		t.Fatalf("pending after reopen = %+v, want seq 3,4", got)
	}
	if v, _ := got[1].Value("node_memory_used_megabytes"); v != 40 {
		t.Errorf("value after reopen = %v, want 40", v)
	}
	if !got[0].Time.Equal(time.UnixMilli(1_700_000_003_000)) {
		t.Errorf("time after reopen = %v", got[0].Time)
	}
	at := s2.Attempts()
	if len(at) != 1 || at[0].End != nil || at[0].LastSample == nil || at[0].LastSample.Seq != 4 {
		t.Fatalf("attempts = %+v, want one unfinished attempt whose last sample is seq 4", at)
	}
	// Another run of the sink is never offered this attempt's samples.
	s2.Track("mlflow", "other")
	if n := s2.PendingCount("mlflow", "other"); n != 0 {
		t.Errorf("pending for another run = %d, want 0", n)
	}
}

func TestTornLastLineIgnored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	s, _ := Open(path)
	s.Append(sample(0, 1))
	s.Close()
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"type":"sample","seq":1,"ts":17`)
	f.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatalf("torn last line must not fail Open: %v", err)
	}
	defer s2.Close()
	if s2.NextSeq() != 1 {
		t.Errorf("next seq = %d, want 1", s2.NextSeq())
	}
}

func TestNonFiniteValuesRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	s, _ := Open(path)
	s.Track("x", "")
	smp := metrics.Sample{Seq: 0, Time: time.UnixMilli(5), Points: []metrics.Point{
		metrics.Named("a", math.NaN()), metrics.Named("b", math.Inf(1)), metrics.Named("c", math.Inf(-1)),
	}}
	if err := s.Append(smp); err != nil {
		t.Fatal(err)
	}
	s.Close()
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), `"a":"NaN","b":"Infinity","c":"-Infinity"`) {
		t.Errorf("file = %s", b)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	s2.Track("y", "")
	samples := s2.Pending("y", "", 10)
	if len(samples) != 1 {
		t.Fatalf("read back %v", samples)
	}
	a, _ := samples[0].Value("a")
	bv, _ := samples[0].Value("b")
	c, _ := samples[0].Value("c")
	if !math.IsNaN(a) || !math.IsInf(bv, 1) || !math.IsInf(c, -1) {
		t.Errorf("values = %v %v %v", a, bv, c)
	}
}

// Samples every tracked sink acknowledged are dropped from memory; an
// untracked (given up) sink does not hold them.
func TestTrimmingAndUntrack(t *testing.T) {
	s, _ := Open(filepath.Join(t.TempDir(), "s.jsonl"))
	defer s.Close()
	s.Track("a", "")
	s.Track("b", "")
	for i := int64(0); i < 4; i++ {
		s.Append(sample(i, 1))
	}
	s.Ack("a", "", 3)
	if n := len(s.ix.pend); n != 4 {
		t.Fatalf("in memory = %d, want 4 (b has acked nothing)", n)
	}
	s.Untrack("b", "")
	if n := len(s.ix.pend); n != 0 {
		t.Fatalf("in memory after untrack = %d, want 0", n)
	}
}

// A run found after the start record (a late start) is reported as part of
// that attempt's start, in this process and after a reopen, and leaves the
// caller's maps alone.
func TestWriteRunMergesIntoStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	runs, info := map[string]string{"mlflow": "", "wandb": "w1"}, map[string]string{"mode": "run"}
	if err := s.WriteStart(Record{Time: 1, Runs: runs, Info: info}); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(sample(0, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteRun(Record{Time: 2, Sink: "mlflow", Run: "late", Info: map[string]string{"created": "true"}}); err != nil {
		t.Fatal(err)
	}
	if runs["mlflow"] != "" || info["created"] != "" {
		t.Errorf("WriteRun changed the caller's maps: %v %v", runs, info)
	}
	check := func(what string, at []Attempt) {
		t.Helper()
		if len(at) != 1 {
			t.Fatalf("%s: %d attempts, want 1", what, len(at))
		}
		st := at[0].Start
		if st.Runs["mlflow"] != "late" || st.Runs["wandb"] != "w1" || st.Info["created"] != "true" || st.Info["mode"] != "run" {
			t.Errorf("%s: start record %+v, want the late mlflow run merged in", what, st)
		}
	}
	check("open", s.Attempts())
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	check("reopened", s2.Attempts())
	if st := s2.Stats(); st.BadLines != 0 {
		t.Errorf("%d bad lines", st.BadLines)
	}
}
