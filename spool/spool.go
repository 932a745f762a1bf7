package spool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
)

// Defaults of Options. The byte bounds are met only by samples larger than
// ordinary ones (60 series: a 3 KB line, 9 KB held in memory), which meet
// the sample counts first: 1024 of them hold 9 MiB, and 4096 waiting for
// the file 46 MiB (their lines too).
const (
	defaultMemSamples       = 1024
	defaultMemBytes         = 16 << 20
	defaultMaxBuffered      = 4096
	defaultMaxBufferedBytes = 64 << 20
)

// maxBatchBytes bounds what one Pending returns (at least one sample): a
// batch read back from the file is that much more memory, per sink.
const maxBatchBytes = 8 << 20

// errClosed is returned by writes to a closed spool.
var errClosed = errors.New("spool is closed")

// Options tune a spool; the zero value gives the defaults.
type Options struct {
	// Logger receives the spool's few messages (repairs, write failures and
	// recoveries, the size cap, points left out). Default slog.Default().
	Logger *slog.Logger
	// MaxSize caps the file in bytes: when a write would pass it, the file is
	// rewritten without samples (down to half the cap), delivered ones
	// first, then the oldest unsent. 0 or less means no cap: a caller that
	// does not choose a cap never loses a sample to one.
	MaxSize int64
	// MaxLine bounds one record in bytes: longer lines are skipped when
	// read, and a sample is cut to fit before it is written. 0 means
	// DefaultMaxLine.
	MaxLine int
	// MaxPoints bounds the points of one sample; 0 means defaultMaxPoints.
	MaxPoints int
	// MemSamples is how many unacknowledged samples stay in memory, and
	// MemBytes how much memory they may hold; past either, the oldest are
	// re-read from the file when needed. 0 means defaultMemSamples,
	// defaultMemBytes.
	MemSamples int
	MemBytes   int64
	// MaxBuffered is how many samples wait in memory while the file cannot
	// be written (or, for a memory spool, for the trackers), and
	// MaxBufferedBytes how much memory they may hold (their lines and
	// samples); past either, the oldest of them are dropped (and counted),
	// never the newest. 0 means defaultMaxBuffered, defaultMaxBufferedBytes.
	MaxBuffered      int
	MaxBufferedBytes int64
	// MustExist refuses a missing file (`bridge sync` of a mistyped path)
	// instead of creating it.
	MustExist bool
	// SyncEvery is the longest a record the trackers do not hold waits for
	// its fsync (see the package doc); 0 fsyncs every write.
	SyncEvery time.Duration
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxLine <= 0 {
		o.MaxLine = DefaultMaxLine
	}
	if o.MaxPoints <= 0 {
		o.MaxPoints = defaultMaxPoints
	}
	if o.MemSamples <= 0 {
		o.MemSamples = defaultMemSamples
	}
	if o.MemBytes <= 0 {
		o.MemBytes = defaultMemBytes
	}
	if o.MaxBuffered <= 0 {
		o.MaxBuffered = defaultMaxBuffered
	}
	if o.MaxBufferedBytes <= 0 {
		o.MaxBufferedBytes = defaultMaxBufferedBytes
	}
}

// Stats count what happened to the spool since Open, for the end-of-run table.
type Stats struct {
	Written       int64 // sample records written to the file
	Buffered      int   // records waiting in memory for the file now
	WriteFailures int64 // failed attempts to write the file
	Outages       int   // times writing failed after working (or at once)
	LostUnwritten int64 // samples dropped from a full memory buffer (count or bytes): never in the file
	DroppedByCap  int64 // samples not yet delivered that the size cap removed
	Compactions   int   // rewrites of the file by the size cap
	PointsLeftOut int64 // points not spooled: past MaxPoints or MaxLine, or a name over MaxKey
	LongNames     int64 // of them, names over MaxKey
	// LeftOutByTier counts the rest of them by Tier, and LeftOutExample
	// names a series of each (the first left out).
	LeftOutByTier  [TierOwn + 1]int64
	LeftOutExample [TierOwn + 1]string
	BadLines       int   // lines skipped when the file was read
	BadLineNums    []int // the first few of them, 1-based
	BadValues      int   // sample values read that are not numbers (each skipped alone)
	TornTail       bool  // Open found an unterminated last line (and repaired it)
	// Stalled is the call on the file (a write, an fsync) that had not
	// returned when Close stopped waiting for the disk; "" if none. Then
	// Buffered records are not known to be in the file (queued, or in the
	// stalled call), and Unsynced bytes in it may not survive a machine
	// crash.
	Stalled  string
	Unsynced int
}

