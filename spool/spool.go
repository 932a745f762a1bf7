// Package spool is bridge's durability layer: every sample is appended to a
// JSON Lines file before any sink sees it, and each sink's acknowledgements are
// appended as they come. What a tracker has not acknowledged survives an outage
// and a restart of bridge, and `bridge sync` can upload the file later.
//
// Records, one JSON object a line, told apart by "type":
//
//	{"type":"start","time":ms,"attempt":N,"pid":P,"version":"..","runs":{"mlflow":"<run id>"},...}
//	{"type":"sample","seq":N,"ts":ms,"metrics":{"container_...":1.5,...}}
//	{"type":"ack","sink":"mlflow","run":"<run id>","seq":N}   all samples <= N acknowledged
//	{"type":"run","time":ms,"sink":"mlflow","run":"<run id>","info":{..}}
//	    a run created after the start record (the tracker was down at
//	    start); merged into the attempt's start record when read
//	{"type":"end","time":ms,"exit_code":N,...}                a clean shutdown
//
// Non-finite values are written as the strings "NaN", "Infinity", "-Infinity".
//
// The file survives a crash at any byte: Open repairs an unterminated last
// line (kept when it is a whole record, cut off otherwise), and skips and
// counts lines that are not records. A file that cannot be written (disk
// full) costs durability, never samples: they wait in a bounded memory buffer
// that the next successful write flushes in order. Memory is bounded: only the
// newest unacknowledged samples are kept in RAM, older ones are re-read from
// the file. A size cap drops the oldest samples when it is reached.
package spool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// Defaults of Options.
const (
	DefaultMaxSize     = 1 << 30 // bytes
	DefaultMemSamples  = 1024
	DefaultMaxBuffered = 4096

	// retryGap spaces retries of a failing file: each retry rewrites the
	// whole buffer, and a cap rewrite reads the whole file.
	retryGap        = time.Second
	compactRetryGap = 30 * time.Second

	// maxKeptBuf bounds the write buffer kept between writes.
	maxKeptBuf = 1 << 20

	// maxUnsynced is how many written bytes may wait for a deferred fsync:
	// past it the spool fsyncs at once (it keeps them in memory until then).
	maxUnsynced = 1 << 20
)

// ErrClosed is returned by writes to a closed spool.
var ErrClosed = errors.New("spool is closed")

// Options tune a spool; the zero value gives the defaults.
type Options struct {
	// Logger receives the spool's few messages (repairs, write failures and
	// recoveries, the size cap). Default slog.Default().
	Logger *slog.Logger
	// MaxSize caps the file in bytes: when a write would pass it, the file is
	// rewritten without its oldest samples (down to half the cap). 0 means
	// DefaultMaxSize, a negative value no cap.
	MaxSize int64
	// MaxLine bounds one record in bytes; longer lines are skipped when read.
	// 0 means DefaultMaxLine.
	MaxLine int
	// MemSamples is how many unacknowledged samples stay in memory; older
	// ones are re-read from the file. 0 means DefaultMemSamples.
	MemSamples int
	// MaxBuffered is how many samples wait in memory while the file cannot
	// be written; past it the oldest of them are dropped (and counted).
	// 0 means DefaultMaxBuffered.
	MaxBuffered int
	// MustExist refuses a missing file (`bridge sync` of a mistyped path)
	// instead of creating it.
	MustExist bool
	// SyncEvery is group commit: 0 fsyncs after every write. A positive
	// value writes at once (the page cache has it: a crash of bridge loses
	// nothing) and fsyncs at most SyncEvery after the first record other
	// than an ack that is not yet synced, or at once when 1 MiB waits; a
	// machine crash can lose what was written in that time. The fsync is
	// done with the last write before it is due (at once when writes come
	// SyncEvery or more apart), so that it costs no wake-up of its own;
	// it is cancelled once all it was for are samples every tracked sink
	// acknowledged (the trackers have them).
	// Acks alone wait for the next fsync: losing one only makes a tracker
	// get samples again.
	SyncEvery time.Duration
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxSize == 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.MaxLine <= 0 {
		o.MaxLine = DefaultMaxLine
	}
	if o.MemSamples <= 0 {
		o.MemSamples = DefaultMemSamples
	}
	if o.MaxBuffered <= 0 {
		o.MaxBuffered = DefaultMaxBuffered
	}
}

