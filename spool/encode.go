package spool

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bridge-dev/bridge/metrics"
)

// encoder writes the records bridge writes most (a sample per interval, an
// ack per delivered batch) without reflection: json.Marshal of a Record with
// its Values map cost about 90 allocations and 27 µs a sample, half of the
// spool's CPU. The output is byte for byte json.Marshal's (the tests and
// FuzzAppendSample compare them), so files and readers are unchanged.
// Not safe for concurrent use; the spool uses it under its lock.
type encoder struct {
	buf []byte // the last line encoded, reused
	idx []int  // scratch: points by name, when they come unsorted
}

// sample encodes smp's line (see appendSample); it is valid until the next
// call.
func (e *encoder) sample(smp *metrics.Sample) []byte {
	e.buf = e.appendSample(e.buf[:0], smp)
	return e.buf
}

// ack encodes an ack's line (see appendAck); it is valid until the next call.
func (e *encoder) ack(sink, run string, seq int64) []byte {
	e.buf = appendAck(e.buf[:0], sink, run, seq)
	return e.buf
}

// appendSample appends smp's record and a newline to dst: what
// json.Marshal(Record{Type: TypeSample, Seq: &smp.Seq, TS: ms, Metrics: m})
// writes, m being the points by name (the last of a repeated name wins, as
// in the map).
func (e *encoder) appendSample(dst []byte, smp *metrics.Sample) []byte {
	dst = append(dst, `{"type":"sample","seq":`...)
	dst = strconv.AppendInt(dst, smp.Seq, 10)
	if ts := smp.Time.UnixMilli(); ts != 0 { // omitempty
		dst = append(dst, `,"ts":`...)
		dst = strconv.AppendInt(dst, ts, 10)
	}
	pts := smp.Points
	if len(pts) > 0 { // omitempty: an empty map is left out
		dst = append(dst, `,"metrics":{`...)
		if sortedUnique(pts) {
			for i := range pts {
				dst = appendValue(dst, i > 0, &pts[i])
			}
		} else {
			dst = e.appendSorted(dst, pts)
		}
		dst = append(dst, '}')
	}
	return append(dst, '}', '\n')
}

// appendSorted writes pts by name, each name once with its last value.
func (e *encoder) appendSorted(dst []byte, pts []metrics.Point) []byte {
	idx := e.idx[:0]
	for i := range pts {
		idx = append(idx, i)
	}
	// Stable: among equal names the last one given stays last, and wins.
	slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(pts[a].Name(), pts[b].Name()) })
	first := true
	for k, i := range idx {
		if k+1 < len(idx) && pts[idx[k+1]].Name() == pts[i].Name() {
			continue
		}
		dst = appendValue(dst, !first, &pts[i])
		first = false
	}
	e.idx = idx
	return dst
}

// sortedUnique reports whether names strictly increase (the sampler sorts
// them), so that no sorting is needed.
func sortedUnique(pts []metrics.Point) bool {
	for i := 1; i < len(pts); i++ {
		if pts[i-1].Name() >= pts[i].Name() {
			return false
		}
	}
	return true
}

func appendValue(dst []byte, comma bool, p *metrics.Point) []byte {
	if comma {
		dst = append(dst, ',')
	}
	dst = appendJSONString(dst, p.Name())
	dst = append(dst, ':')
	return metrics.AppendJSONFloat(dst, p.Value)
}

// appendAck appends an ack record and a newline to dst: what
// json.Marshal(Record{Type: TypeAck, Sink: sink, Run: run, Seq: &seq}) writes.
func appendAck(dst []byte, sink, run string, seq int64) []byte {
	dst = append(dst, `{"type":"ack","seq":`...)
	dst = strconv.AppendInt(dst, seq, 10)
	if sink != "" {
		dst = append(dst, `,"sink":`...)
		dst = appendJSONString(dst, sink)
	}
	if run != "" {
		dst = append(dst, `,"run":`...)
		dst = appendJSONString(dst, run)
	}
	return append(dst, '}', '\n')
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as encoding/json does by default: <, > and &
// escaped for HTML, control characters as \b \f \n \r \t or \u00XX, invalid
// UTF-8 as \ufffd, and U+2028 and U+2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		} else if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
		} else {
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