// Attempt is what the file says about one earlier run of bridge on it.
type Attempt struct {
	Start      Record  // its start record (with the run records that name it merged in)
	End        *Record // its end record; nil when it stopped without a clean shutdown
	LastSample *metrics.Sample
	Samples    int // sample records it wrote that the file holds

	lastSeq int64 // its highest sample seq; -1: none
}

// Spool is an open spool: a file with one writer, or, when no file could be
// opened, samples held in memory for the trackers (NewMemory).
//
// Contract: safe for concurrent use (the sampler appends while forwarders
// read Pending and Ack). Append, Ack, WriteStart, WriteRun and WriteEnd
// never wait for the disk and never fail for a full, broken or stalled
// one: the record waits in memory for the writer's goroutine; they fail
// only on a closed spool. Pending and Track wait for the disk only when
// they read the file, out of the lock. Returned samples and attempts are
// the caller's. See the package doc.
type Spool struct {
	path string
	opt  Options
	log  *slog.Logger

	mu      sync.Mutex
	closed  bool
	w       *writer // nil for a memory spool
	ix      index
	nextSeq int64
	notify  []chan struct{}
	stats   Stats
	enc     encoder // encodes samples and acks (reused: no allocation)
	leftLog bool    // the points-left-out message was given
	bufLog  bool    // a memory spool's buffer-full message was given
}

// openWith opens (creating if needed, private to the user) the spool at
// path, takes its writer lock, and reads what it holds. While another live
// process holds the lock it fails with ErrLocked. An unterminated last line
// (a crash or a full disk mid-write) is repaired: kept when it is a whole
// record, cut off otherwise. Lines that are not records are skipped,
// counted and logged once. Otherwise it fails only when the file cannot be
// opened or read. p, when not nil, is marked at each step (OpenWithin).
func openWith(path string, opt Options, p *progress) (*Spool, error) {
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
	log := opt.Logger.With("spool", path)
	p.mark()
	f, err := openLocked(path, flags|syscall.O_NOCTTY, log)
	if errors.Is(err, ErrLocked) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("opening spool %s: %w", path, err)
	}
	// Only a regular file is a spool: the open descriptor is checked, so
	// /dev/zero (read without end), a FIFO (which O_RDWR opens at once,
	// then waits in its read) or a device never holds the job back.
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%w (%s)", kfile.ErrNotRegular, kfile.KindOf(st.Mode()))
		}
		return nil, fmt.Errorf("opening spool %s: %w", path, err)
	}
	s := newSpool(path, opt, log)
	s.w = newWriter(path, f, log, &s.opt, &s.stats, &s.ix, &s.mu, s.wakeLocked)
	p.mark()
	res, err := scan(p.reader(f), opt.MaxLine, s.load)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("reading spool %s: %w", path, err)
	}
	s.w.size = res.end
	s.stats.BadLines, s.stats.BadLineNums = res.badLines, res.badAt
	p.mark()
	if res.tailOff >= 0 {
		s.stats.TornTail = true
		s.repairTail(res, f)
	}
	if res.badLines > 0 {
		s.log.Warn("skipped lines of the spool that are not records", "lines", res.badLines, "first", res.badAt)
	}
	if s.stats.BadValues > 0 {
		s.log.Warn("skipped values of the spool that are not numbers (the rest of their samples is kept)", "values", s.stats.BadValues)
	}
	s.mu.Lock()
	s.w.start()
	s.mu.Unlock()
	return s, nil
}

// NewMemory is a spool without a file, for a job whose spool could not be
// opened: samples wait in memory (within MaxBuffered and MaxBufferedBytes)
// until the trackers acknowledge them, and nothing survives bridge. Path
// is "".
func NewMemory(opt Options) *Spool {
	opt.defaults()
	return newSpool("", opt, opt.Logger)
}