// Stats count what happened to the spool since Open, for the end-of-run table.
type Stats struct {
	Written       int64 // sample records written to the file
	Buffered      int   // records waiting in memory for the file now
	WriteFailures int64 // failed attempts to write the file
	Outages       int   // times writing failed after working (or at once)
	LostUnwritten int64 // samples dropped from a full memory buffer: never in the file
	DroppedByCap  int64 // samples not yet delivered that the size cap removed
	Compactions   int   // rewrites of the file by the size cap
	BadLines      int   // lines skipped when the file was read
	BadLineNums   []int // the first few of them, 1-based
	TornTail      bool  // Open found an unterminated last line (and repaired it)
}

// Attempt is what the file says about one earlier run of bridge on it.
type Attempt struct {
	Start      Record  // its start record
	End        *Record // its end record; nil when it stopped without a clean shutdown
	LastSample *metrics.Sample
}

// entry is one sample some tracked sink has not acknowledged.
type entry struct {
	seq int64
	off int64           // offset of its line in the file; -1 while it waits in memory
	n   int             // length of its line, newline included
	smp *metrics.Sample // in memory; nil when only in the file
}

// queued is a record waiting to be written, in order.
type queued struct {
	line []byte
	seq  int64  // a sample's seq; -1 for other records
	ack  string // an ack's key, so a newer ack replaces it
}

// file is what the spool needs of its *os.File (a seam for tests that make
// writes fail).
type file interface {
	io.Writer
	io.ReaderAt
	Sync() error
	Truncate(size int64) error
	Close() error
}

// Spool is an open spool file.
//
// Contract: safe for concurrent use (the sampler appends while forwarders
// read Pending and Ack). Append, Ack, WriteStart and WriteEnd never fail for
// a full or broken disk: the record waits in memory and the next call that
// can write flushes it; they fail only on a closed spool. A record that
// reached the file was fsynced, or will be within Options.SyncEvery (it is
// kept in memory until then, and written again if that fsync fails). They
// block only for the write and fsync. Returned samples are the caller's.
type Spool struct {
	path string
	opt  Options
	log  *slog.Logger

	mu       sync.Mutex
	f        file
	size     int64   // bytes of whole records in the file: where the next goes
	pend     []entry // samples not yet acknowledged by every tracked sink, by seq
	inMem    int     // entries of pend with smp set and off >= 0
	queue    []queued
	queuedN  int // samples in queue
	failing  bool
	acks     map[string]int64 // "sink\x00run" -> highest acknowledged seq
	tracked  map[string]bool  // keys of acks whose samples are kept
	untrack  bool             // a sink gave up: its samples are only in the file
	nextSeq  int64
	attempts []Attempt
	notify   []chan struct{}
	stats    Stats
	lostLog  bool      // the buffer-full message was given
	nextTry  time.Time // while failing, no retry before this
	gap      time.Duration
	enc      encoder // encodes samples and acks (reused: no allocation)
	wbuf     []byte  // what one write sends (reused)

	// Group commit (SyncEvery > 0): the file's last len(unsynced) bytes are
	// written but not fsynced; unsynced holds a copy of them, to write them
	// again when an fsync failed (Linux reports a writeback error once and
	// may drop those pages).
	unsynced []byte
	resync   bool        // an fsync failed: rewrite unsynced before the next
	timer    *time.Timer // the deferred fsync
	armed    bool        // timer is set for what is unsynced
	due      time.Time   // while armed: when the oldest unsynced record must be fsynced
	// What the deferred fsync is for: the highest sample seq unsynced, and
	// whether another record that arms it (start, run, end) is.
	syncSeq   int64
	syncOther bool
	lastArm   time.Time // the last write that armed (or would have armed) the timer
	now       func() time.Time
}

