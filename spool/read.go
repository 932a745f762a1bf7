package spool

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxLine bounds one record. A sample of a node with eight GPUs is a
// few KB; anything longer is not a record bridge wrote, and reading it whole
// would let one bad line take unbounded memory.
const DefaultMaxLine = 1 << 20

// maxBadLineNumbers is how many bad line numbers are kept for the message.
const maxBadLineNumbers = 5

// scanResult is what a scan of a spool found besides its records.
type scanResult struct {
	end      int64 // offset just past the last complete line
	badLines int   // complete lines that are not records (skipped)
	badAt    []int // the first few of them, 1-based
	lines    int   // complete lines read
	tail     []byte
	tailOff  int64 // offset of an unterminated last line; -1 if none
	tailLong bool  // the unterminated last line was longer than the line limit
}

// scan reads complete lines from r and calls fn with each record, its line
// (newline included; valid during the call only) and its offset. A line that is too long or not a record
// is skipped and counted; an unterminated last line is returned in tail, not
// parsed. Memory is bounded by maxLine whatever r holds.
func scan(r io.Reader, maxLine int, fn func(rec *Record, line []byte, off int64)) (scanResult, error) {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	res := scanResult{tailOff: -1}
	br := bufio.NewReaderSize(r, maxLine+1)
	var off int64
	for {
		b, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Too long to be a record: skip to its end without keeping it.
			start, n := off, int64(len(b))
			for errors.Is(err, bufio.ErrBufferFull) {
				b, err = br.ReadSlice('\n')
				n += int64(len(b))
			}
			off = start + n
			if err != nil {
				if !errors.Is(err, io.EOF) {
					return res, fmt.Errorf("reading at byte %d: %w", off, err)
				}
				if n > 0 {
					res.tailOff, res.tailLong = start, true
				}
				return res, nil
			}
			res.lines++
			res.bad(res.lines)
			res.end = off
			continue
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return res, fmt.Errorf("reading at byte %d: %w", off, err)
			}
			if len(b) > 0 {
				res.tailOff = off
				res.tail = append([]byte(nil), b...)
			}
			return res, nil
		}
		res.lines++
		n := len(b)
		line := bytes.TrimSpace(b)
		if len(line) > 0 {
			if rec, ok := parseRecord(line); ok {
				fn(rec, b, off)
			} else {
				res.bad(res.lines)
			}
		}
		off += int64(n)
		res.end = off
	}
}

func (r *scanResult) bad(line int) {
	r.badLines++
	if len(r.badAt) < maxBadLineNumbers {
		r.badAt = append(r.badAt, line)
	}
}

// parseRecord decodes one line; a record must be a JSON object with a type,
// and a sample or an ack must carry its seq. A sample's values that are not
// numbers are left out and counted (Record.badValues), not the record.
func parseRecord(line []byte) (*Record, bool) {
	var w struct {
		Record
		Metrics json.RawMessage `json:"metrics,omitempty"` // shadows Record.Metrics
	}
	if err := json.Unmarshal(line, &w); err != nil || w.Type == "" {
		return nil, false
	}
	rec := &w.Record
	if (rec.Type == TypeSample || rec.Type == TypeAck) && rec.Seq == nil {
		return nil, false
	}
	if len(w.Metrics) > 0 && string(w.Metrics) != "null" {
		m, bad, err := parseValues(w.Metrics)
		if err != nil {
			return nil, false
		}
		rec.Metrics, rec.badValues = m, bad
	}
	return rec, true
}