func newSpool(path string, opt Options, log *slog.Logger) *Spool {
	return &Spool{path: path, opt: opt, log: log, ix: newIndex(opt.MemSamples, opt.MemBytes)}
}

// InMemory reports whether the spool has no file (NewMemory).
func (s *Spool) InMemory() bool { return s.w == nil }

// repairTail makes the file end with a whole line again, so that the next
// record is not glued to a torn one.
func (s *Spool) repairTail(res scanResult, f *os.File) {
	w := s.w
	if !res.tailLong {
		if rec, ok := parseRecord(bytes.TrimSpace(res.tail)); ok {
			// A whole record whose newline was not written: keep it.
			if _, err := f.Write([]byte{'\n'}); err == nil {
				s.load(rec, append(res.tail, '\n'), res.tailOff)
				w.size = res.tailOff + int64(len(res.tail)) + 1
				s.log.Info("repaired the spool's last line (its newline was missing)")
				return
			}
		}
	}
	if err := f.Truncate(res.end); err != nil {
		// The next record goes after the torn bytes, on a line of its own.
		s.log.Warn("cannot cut the spool's torn last line; it will be skipped when read", "err", err)
		w.size = res.end
		if fi, err := f.Stat(); err == nil {
			w.size = fi.Size()
		}
		w.queue = append(w.queue, queued{line: []byte{'\n'}, seq: -1})
		return
	}
	s.log.Info("cut a torn last line off the spool (bridge stopped mid-write)", "bytes", max(int64(len(res.tail)), 1), "offset", res.tailOff)
}

// load takes one record read from the file at off.
func (s *Spool) load(rec *Record, line []byte, off int64) {
	if rec.Type == TypeSample && *rec.Seq >= s.nextSeq {
		s.nextSeq = *rec.Seq + 1
	}
	s.stats.BadValues += rec.badValues
	s.ix.load(rec, line, off)
}

// Path is the spool's file path; "" for a memory spool.
func (s *Spool) Path() string { return s.path }

// Stats reports the counts since Open.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	if s.w != nil {
		st.Buffered, st.Unsynced = s.w.waiting(), len(s.w.unsynced)
	}
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

// Attempts lists what earlier runs of bridge left in the file (and the
// current one, once WriteStart has recorded it).
func (s *Spool) Attempts() []Attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ix.attempts)
}

// Untrack stops keeping samples for a sink that gave up (a permanent error):
// they stay in the file for `bridge sync`, the file is fsynced whatever the
// other sinks acknowledge, and it is never Delivered.
func (s *Spool) Untrack(sink, run string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ix.untrack(ackKey(sink, run))
}

// Notify returns a channel that receives a value (without blocking the
// writer) after each Append, and when appended samples reach the file or
// turn out to wait in memory for it.
func (s *Spool) Notify() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{}, 1)
	s.notify = append(s.notify, ch)
	return ch
}

// WriteStart records the start of an attempt; the samples appended after it
// belong to it.
func (s *Spool) WriteStart(rec Record) error {
	rec.Type = TypeStart
	return s.writeRecord(rec, func(r *Record) { r.Attempt = s.ix.addAttempt(*r) })
}

// WriteRun records that sink writes to rec.Run for an attempt, found after
// its start record: the current attempt's (a late start), or, with
// rec.Attempt set, an earlier one's (`bridge sync` creating the run of an
// attempt that had none). rec.Info is merged into that start record's
// Info. Attempts reports it as part of the start record.
func (s *Spool) WriteRun(rec Record) error {
	rec.Type = TypeRun
	return s.writeRecord(rec, func(r *Record) { s.ix.mergeRun(*r) })
}

// WriteEnd records a clean shutdown of the current attempt.
func (s *Spool) WriteEnd(rec Record) error {
	rec.Type = TypeEnd
	return s.writeRecord(rec, func(r *Record) { s.ix.setEnd(*r) })
}

// writeRecord puts a start, run or end record into the index (index) and
// the file.
func (s *Spool) writeRecord(rec Record, index func(*Record)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	index(&rec)
	return s.enqueueLocked(rec)
}