// Open opens the spool at path with default options.
func Open(path string) (*Spool, error) { return OpenWith(path, Options{}) }

// OpenWith opens (creating if needed, private to the user) the spool at path
// and reads what it holds. An unterminated last line (a crash or a full disk
// mid-write) is repaired: kept when it is a whole record, cut off otherwise.
// Lines that are not records are skipped, counted and logged once. It fails
// only when the file cannot be opened or read.
func OpenWith(path string, opt Options) (*Spool, error) {
	opt.defaults()
	flags := os.O_RDWR | os.O_APPEND
	if !opt.MustExist {
		flags |= os.O_CREATE
		if dir := filepath.Dir(path); dir != "." {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, fmt.Errorf("creating the spool's directory %s: %w", dir, err)
			}
		}
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening spool %s: %w", path, err)
	}
	s := &Spool{path: path, opt: opt, log: opt.Logger.With("spool", path), f: f,
		acks: map[string]int64{}, tracked: map[string]bool{}, gap: retryGap, now: time.Now, syncSeq: -1}
	res, err := scan(f, opt.MaxLine, s.load)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("reading spool %s: %w", path, err)
	}
	s.size = res.end
	s.stats.BadLines, s.stats.BadLineNums = res.badLines, res.badAt
	if res.tailOff >= 0 {
		s.stats.TornTail = true
		s.repairTail(res)
	}
	if res.badLines > 0 {
		s.log.Warn("skipped lines of the spool that are not records", "lines", res.badLines, "first", res.badAt)
	}
	return s, nil
}

// repairTail makes the file end with a whole line again, so that the next
// record is not glued to a torn one.
func (s *Spool) repairTail(res scanResult) {
	if !res.tailLong {
		if rec, ok := parseRecord(bytes.TrimSpace(res.tail)); ok {
			// A whole record whose newline was not written: keep it.
			if _, err := s.f.Write([]byte{'\n'}); err == nil {
				s.load(rec, append(res.tail, '\n'), res.tailOff)
				s.size = res.tailOff + int64(len(res.tail)) + 1
				s.log.Info("repaired the spool's last line (its newline was missing)")
				return
			}
		}
	}
	if err := s.f.Truncate(res.end); err != nil {
		// The next record goes after the torn bytes, on a line of its own.
		s.log.Warn("cannot cut the spool's torn last line; it will be skipped when read", "err", err)
		s.size = res.end
		if fi, err := s.f.(*os.File).Stat(); err == nil {
			s.size = fi.Size()
		}
		s.queue = append(s.queue, queued{line: []byte{'\n'}, seq: -1})
		return
	}
	s.log.Info("cut a torn last line off the spool (bridge stopped mid-write)", "bytes", max(int64(len(res.tail)), 1), "offset", res.tailOff)
}

// load takes one record read from the file at off.
func (s *Spool) load(rec *Record, line []byte, off int64) {
	n := len(line)
	switch rec.Type {
	case TypeStart:
		s.attempts = append(s.attempts, Attempt{Start: *rec})
	case TypeRun:
		s.mergeRunLocked(*rec)
	case TypeEnd:
		if k := len(s.attempts); k > 0 {
			r := *rec
			s.attempts[k-1].End = &r
		}
	case TypeSample:
		smp := toSample(rec)
		if smp.Seq >= s.nextSeq {
			s.nextSeq = smp.Seq + 1
		}
		if k := len(s.attempts); k > 0 {
			c := smp
			s.attempts[k-1].LastSample = &c
		}
		if k := len(s.pend); k > 0 && s.pend[k-1].seq >= smp.Seq {
			return // out of order: a duplicate of what is kept
		}
		s.pend = append(s.pend, entry{seq: smp.Seq, off: off, n: n, smp: &smp})
		s.inMem++
		s.evictLocked()
	case TypeAck:
		if *rec.Seq > s.ackOf(rec.Sink, rec.Run) {
			s.acks[ackKey(rec.Sink, rec.Run)] = *rec.Seq
		}
	}
}

