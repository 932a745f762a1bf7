// Package spool is bridge's durability layer: every sample is appended to a
// JSON Lines file before any sink sees it, and each sink's acknowledgements are
// appended as they come. What a tracker has not acknowledged survives an outage
// and a restart of bridge, and `bridge sync` can upload the file later.
//
// Records, one JSON object a line, told apart by "type":
//
//	{"type":"start","time":ms,"attempt":N,"pid":P,"version":"..","run":{"mlflow":"<run id>"},...}
//	{"type":"sample","seq":N,"ts":ms,"metrics":{"container_...":1.5,...}}
//	{"type":"ack","sink":"mlflow","run":"<run id>","seq":N}   all samples <= N acknowledged
//	{"type":"end","time":ms,"exit_code":N,...}                a clean shutdown
//
// Non-finite values are written as the strings "NaN", "Infinity", "-Infinity".
package spool

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// Record types.
const (
	TypeStart  = "start"
	TypeSample = "sample"
	TypeAck    = "ack"
	TypeEnd    = "end"
)

// Record is one line of the file. Fields not used by a type are omitted.
type Record struct {
	Type     string            `json:"type"`
	Seq      *int64            `json:"seq,omitempty"`
	TS       int64             `json:"ts,omitempty"`   // sample time, unix ms
	Time     int64             `json:"time,omitempty"` // start/end time, unix ms
	Metrics  Values            `json:"metrics,omitempty"`
	Sink     string            `json:"sink,omitempty"`
	Run      string            `json:"run,omitempty"`
	Attempt  int               `json:"attempt,omitempty"`
	PID      int               `json:"pid,omitempty"`
	Version  string            `json:"version,omitempty"`
	Runs     map[string]string `json:"runs,omitempty"` // start: sink -> run id
	ExitCode *int              `json:"exit_code,omitempty"`
	Info     map[string]string `json:"info,omitempty"` // free-form facts (limits, reason)
}

// Values are a sample's metric values by name.
type Values map[string]float64

// MarshalJSON writes non-finite values as strings, which encoding/json refuses.
func (v Values) MarshalJSON() ([]byte, error) {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	buf := []byte{'{'}
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		kb, _ := json.Marshal(k)
		buf = append(buf, kb...)
		buf = append(buf, ':')
		f := v[k]
		switch {
		case math.IsNaN(f):
			buf = append(buf, `"NaN"`...)
		case math.IsInf(f, 1):
			buf = append(buf, `"Infinity"`...)
		case math.IsInf(f, -1):
			buf = append(buf, `"-Infinity"`...)
		default:
			fb, _ := json.Marshal(f)
			buf = append(buf, fb...)
		}
	}
	return append(buf, '}'), nil
}

// UnmarshalJSON accepts numbers and the non-finite strings.
func (v *Values) UnmarshalJSON(b []byte) error {
	raw := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(Values, len(raw))
	for k, r := range raw {
		var f float64
		if err := json.Unmarshal(r, &f); err == nil {
			out[k] = f
			continue
		}
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			return fmt.Errorf("metric %q: %w", k, err)
		}
		switch s {
		case "NaN":
			out[k] = math.NaN()
		case "Infinity":
			out[k] = math.Inf(1)
		case "-Infinity":
			out[k] = math.Inf(-1)
		default:
			return fmt.Errorf("metric %q: value %q is not a number", k, s)
		}
	}
	*v = out
	return nil
}

// Attempt is what the file says about one earlier run of bridge on it.
type Attempt struct {
	Start      Record  // its start record
	End        *Record // its end record; nil when it stopped without a clean shutdown
	LastSample *metrics.Sample
}

// Spool is an open spool file.
//
// Contract: safe for concurrent use (the sampler appends while forwarders
// read Pending and Ack). Append writes and fsyncs before it returns, so a
// sample that Append accepted survives a crash. Returned samples are copies.
type Spool struct {
	path string

	mu       sync.Mutex
	f        *os.File
	w        *bufio.Writer
	samples  []metrics.Sample // samples not yet acknowledged by every tracked sink
	acks     map[string]int64 // "sink\x00run" -> highest acknowledged seq
	tracked  map[string]bool  // keys of acks that hold samples in memory
	nextSeq  int64
	attempts []Attempt
	notify   []chan struct{}
}