// enqueueLocked writes a start, run or end record. One that would not fit
// the reader's line limit (tags of any length go into Info) loses Info
// values until it does (fitInfo), said in one WARN.
func (s *Spool) enqueueLocked(rec Record) error {
	if s.w == nil {
		return nil
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding spool record: %w", err)
	}
	// Each pass leaves out at least what its excess needs; a second is a
	// safety net, and the last leaves out every value.
	for pass := 0; len(b) >= s.lineLimit() && len(rec.Info) > 0; pass++ {
		all := len(rec.Info)
		info, left, family := fitInfo(rec.Info, len(b)-(s.lineLimit()-1))
		if pass > 0 {
			info, left = nil, all
		}
		rec.Info = info
		s.log.Warn("a spool record was too long; values of it are left out, the largest family's first",
			"type", rec.Type, "left_out", left, "of", all, "family", truncateKey(family), "max_record_bytes", s.lineLimit()-1)
		if b, err = json.Marshal(rec); err != nil {
			return fmt.Errorf("encoding spool record: %w", err)
		}
	}
	s.w.enqueue(append(b, '\n'), -1, "", 0)
	return nil
}

func truncateKey(k string) string {
	if len(k) > 60 {
		return k[:60] + "..."
	}
	return k
}

// lineLimit is the longest line the writer emits, newline included: what
// any reader of the file, bridge sync's default included, accepts.
func (s *Spool) lineLimit() int { return min(s.opt.MaxLine, DefaultMaxLine) + 1 }

// Append writes a sample and makes it pending for the tracked sinks that
// need it. Only names and values are kept, within the bounds of Options
// (excess points are left out, counted, and said once). When the file
// cannot be written the sample waits in memory (see Options); it reaches
// the sinks either way.
func (s *Spool) Append(smp metrics.Sample) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	c, line := s.boundLocked(&smp)
	if c.Seq >= s.nextSeq {
		s.nextSeq = c.Seq + 1
	}
	s.ix.appended(c, len(line))
	if s.w != nil {
		// Waiting for the file, it holds its line and its sample.
		s.w.enqueue(line, c.Seq, "", int64(len(line))+c.MemBytes())
	} else {
		s.boundMemoryLocked()
	}
	s.wakeLocked()
	s.mu.Unlock()
	return nil
}