func toSample(rec *Record) metrics.Sample {
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

// evictLocked keeps at most MemSamples written samples in memory; the oldest
// are re-read from the file when a sink needs them. Samples not yet fsynced
// stay (at most 1 MiB of them): a failed fsync may take them from the file
// until they are written again.
func (s *Spool) evictLocked() {
	for i := 0; s.inMem > s.opt.MemSamples && i < len(s.pend); i++ {
		if e := &s.pend[i]; e.smp != nil && e.off >= 0 && e.off < s.syncedLocked() {
			e.smp = nil
			s.inMem--
		}
	}
}

// Path is the spool's file path.
func (s *Spool) Path() string { return s.path }

// Stats reports the counts since Open.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Buffered = len(s.queue)
	st.BadLineNums = append([]int(nil), st.BadLineNums...)
	return st
}

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

// Track keeps samples until sink acknowledges them for run; call it for each
// sink before sampling starts. Samples already in the file that the sink has
// not acknowledged become pending for it.
func (s *Spool) Track(sink, run string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := ackKey(sink, run)
	if s.tracked[k] {
		return nil
	}
	s.tracked[k] = true
	// Samples dropped for other sinks may be needed by this one: find them
	// in the file again (offsets only).
	acked := s.ackOf(sink, run)
	first := s.nextSeq
	if len(s.pend) > 0 {
		first = s.pend[0].seq
	}
	if first > acked+1 {
		if err := s.reindexLocked(first); err != nil {
			return err
		}
	}
	s.trimLocked()
	return nil
}

// reindexLocked puts the file's samples before seq back in front of pend.
func (s *Spool) reindexLocked(before int64) error {
	f, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("re-reading spool %s: %w", s.path, err)
	}
	defer f.Close()
	var older []entry
	_, err = scan(io.LimitReader(f, s.size), s.opt.MaxLine, func(rec *Record, line []byte, off int64) {
		if rec.Type == TypeSample && *rec.Seq < before && (len(older) == 0 || older[len(older)-1].seq < *rec.Seq) {
			older = append(older, entry{seq: *rec.Seq, off: off, n: len(line)})
		}
	})
	if err != nil {
		return fmt.Errorf("re-reading spool %s: %w", s.path, err)
	}
	s.pend = append(older, s.pend...)
	return nil
}

// Untrack stops keeping samples for a sink that gave up (a permanent error):
// they stay in the file for `bridge sync`.
func (s *Spool) Untrack(sink, run string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tracked[ackKey(sink, run)] {
		s.untrack = true
	}
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
	defer s.mu.Unlock()
	if s.f == nil {
		return ErrClosed
	}
	rec.Attempt = len(s.attempts) + 1
	s.attempts = append(s.attempts, Attempt{Start: rec})
	return s.enqueueLocked(rec, -1, "")
}

// WriteRun records that the current attempt's sink writes to rec.Run, found
// after WriteStart (a late start); rec.Info is merged into the start's Info.
// Attempts reports it as part of the start record.
func (s *Spool) WriteRun(rec Record) error {
	rec.Type = TypeRun
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return ErrClosed
	}
	s.mergeRunLocked(rec)
	return s.enqueueLocked(rec, -1, "")
}

// mergeRunLocked puts a run record into the last attempt's start record,
// with copies of its maps (the caller may still read the originals).
func (s *Spool) mergeRunLocked(rec Record) {
	k := len(s.attempts)
	if k == 0 || rec.Sink == "" || rec.Run == "" {
		return
	}
	st := &s.attempts[k-1].Start
	runs := make(map[string]string, len(st.Runs)+1)
	for n, id := range st.Runs {
		runs[n] = id
	}
	runs[rec.Sink] = rec.Run
	st.Runs = runs
	if len(rec.Info) > 0 {
		info := make(map[string]string, len(st.Info)+len(rec.Info))
		for n, v := range st.Info {
			info[n] = v
		}
		for n, v := range rec.Info {
			info[n] = v
		}
		st.Info = info
	}
}