// Open opens (creating if needed) the spool at path and reads what it holds.
// A torn last line (a crash mid-write) is ignored.
func Open(path string) (*Spool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening spool %s: %w", path, err)
	}
	s := &Spool{path: path, f: f, acks: map[string]int64{}, tracked: map[string]bool{}}
	all, err := s.read(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	s.samples = all
	s.w = bufio.NewWriter(f)
	return s, nil
}

// ReadFile reads a spool without opening it for writing (for `bridge sync`
// dry runs and tests).
func ReadFile(path string) (samples []metrics.Sample, acks map[string]int64, attempts []Attempt, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("opening spool %s: %w", path, err)
	}
	defer f.Close()
	s := &Spool{path: path, acks: map[string]int64{}, tracked: map[string]bool{}}
	all, err := s.read(f)
	return all, s.acks, s.attempts, err
}

func (s *Spool) read(r io.Reader) ([]metrics.Sample, error) {
	var all []metrics.Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			// Only a torn final line is expected; anything else is reported.
			if !sc.Scan() {
				break
			}
			return nil, fmt.Errorf("spool %s line %d: %w", s.path, line, err)
		}
		switch rec.Type {
		case TypeStart:
			s.attempts = append(s.attempts, Attempt{Start: rec})
		case TypeEnd:
			if n := len(s.attempts); n > 0 {
				r := rec
				s.attempts[n-1].End = &r
			}
		case TypeSample:
			if rec.Seq == nil {
				continue
			}
			smp := toSample(rec)
			all = append(all, smp)
			if *rec.Seq >= s.nextSeq {
				s.nextSeq = *rec.Seq + 1
			}
			if n := len(s.attempts); n > 0 {
				c := smp
				s.attempts[n-1].LastSample = &c
			}
		case TypeAck:
			if rec.Seq != nil && *rec.Seq > s.ackOf(rec.Sink, rec.Run) {
				s.acks[ackKey(rec.Sink, rec.Run)] = *rec.Seq
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading spool %s: %w", s.path, err)
	}
	return all, nil
}

func toSample(rec Record) metrics.Sample {
	smp := metrics.Sample{Seq: *rec.Seq, Time: time.UnixMilli(rec.TS)}
	names := make([]string, 0, len(rec.Metrics))
	for k := range rec.Metrics {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		smp.Points = append(smp.Points, metrics.Point{Name: k, Value: rec.Metrics[k]})
	}
	return smp
}

func ackKey(sink, run string) string { return sink + "\x00" + run }

func (s *Spool) ackOf(sink, run string) int64 {
	if v, ok := s.acks[ackKey(sink, run)]; ok {
		return v
	}
	return -1
}

// Path is the spool's file path.
func (s *Spool) Path() string { return s.path }

// NextSeq is the Seq the next sample should get, so that a resumed spool
// keeps steps increasing.
func (s *Spool) NextSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextSeq
}

// Attempts lists what earlier runs of bridge left in the file.
func (s *Spool) Attempts() []Attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Attempt(nil), s.attempts...)
}

// Track keeps samples in memory until sink acknowledges them for run; call it
// for each sink before sampling starts. Samples already in the file that the
// sink has not acknowledged become pending for it.
func (s *Spool) Track(sink, run string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := ackKey(sink, run)
	if s.tracked[k] {
		return nil
	}
	s.tracked[k] = true
	// Samples trimmed for other sinks may be needed by this one: reload them.
	acked := s.ackOf(sink, run)
	if s.nextSeq > acked+1 && (len(s.samples) == 0 || s.samples[0].Seq > acked+1) {
		f, err := os.Open(s.path)
		if err != nil {
			return fmt.Errorf("re-reading spool %s: %w", s.path, err)
		}
		defer f.Close()
		r := &Spool{path: s.path, acks: map[string]int64{}, tracked: map[string]bool{}}
		all, err := r.read(f)
		if err != nil {
			return err
		}
		s.samples = all
	}
	s.trimLocked()
	return nil
}

// Untrack stops keeping samples for a sink that gave up (a permanent error):
// they stay in the file for `bridge sync`.
func (s *Spool) Untrack(sink, run string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tracked, ackKey(sink, run))
	s.trimLocked()
}

