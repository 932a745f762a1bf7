package spool

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzOpen opens any bytes as a spool: it must never panic or fail, keep
// memory bounded by the line limit, and leave a file that reopens the same,
// with no torn tail, and takes a new record on a line of its own.
func FuzzOpen(f *testing.F) {
	f.Add([]byte(`{"type":"start","time":1,"runs":{"mlflow":"r"}}` + "\n" +
		`{"type":"sample","seq":0,"ts":1,"metrics":{"a":1,"b":"NaN"}}` + "\n" +
		`{"type":"ack","sink":"mlflow","run":"r","seq":0}` + "\n" +
		`{"type":"end","time":2,"exit_code":0}` + "\n"))
	f.Add([]byte(`{"type":"sample","seq":0,"ts":1,"metrics":{"a":1}}` + "\n" + `{"type":"sample","seq":1,"ts":2,"metr`))
	f.Add([]byte(`{"type":"sample","seq":5,"ts":1,"metrics":{"a":1}}`))
	f.Add([]byte("not json\n\n{}\n{\"type\":\"sample\"}\n"))
	f.Add(bytes.Repeat([]byte("x"), 300))
	f.Add([]byte(`{"type":"sample","seq":3,"ts":1,"metrics":{"a":"Infinity"}}` + "\n" + `{"type":"sample","seq":2,"ts":1,"metrics":{"a":2}}` + "\n"))
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "s.jsonl")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		opt := Options{Logger: discard, MaxLine: 256, MemSamples: 4}
		s, err := OpenWith(path, opt)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		first := pendingSeqs(t, s)
		bad := s.Stats().BadLines
		next := s.NextSeq()
		s.Close()

		s, err = OpenWith(path, opt)
		if err != nil {
			t.Fatalf("second Open: %v", err)
		}
		st := s.Stats()
		if st.TornTail {
			t.Fatalf("the repaired file still has a torn tail")
		}
		if got := pendingSeqs(t, s); !slices.Equal(got, first) || st.BadLines != bad {
			t.Fatalf("reopen differs: samples %v (bad %d), first %v (bad %d)", got, st.BadLines, first, bad)
		}
		if err := s.Append(sample(next, 1)); err != nil {
			t.Fatalf("Append: %v", err)
		}
		s.Close()

		s, err = OpenWith(path, opt)
		if err != nil {
			t.Fatalf("third Open: %v", err)
		}
		defer s.Close()
		if got := pendingSeqs(t, s); len(got) == 0 || got[len(got)-1] != next || s.Stats().BadLines != bad {
			t.Fatalf("the appended sample %d is not read back: %v (bad %d, was %d)", next, got, s.Stats().BadLines, bad)
		}
	})
}

// FuzzScan reads any bytes in memory: every record it reports is the exact
// line at its offset, lines cover the input in order, and nothing past the
// line limit is kept.
func FuzzScan(f *testing.F) {
	f.Add([]byte(`{"type":"sample","seq":0,"ts":1,"metrics":{"a":1}}` + "\n" + `{"type":"ack","sink":"s","seq":0}` + "\ntorn"))
	f.Add([]byte("\n\n" + string(bytes.Repeat([]byte("y"), 200)) + "\n{\"type\":\"end\"}"))
	f.Add([]byte(`{"type":"sample","seq":1,"metrics":{"a":"-Infinity","b":1e308}}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const maxLine = 64
		last := int64(-1)
		res, err := scan(bytes.NewReader(data), maxLine, func(rec *Record, line []byte, off int64) {
			if off <= last || off+int64(len(line)) > int64(len(data)) || !bytes.Equal(line, data[off:off+int64(len(line))]) {
				t.Fatalf("record at %d (%d bytes) is not the input's line there", off, len(line))
			}
			if len(line) > maxLine+1 || line[len(line)-1] != '\n' {
				t.Fatalf("line at %d: %d bytes, newline %v", off, len(line), line[len(line)-1] == '\n')
			}
			last = off
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.end > int64(len(data)) || (res.end > 0 && data[res.end-1] != '\n') {
			t.Fatalf("end %d is not just past a newline", res.end)
		}
		if res.tailOff >= 0 {
			if res.tailOff != res.end || bytes.IndexByte(data[res.end:], '\n') >= 0 {
				t.Fatalf("tail at %d, end %d: not the unterminated last line", res.tailOff, res.end)
			}
			if !res.tailLong && !bytes.Equal(res.tail, data[res.tailOff:]) {
				t.Fatalf("tail %q is not the input's last line", res.tail)
			}
			if len(res.tail) > maxLine+1 {
				t.Fatalf("tail of %d bytes kept, over the limit", len(res.tail))
			}
		} else if res.end != int64(len(data)) {
			t.Fatalf("end %d of %d and no tail", res.end, len(data))
		}
	})
}