// wakeLocked tells the forwarders (Notify) that samples may wait for them,
// without blocking.
func (s *Spool) wakeLocked() {
	for _, ch := range s.notify {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// boundLocked copies what the spool keeps of smp (its points, the time
// at ms, as sent) and encodes its line, within the bounds.
func (s *Spool) boundLocked(smp *metrics.Sample) (*metrics.Sample, []byte) {
	c := &metrics.Sample{Seq: smp.Seq, Time: time.UnixMilli(smp.Time.UnixMilli())}
	fits := len(smp.Points) <= s.opt.MaxPoints
	for i := 0; fits && i < len(smp.Points); i++ {
		fits = len(smp.Points[i].Name()) <= MaxKey
	}
	if fits {
		c.Points = slices.Clone(smp.Points)
		if line := s.enc.sample(c); len(line) <= s.lineLimit() {
			return c, line
		}
	}
	// Rare: cut to the bounds. The budget is the line less its frame.
	frame := len(s.enc.sample(&metrics.Sample{Seq: c.Seq, Time: c.Time})) + len(`,"metrics":{}`)
	var scratch []byte
	b := bound(smp.Points, s.opt.MaxPoints, s.lineLimit()-frame, func(p *metrics.Point) int {
		scratch = appendValue(scratch[:0], true, p)
		return len(scratch)
	})
	c.Points = b.pts
	if left := int64(b.longName + b.over); left > 0 {
		s.stats.PointsLeftOut += left
		s.stats.LongNames += int64(b.longName)
		for t, n := range b.byTier {
			s.stats.LeftOutByTier[t] += int64(n)
			if n > 0 && s.stats.LeftOutExample[t] == "" {
				s.stats.LeftOutExample[t] = b.first[t]
			}
		}
		if !s.leftLog {
			// Once a spool: the same sample's excess comes every interval.
			s.leftLog = true
			s.log.Warn("a sample holds more than the spool keeps; the excess points are left out (not spooled, not sent), passed-through series first, then per-port or per-device ones, bridge's own last; counted in the end-of-run table",
				"seq", c.Seq, "names_over_250_chars", b.longName, "points_over_the_bounds", b.over,
				"passed_through", b.byTier[TierPassedThrough], "per_port_or_device", b.byTier[TierInstance], "bridge_own", b.byTier[TierOwn],
				"e_g", firstOf(b.first), "max_points", s.opt.MaxPoints, "max_record_bytes", s.lineLimit()-1)
		}
	}
	return c, s.enc.sample(c)
}

// boundMemoryLocked keeps a memory spool's samples within MaxBuffered and
// MaxBufferedBytes: the oldest are dropped, counted, and said once.
func (s *Spool) boundMemoryLocked() {
	keep, bytes := 0, int64(0)
	for i := len(s.ix.pend) - 1; i >= 0; i-- {
		bytes += s.ix.pend[i].held()
		if keep > 0 && (keep == s.opt.MaxBuffered || bytes > s.opt.MaxBufferedBytes) {
			break
		}
		keep++
	}
	over := len(s.ix.pend) - keep
	if over <= 0 {
		return
	}
	clear(s.ix.pend[:over])
	s.ix.pend = append(s.ix.pend[:0], s.ix.pend[over:]...)
	s.ix.reshaped()
	s.stats.LostUnwritten += int64(over)
	if !s.bufLog {
		s.bufLog = true
		s.log.Error("the trackers are behind and there is no spool file; dropping the oldest samples held in memory",
			"buffer_limit", s.opt.MaxBuffered, "buffer_limit_bytes", s.opt.MaxBufferedBytes)
	}
}

// PendingCount is how many samples sink has not acknowledged for run.
func (s *Spool) PendingCount(sink, run string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ix.count(ackKey(sink, run))
}

// Acked is the highest Seq sink acknowledged for run, -1 if none.
func (s *Spool) Acked(sink, run string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ix.ackOf(ackKey(sink, run))
}

// Ack records that sink acknowledged every sample up to seq for run.
func (s *Spool) Ack(sink, run string, seq int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	k := ackKey(sink, run)
	if !s.ix.ack(k, seq) || s.w == nil {
		return nil
	}
	s.w.enqueue(s.enc.ack(sink, run, seq), -1, k, 0)
	return nil
}

// Delivered reports whether every sample in the file reached every run of
// the attempt that wrote it, with the file writable (nothing waiting for
// it after a failure), nothing lost or skipped: the file holds nothing a
// user still needs.
func (s *Spool) Delivered() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	return s.w != nil && !s.w.failing && s.ix.allDelivered() &&
		st.LostUnwritten == 0 && st.DroppedByCap == 0 && st.BadLines == 0 && st.BadValues == 0 && st.PointsLeftOut == 0
}

// Written waits until the file has every record given before the call
// (written, not yet fsynced), or until ctx ends: then it returns an error
// that wraps ErrStalled, and from then on the trackers are offered the
// samples that wait for the file from memory. Until the file has a
// sample, Pending offers it only while the file fails or stalls (a write
// or fsync that has not returned for a second): a tracker never sees a
// sample before the file has it, unless the file cannot take it.
func (s *Spool) Written(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil || s.closed {
		return nil
	}
	return s.w.written(ctx)
}

// Close writes what waits in memory if it can, fsyncs, and closes the file
// (which lets its lock go), however long the disk takes.
func (s *Spool) Close() error { return s.CloseContext(context.Background()) }

// CloseContext is Close until ctx ends: then it returns an error that
// wraps ErrStalled, what the disk had not taken is reported (Stats.Stalled,
// and one ERROR), and the file is closed if the disk ever answers.
func (s *Spool) CloseContext(ctx context.Context) error { return s.shut(ctx, false) }

// Remove deletes the spool's file and closes it: for a run whose samples
// were all delivered, when the user did not ask to keep the file. The file
// goes while its lock is held, so that no other bridge writes into it.
func (s *Spool) Remove() error { return s.RemoveContext(context.Background()) }

// RemoveContext is Remove until ctx ends, as CloseContext.
func (s *Spool) RemoveContext(ctx context.Context) error { return s.shut(ctx, true) }

func (s *Spool) shut(ctx context.Context, remove bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.w == nil {
		return nil
	}
	return s.w.close(ctx, remove)
}