// WriteEnd records a clean shutdown.
func (s *Spool) WriteEnd(rec Record) error {
	rec.Type = TypeEnd
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return ErrClosed
	}
	if n := len(s.attempts); n > 0 {
		r := rec
		s.attempts[n-1].End = &r
	}
	return s.enqueueLocked(rec, -1, "")
}

// Append writes a sample and makes it pending for every tracked sink. When
// the file cannot be written the sample waits in memory (see Options); it
// reaches the sinks either way.
func (s *Spool) Append(smp metrics.Sample) error {
	// Keep only what sinks need: name and value (and a Time at ms, as sent).
	c := metrics.Sample{Seq: smp.Seq, Time: time.UnixMilli(smp.Time.UnixMilli()), Points: make([]metrics.Point, len(smp.Points))}
	for i, p := range smp.Points {
		c.Points[i] = metrics.Point{Name: p.Name, Value: p.Value}
	}
	seq := smp.Seq
	s.mu.Lock()
	if s.f == nil {
		s.mu.Unlock()
		return ErrClosed
	}
	if smp.Seq >= s.nextSeq {
		s.nextSeq = smp.Seq + 1
	}
	if n := len(s.attempts); n > 0 {
		s.attempts[n-1].LastSample = &c
	}
	if len(s.tracked) > 0 && (len(s.pend) == 0 || s.pend[len(s.pend)-1].seq < seq) {
		s.pend = append(s.pend, entry{seq: seq, off: -1, smp: &c})
	}
	s.enqueueLineLocked(s.enc.sample(&c), seq, "")
	chans := s.notify
	s.mu.Unlock()
	for _, ch := range chans {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return nil
}

// Pending returns up to max samples that sink has not acknowledged for run,
// oldest first.
func (s *Spool) Pending(sink, run string, max int) []metrics.Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	acked := s.ackOf(sink, run)
	var out []metrics.Sample
	for i := s.firstAfterLocked(acked); i < len(s.pend) && len(out) < max; i++ {
		e := &s.pend[i]
		if e.smp != nil {
			out = append(out, *e.smp)
			continue
		}
		smp, err := s.readAtLocked(e)
		if err != nil {
			// Not readable any more (the file changed under bridge): it
			// cannot be sent; say so once per sample, then move on.
			s.log.Warn("cannot re-read a sample from the spool; it is skipped", "seq", e.seq, "err", err)
			s.pend = append(s.pend[:i], s.pend[i+1:]...)
			i--
			continue
		}
		out = append(out, smp)
	}
	return out
}

// firstAfterLocked is the index of the first pending sample after seq.
func (s *Spool) firstAfterLocked(seq int64) int {
	return sort.Search(len(s.pend), func(i int) bool { return s.pend[i].seq > seq })
}

func (s *Spool) readAtLocked(e *entry) (metrics.Sample, error) {
	if e.n <= 0 || e.n > s.opt.MaxLine+1 {
		return metrics.Sample{}, fmt.Errorf("line of %d bytes at byte %d", e.n, e.off)
	}
	b := make([]byte, e.n)
	if _, err := s.f.ReadAt(b, e.off); err != nil {
		return metrics.Sample{}, fmt.Errorf("reading spool %s at byte %d: %w", s.path, e.off, err)
	}
	rec, ok := parseRecord(bytes.TrimSpace(b))
	if !ok || rec.Type != TypeSample || *rec.Seq != e.seq {
		return metrics.Sample{}, fmt.Errorf("spool %s at byte %d: not sample %d", s.path, e.off, e.seq)
	}
	return toSample(rec), nil
}

