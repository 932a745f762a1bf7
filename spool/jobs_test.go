package spool

import (
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"path/filepath"
	"slices"
	"testing"
)

// pendingFor is the seqs Pending offers sink's run.
func pendingFor(t *testing.T, s *Spool, sink, run string) []int64 {
	t.Helper()
	if err := s.Track(sink, run); err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, smp := range s.Pending(sink, run, 1000) {
		got = append(got, smp.Seq)
	}
	return got
}

// A reused spool keeps jobs apart: each run is offered only the samples of
// the attempts that recorded it, in this process and after a reopen; an
// attempt that resumes a lost one's run shares it; a run found late (a run
// record) takes its attempt's samples; one named by attempt number (what
// bridge sync writes for an attempt that had no run) takes that attempt's.
func TestSamplesBelongToTheirRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	seq := int64(0)
	attempt := func(runs map[string]string, n int, end bool) {
		t.Helper()
		s.WriteStart(Record{Time: 1, Runs: runs})
		for range n {
			s.Append(sample(seq, 1))
			seq++
		}
		if end {
			s.WriteEnd(Record{Time: 2})
		}
	}
	attempt(map[string]string{"mlflow": "A"}, 3, true)               // job A: 0..2
	attempt(map[string]string{"mlflow": "B"}, 2, false)              // job B, lost: 3..4
	attempt(map[string]string{"mlflow": "B"}, 2, true)               // job B resumed: 5..6
	attempt(map[string]string{"mlflow": ""}, 2, true)                // tracker down all along: 7..8
	attempt(map[string]string{"mlflow": "", "wandb": "W"}, 2, false) // 9..10, mlflow found late
	s.WriteRun(Record{Sink: "mlflow", Run: "C"})
	s.Ack("mlflow", "A", 1)

	check := func(what string, s *Spool) {
		t.Helper()
		for _, tc := range []struct {
			sink, run string
			want      []int64
		}{
			{"mlflow", "A", []int64{2}},
			{"mlflow", "B", []int64{3, 4, 5, 6}},
			{"mlflow", "C", []int64{9, 10}},
			{"wandb", "W", []int64{9, 10}},
			{"mlflow", "new", nil},
			{"mlflow", "", []int64{7, 8}},
		} {
			if got := pendingFor(t, s, tc.sink, tc.run); !slices.Equal(got, tc.want) {
				t.Errorf("%s: %s run %q is offered %v, want %v", what, tc.sink, tc.run, got, tc.want)
			}
		}
	}
	check("open", s)
	s.Close()
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	check("reopened", s)

	// bridge sync gives attempt 4 (no run) a run of its own.
	s.WriteStart(Record{Time: 3, Info: map[string]string{"mode": "sync"}})
	s.WriteRun(Record{Sink: "mlflow", Run: "D", Attempt: 4})
	if got := pendingFor(t, s, "mlflow", "D"); !slices.Equal(got, []int64{7, 8}) {
		t.Errorf("the run given to attempt 4 is offered %v, want [7 8]", got)
	}
	s.Close()
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := pendingFor(t, s, "mlflow", "D"); !slices.Equal(got, []int64{7, 8}) {
		t.Errorf("reopened: the run given to attempt 4 is offered %v, want [7 8]", got)
	}
	if got := s.Attempts()[3].Start.Runs["mlflow"]; got != "D" {
		t.Errorf("attempt 4's mlflow run reads %q, want D", got)
	}
}

// Delivered means every sample reached every run of its attempt: samples of
// an earlier job that its run never took keep the file.
func TestDeliveredCountsEveryJob(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "s.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "A"}})
	s.Append(sample(0, 1))
	s.WriteEnd(Record{Time: 2})
	s.WriteStart(Record{Time: 3, Runs: map[string]string{"mlflow": "B"}})
	s.Track("mlflow", "B")
	s.Append(sample(1, 1))
	s.Ack("mlflow", "B", 1)
	if s.Delivered() {
		t.Fatal("delivered, though job A's sample never reached run A")
	}
	s.Ack("mlflow", "A", 0)
	if !s.Delivered() {
		t.Fatal("not delivered once run A has its sample")
	}
}

// The size cap removes delivered samples before undelivered ones, whatever
// their age: an earlier job's samples its run never took outlive a later
// job's delivered ones.
func TestSizeCapDropsDeliveredFirst(t *testing.T) {
	s, err := OpenWith(filepath.Join(t.TempDir(), "s.jsonl"), Options{MaxSize: 16 << 10, Logger: logTo(&syncbuf.Buffer{})})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "A"}})
	for i := int64(0); i < 10; i++ {
		s.Append(sample(i, 1))
	}
	s.WriteEnd(Record{Time: 2})
	s.WriteStart(Record{Time: 3, Runs: map[string]string{"mlflow": "B"}})
	s.Track("mlflow", "B")
	for i := int64(10); s.Stats().Compactions < 3; i++ {
		s.Append(sample(i, 1))
		s.Ack("mlflow", "B", i)
	}
	if st := s.Stats(); st.DroppedByCap != 0 {
		t.Fatalf("%d undelivered samples dropped, want 0 (job A's ten fit)", st.DroppedByCap)
	}
	if got := pendingFor(t, s, "mlflow", "A"); len(got) != 10 {
		t.Fatalf("run A is offered %v, want its 10 samples", got)
	}
}