// Notify returns a channel that receives a value (without blocking the
// writer) after each Append.
func (s *Spool) Notify() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{}, 1)
	s.notify = append(s.notify, ch)
	return ch
}

// WriteStart records the start of an attempt.
func (s *Spool) WriteStart(rec Record) error {
	rec.Type = TypeStart
	s.mu.Lock()
	rec.Attempt = len(s.attempts) + 1
	s.attempts = append(s.attempts, Attempt{Start: rec})
	s.mu.Unlock()
	return s.write(rec)
}

// WriteEnd records a clean shutdown.
func (s *Spool) WriteEnd(rec Record) error {
	rec.Type = TypeEnd
	s.mu.Lock()
	if n := len(s.attempts); n > 0 {
		r := rec
		s.attempts[n-1].End = &r
	}
	s.mu.Unlock()
	return s.write(rec)
}

// Append writes a sample durably and makes it pending for every tracked sink
// (also when the write failed, which it reports).
func (s *Spool) Append(smp metrics.Sample) error {
	vals := make(Values, len(smp.Points))
	for _, p := range smp.Points {
		vals[p.Name] = p.Value
	}
	seq := smp.Seq
	// A failed write (disk full) still hands the sample to the sinks: it is
	// then only not durable.
	werr := s.write(Record{Type: TypeSample, Seq: &seq, TS: smp.Time.UnixMilli(), Metrics: vals})
	// Keep only what sinks need: name and value (and a Time at ms, as sent).
	c := metrics.Sample{Seq: smp.Seq, Time: time.UnixMilli(smp.Time.UnixMilli())}
	for _, p := range smp.Points {
		c.Points = append(c.Points, metrics.Point{Name: p.Name, Value: p.Value})
	}
	s.mu.Lock()
	if smp.Seq >= s.nextSeq {
		s.nextSeq = smp.Seq + 1
	}
	if len(s.tracked) > 0 {
		s.samples = append(s.samples, c)
	}
	if n := len(s.attempts); n > 0 {
		s.attempts[n-1].LastSample = &c
	}
	chans := s.notify
	s.mu.Unlock()
	for _, ch := range chans {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return werr
}

// Pending returns up to max samples that sink has not acknowledged for run,
// oldest first.
func (s *Spool) Pending(sink, run string, max int) []metrics.Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	acked := s.ackOf(sink, run)
	var out []metrics.Sample
	for _, smp := range s.samples {
		if smp.Seq <= acked {
			continue
		}
		out = append(out, smp)
		if len(out) == max {
			break
		}
	}
	return out
}

// PendingCount is how many samples sink has not acknowledged for run.
func (s *Spool) PendingCount(sink, run string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	acked := s.ackOf(sink, run)
	n := 0
	for _, smp := range s.samples {
		if smp.Seq > acked {
			n++
		}
	}
	return n
}

// Acked is the highest Seq sink acknowledged for run, -1 if none.
func (s *Spool) Acked(sink, run string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ackOf(sink, run)
}

// Ack records that sink acknowledged every sample up to seq for run.
func (s *Spool) Ack(sink, run string, seq int64) error {
	s.mu.Lock()
	if seq <= s.ackOf(sink, run) {
		s.mu.Unlock()
		return nil
	}
	s.acks[ackKey(sink, run)] = seq
	s.trimLocked()
	s.mu.Unlock()
	return s.write(Record{Type: TypeAck, Sink: sink, Run: run, Seq: &seq})
}

// trimLocked drops samples every tracked sink has acknowledged.
func (s *Spool) trimLocked() {
	if len(s.tracked) == 0 {
		s.samples = nil
		return
	}
	low := int64(math.MaxInt64)
	for k := range s.tracked {
		a := int64(-1)
		if v, ok := s.acks[k]; ok {
			a = v
		}
		low = min(low, a)
	}
	i := 0
	for i < len(s.samples) && s.samples[i].Seq <= low {
		i++
	}
	s.samples = append([]metrics.Sample(nil), s.samples[i:]...)
}

func (s *Spool) write(rec Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding spool record: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return errors.New("spool is closed")
	}
	b = append(b, '\n')
	if _, err := s.w.Write(b); err != nil {
		return fmt.Errorf("writing spool %s: %w", s.path, err)
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("writing spool %s: %w", s.path, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("syncing spool %s: %w", s.path, err)
	}
	return nil
}

// Close closes the file.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
