package spool

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// logTo is a logger whose output the test reads.
func logTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// pendingSeqs reads every sample a fresh sink would be sent.
func pendingSeqs(t *testing.T, s *Spool) []int64 {
	t.Helper()
	key := fmt.Sprintf("probe-%d", s.NextSeq())
	if err := s.Track(key, ""); err != nil {
		t.Fatal(err)
	}
	defer s.Untrack(key, "")
	var seqs []int64
	for _, smp := range s.Pending(key, "", 1<<20) {
		seqs = append(seqs, smp.Seq)
	}
	return seqs
}

// A crash can cut the file at any byte of its last record. Whatever the cut,
// Open succeeds, keeps every complete record (the last one too when only its
// newline is missing), and the next records land on lines of their own: a
// second reopen finds no bad line and every sample.
func TestTruncatedAtEveryByteOfLastRecord(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full.jsonl")
	s, err := Open(full)
	if err != nil {
		t.Fatal(err)
	}
	s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "r"}})
	for i := int64(0); i < 3; i++ {
		s.Append(sample(i, float64(i)))
	}
	s.Ack("mlflow", "r", 0)
	settle(s)
	before, _ := os.Stat(full)
	s.Append(sample(3, 3.5)) // the record the crash tears
	s.Close()
	data, _ := os.ReadFile(full)
	lastStart := int(before.Size())
	if !bytes.HasSuffix(data, []byte("\n")) || lastStart >= len(data) {
		t.Fatalf("unexpected file layout: %d of %d", lastStart, len(data))
	}
	for cut := lastStart; cut <= len(data); cut++ {
		path := filepath.Join(dir, fmt.Sprintf("cut-%d.jsonl", cut))
		if err := os.WriteFile(path, data[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		s, err := OpenWith(path, Options{Logger: logTo(&logs)})
		if err != nil {
			t.Fatalf("cut at %d: Open: %v", cut, err)
		}
		want := []int64{0, 1, 2}
		if cut >= len(data)-1 { // whole record, at most its newline missing
			want = append(want, 3)
		}
		if got := pendingSeqs(t, s); !slices.Equal(got, want) {
			t.Fatalf("cut at %d: samples %v, want %v", cut, got, want)
		}
		if st := s.Stats(); st.BadLines != 0 || st.TornTail != (cut > lastStart && cut < len(data)) {
			t.Fatalf("cut at %d: stats %+v", cut, st)
		}
		next := s.NextSeq()
		if err := s.Append(sample(next, 9)); err != nil {
			t.Fatalf("cut at %d: append after repair: %v", cut, err)
		}
		s.Close()

		s2, err := Open(path)
		if err != nil {
			t.Fatalf("cut at %d: second Open: %v", cut, err)
		}
		if got := pendingSeqs(t, s2); !slices.Equal(got, append(want, next)) {
			t.Fatalf("cut at %d: after repair and append: samples %v, want %v", cut, got, append(want, next))
		}
		if st := s2.Stats(); st.BadLines != 0 || st.TornTail {
			t.Fatalf("cut at %d: the repaired file still has bad lines: %+v", cut, st)
		}
		if a := s2.Acked("mlflow", "r"); a != 0 {
			t.Fatalf("cut at %d: ack = %d, want 0", cut, a)
		}
		s2.Close()
	}
}

// Garbage anywhere is skipped and counted with its line number; the rest of
// the file is read. A bad value costs only itself (its sample is kept with
// the other values), a huge one is not echoed into the messages, and a line
// longer than the limit is skipped with its number, in bounded memory.
func TestBadLinesSkippedAndCounted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	huge := strings.Repeat("x", 3<<20) // longer than DefaultMaxLine
	lines := []string{
		`{"type":"start","time":1,"runs":{"mlflow":"r"}}`,
		`{"type":"sample","seq":0,"ts":1,"metrics":{"a":1}}`,
		`not json`, // 3
		`{"type":"sample","seq":1,"ts":2,"metrics":{"a":"` + strings.Repeat("v", 10<<20) + `"}}`,     // 4: 10 MB bad value, too long
		`{"type":"sample","seq":2,"ts":3,"metrics":{"a":"` + strings.Repeat("w", 1000) + `","b":2}}`, // 5: a bad value, a good one
		`{"type":"sample","ts":3,"metrics":{"a":1}}`,                                                 // 6: no seq
		huge, // 7
		``,   // blank lines are not errors
		`{"type":"sample","seq":3,"ts":4,"metrics":{"a":3}}`,
		`{"type":"ack","sink":"mlflow","run":"r","seq":0}`,
		`{"type":"end","time":9}`,
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err := OpenWith(path, Options{Logger: logTo(&logs)})
	if err != nil {
		t.Fatalf("Open refused a file with bad lines: %v", err)
	}
	defer s.Close()
	st := s.Stats()
	if st.BadLines != 4 || !slices.Equal(st.BadLineNums, []int{3, 4, 6, 7}) || st.BadValues != 1 {
		t.Errorf("bad lines %d at %v, bad values %d; want 4 at [3 4 6 7], 1", st.BadLines, st.BadLineNums, st.BadValues)
	}
	if got := pendingSeqs(t, s); !slices.Equal(got, []int64{0, 2, 3}) {
		t.Errorf("samples %v, want [0 2 3]", got)
	}
	s.Track("mlflow", "r")
	if got := s.Pending("mlflow", "r", 10); len(got) != 2 || got[0].Seq != 2 || len(got[0].Points) != 1 || got[0].Points[0].Name() != "b" {
		t.Errorf("pending %+v, want sample 2 with its good value b, and 3", got)
	}
	if a := s.Attempts(); len(a) != 1 || a[0].End == nil {
		t.Errorf("attempts %+v, want one that ended", a)
	}
	if logs.Len() > 1000 || !strings.Contains(logs.String(), "first=\"[3 4 6 7]\"") || !strings.Contains(logs.String(), "values=1") {
		t.Errorf("log (%d bytes) should be short and name the lines: %.500s", logs.Len(), logs.String())
	}
}

// Values that are not numbers are left out of a sample, whatever their
// kind; the numbers and the non-finite strings stay.
func TestBadValuesLeftOut(t *testing.T) {
	for _, tc := range []struct {
		metrics string
		want    Values
		bad     int
	}{
		{`{"a":1,"b":"oops"}`, Values{"a": 1}, 1},
		{`{"a":1e999,"b":-2}`, Values{"b": -2}, 1},
		{`{"a":null,"b":true,"c":{},"d":[1],"e":"NaN"}`, Values{"e": math.NaN()}, 4},
		{`{}`, Values{}, 0},
	} {
		rec, ok := parseRecord([]byte(`{"type":"sample","seq":1,"metrics":` + tc.metrics + `}`))
		if !ok {
			t.Fatalf("%s: the record was refused", tc.metrics)
		}
		if rec.badValues != tc.bad || len(rec.Metrics) != len(tc.want) {
			t.Errorf("%s: %v with %d bad, want %v with %d", tc.metrics, rec.Metrics, rec.badValues, tc.want, tc.bad)
		}
		for k, v := range tc.want {
			if got, ok := rec.Metrics[k]; !ok || (got != v && !(math.IsNaN(got) && math.IsNaN(v))) {
				t.Errorf("%s: %s = %v, want %v", tc.metrics, k, got, v)
			}
		}
	}
	if _, ok := parseRecord([]byte(`{"type":"sample","seq":1,"metrics":[1,2]}`)); ok {
		t.Error("metrics that are not an object were accepted")
	}
}

// The spool and a directory bridge creates for it are private.
func TestPermissions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new", "dir", "s.jsonl")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700, filepath.Dir(filepath.Dir(path)): 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got&^want != 0 {
			t.Errorf("%s: mode %o, want at most %o", p, got, want)
		}
	}
}