// PendingCount is how many samples sink has not acknowledged for run.
func (s *Spool) PendingCount(sink, run string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pend) - s.firstAfterLocked(s.ackOf(sink, run))
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
	defer s.mu.Unlock()
	if s.f == nil {
		return ErrClosed
	}
	if seq <= s.ackOf(sink, run) {
		return nil
	}
	k := ackKey(sink, run)
	s.acks[k] = seq
	s.trimLocked()
	s.enqueueLineLocked(s.enc.ack(sink, run, seq), -1, k)
	s.skipSyncLocked()
	return nil
}

// skipSyncLocked cancels the deferred fsync once every record it was for is
// a sample that every tracked sink acknowledged: the trackers have them, so
// a machine crash that took them from the file would lose nothing. With a
// healthy tracker that is every sample, a few milliseconds after its write:
// the spool is then fsynced only for the records that need it (start, run,
// end, and samples not yet delivered). Not while a sink gave up (its samples
// are only in the file) or after a failed fsync (unsynced is to be written
// again).
func (s *Spool) skipSyncLocked() {
	if !s.armed || !s.ackMayCancelLocked() || s.lowAckLocked() < s.syncSeq {
		return
	}
	s.timer.Stop()
	s.armed = false
	s.unsynced = s.unsynced[:0]
	s.syncSeq, s.syncOther = -1, false
}

// ackMayCancelLocked reports whether acknowledgements can make the pending
// fsync needless: it is only for samples, some sink tracks them, none gave
// up, and no failed fsync waits to be redone.
func (s *Spool) ackMayCancelLocked() bool {
	return !s.syncOther && !s.resync && !s.untrack && len(s.tracked) > 0
}

// Delivered reports whether every sample in the file reached every sink that
// was tracked, with nothing waiting for the file, nothing lost or skipped:
// the file holds nothing a user still needs.
func (s *Spool) Delivered() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	return len(s.tracked) > 0 && !s.untrack && len(s.pend) == 0 && len(s.queue) == 0 &&
		st.LostUnwritten == 0 && st.DroppedByCap == 0 && st.BadLines == 0
}

// trimLocked drops samples every tracked sink has acknowledged.
func (s *Spool) trimLocked() {
	i := len(s.pend)
	if len(s.tracked) > 0 {
		i = s.firstAfterLocked(s.lowAckLocked())
	}
	for _, e := range s.pend[:i] {
		if e.smp != nil && e.off >= 0 {
			s.inMem--
		}
	}
	s.pend = append([]entry(nil), s.pend[i:]...)
}

// enqueueLocked queues rec for the file and writes what is queued.
func (s *Spool) enqueueLocked(rec Record, seq int64, ack string) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding spool record: %w", err)
	}
	s.enqueueLineLocked(append(b, '\n'), seq, ack)
	return nil
}

// enqueueLineLocked queues a copy of line (a whole record and its newline)
// and writes what is queued.
func (s *Spool) enqueueLineLocked(line []byte, seq int64, ack string) {
	if ack != "" {
		// Only the newest acknowledgement of a sink matters.
		for i := len(s.queue) - 1; i >= 0; i-- {
			if s.queue[i].ack == ack {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				break
			}
		}
	}
	s.queue = append(s.queue, queued{line: append([]byte(nil), line...), seq: seq, ack: ack})
	if seq >= 0 {
		s.queuedN++
	}
	s.flushLocked(false)
	s.boundLocked()
}

// boundLocked drops the oldest waiting samples past MaxBuffered.
func (s *Spool) boundLocked() {
	for s.queuedN > s.opt.MaxBuffered {
		for i, q := range s.queue {
			if q.seq < 0 {
				continue
			}
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			s.queuedN--
			s.stats.LostUnwritten++
			if j := s.firstAfterLocked(q.seq - 1); j < len(s.pend) && s.pend[j].seq == q.seq {
				s.pend = append(s.pend[:j], s.pend[j+1:]...)
			}
			break
		}
	}
	if s.stats.LostUnwritten > 0 && !s.lostLog {
		s.lostLog = true
		s.log.Error("the spool's memory buffer is full; dropping the oldest samples that could not be written",
			"buffer_limit", s.opt.MaxBuffered)
	}
}

// flushLocked writes the queue in order with one fsync; a failure leaves the
// file as it was (whole lines only) and the queue for the next try, which
// waits for nextTry unless forced.
func (s *Spool) flushLocked(force bool) {
	if len(s.queue) == 0 || s.f == nil {
		return
	}
	if s.failing && !force && time.Now().Before(s.nextTry) {
		return
	}
	if s.resync {
		// What a failed fsync may have lost goes first, so that the file
		// keeps its records in order.
		if err := s.syncLocked(); err != nil {
			s.failLocked(err)
			return
		}
	}
	buf := s.wbuf[:0]
	for _, q := range s.queue {
		buf = append(buf, q.line...)
	}
	if cap(buf) <= maxKeptBuf {
		s.wbuf = buf // kept for the next write; a flush after an outage is not
	}
	if s.opt.MaxSize > 0 && s.size+int64(len(buf)) > s.opt.MaxSize && s.size > 0 {
		if err := s.compactLocked(); err != nil {
			s.failLocked(err)
			s.nextTry = time.Now().Add(max(s.gap, compactRetryGap))
			return
		}
	}
	if err := s.writeLocked(buf); err != nil {
		s.failLocked(err)
		return
	}
	off := s.size
	s.size += int64(len(buf))
	if s.opt.SyncEvery > 0 {
		s.unsynced = append(s.unsynced, buf...)
	}
	arm := false
	for _, q := range s.queue {
		if q.ack == "" && s.opt.SyncEvery > 0 {
			arm = true
			if q.seq >= 0 {
				s.syncSeq = max(s.syncSeq, q.seq)
			} else {
				s.syncOther = true
			}
		}
		if q.seq >= 0 {
			s.stats.Written++
			if j := s.firstAfterLocked(q.seq - 1); j < len(s.pend) && s.pend[j].seq == q.seq && s.pend[j].off < 0 {
				s.pend[j].off, s.pend[j].n = off, len(q.line)
				s.inMem++
			}
		}
		off += int64(len(q.line))
	}
	n := len(s.queue)
	clear(s.queue) // the lines and keys go; the slice is reused
	s.queue, s.queuedN = s.queue[:0], 0
	s.evictLocked()
	if len(s.unsynced) >= maxUnsynced {
		if err := s.syncLocked(); err != nil {
			s.failLocked(err)
			return
		}
	} else if arm && len(s.unsynced) > 0 {
		if err := s.deferSyncLocked(); err != nil {
			s.failLocked(err)
			return
		}
	}
	if s.failing {
		s.failing = false
		s.log.Info("the spool is writable again; the records held in memory are written", "records", n)
	}
}

// deferSyncLocked sees that what was just written is fsynced within
// SyncEvery: samples and the other records call it, acks alone do not (a lost
// ack only makes a tracker get samples it has again). When the next such
// write is not expected before the oldest unsynced record is due (it comes
// as far after this one as this one after the last: samples are periodic),
// it fsyncs now instead of setting the timer: the fsync then rides on a
// wake-up bridge has anyway, where a timer firing alone would wake the whole
// runtime once more. So it fsyncs earlier than SyncEvery, never later.
func (s *Spool) deferSyncLocked() error {
	now := s.now()
	gap := now.Sub(s.lastArm)
	first := s.lastArm.IsZero()
	s.lastArm = now
	if !s.armed {
		s.due = now.Add(s.opt.SyncEvery)
	}
	// When acknowledgements may make the fsync needless (skipSyncLocked),
	// wait for them instead.
	if !first && !s.ackMayCancelLocked() && s.due.Sub(now) < gap+gap/2 {
		return s.syncLocked()
	}
	if !s.armed {
		s.armed = true
		if s.timer == nil {
			s.timer = time.AfterFunc(s.opt.SyncEvery, s.deferredSync)
		} else {
			s.timer.Reset(s.opt.SyncEvery)
		}
	}
	return nil
}

// deferredSync is the timer's fsync. A failure is reported as a failed
// write: the records stay in memory and are written again by the next
// attempt (the next record, or Close).
func (s *Spool) deferredSync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return
	}
	if err := s.syncLocked(); err != nil {
		s.failLocked(err)
	}
}

// syncedLocked is where the bytes known to be on disk end.
func (s *Spool) syncedLocked() int64 { return s.size - int64(len(s.unsynced)) }

// syncLocked makes every written record durable: the unsynced bytes are
// first written again if an earlier fsync failed, then the file is fsynced.
// On failure they stay in memory for the next attempt.
func (s *Spool) syncLocked() error {
	if s.armed {
		s.timer.Stop()
		s.armed = false
	}
	if len(s.unsynced) == 0 {
		return nil
	}
	if s.resync {
		synced := s.syncedLocked()
		if err := s.f.Truncate(synced); err != nil {
			return fmt.Errorf("writing spool %s again from byte %d after a failed fsync: %w", s.path, synced, err)
		}
		if _, err := s.f.Write(s.unsynced); err != nil {
			return fmt.Errorf("writing spool %s again from byte %d after a failed fsync: %w", s.path, synced, err)
		}
	}
	if err := s.f.Sync(); err != nil {
		s.resync = true
		return fmt.Errorf("syncing spool %s: %w", s.path, err)
	}
	s.resync = false
	s.unsynced = s.unsynced[:0]
	s.syncSeq, s.syncOther = -1, false
	if cap(s.unsynced) > 2*maxUnsynced {
		s.unsynced = nil // a flush after an outage: not kept
	}
	return nil
}

// writeLocked appends b and fsyncs it, unless SyncEvery defers that; on
// failure it cuts the file back to its last whole record, so that a retry
// does not glue records to torn bytes.
func (s *Spool) writeLocked(b []byte) error {
	_, err := s.f.Write(b)
	if err == nil && s.opt.SyncEvery <= 0 {
		err = s.f.Sync()
	}
	if err != nil {
		if terr := s.f.Truncate(s.size); terr != nil {
			err = errors.Join(err, fmt.Errorf("cutting back to byte %d: %w", s.size, terr))
		}
		return fmt.Errorf("writing spool %s: %w", s.path, err)
	}
	return nil
}

func (s *Spool) failLocked(err error) {
	s.stats.WriteFailures++
	s.nextTry = time.Now().Add(s.gap)
	if !s.failing {
		s.failing = true
		s.stats.Outages++
		s.log.Error("cannot write the spool; samples still go to the trackers, wait in memory and are written when it works again",
			"err", err, "buffer_limit", s.opt.MaxBuffered)
	}
}

// Close writes what waits in memory if it can, and closes the file.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	s.flushLocked(true)
	if s.queuedN > 0 {
		s.log.Error("samples never reached the spool file (they were sent to the trackers that were up)", "samples", s.queuedN)
	}
	serr := s.syncLocked()
	if serr != nil {
		s.failLocked(serr)
		s.log.Error("the spool's last records are in the file but may not survive a machine crash (fsync failed)",
			"bytes", len(s.unsynced), "err", serr)
	}
	err := s.f.Close()
	s.f = nil
	if err != nil {
		return errors.Join(serr, fmt.Errorf("closing spool %s: %w", s.path, err))
	}
	return serr
}

// Remove closes the spool and deletes its file: for a run whose samples were
// all delivered, when the user did not ask to keep the file.
func (s *Spool) Remove() error {
	if err := s.Close(); err != nil {
		return err
	}
	if err := os.Remove(s.path); err != nil {
		return fmt.Errorf("removing delivered spool %s: %w", s.path, err)
	}
	return nil
}
