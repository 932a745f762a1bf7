package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"
)

// ErrStalled is returned when the disk under the spool did not answer in
// time: by CloseContext and RemoveContext (a write or fsync that did not
// return before their context ended), and by OpenWithin (a step of the
// open that did not return within its bound). Bridge stops waiting for it.
var ErrStalled = errors.New("the disk under the spool did not answer in time")

// file is what the writer needs of its *os.File (a seam for tests that
// make writes or fsyncs fail or stall).
type file interface {
	io.Writer
	io.ReaderAt
	Sync() error
	Truncate(size int64) error
	Close() error
}

// queued is a record waiting to be written, in order.
type queued struct {
	line []byte
	seq  int64  // a sample's seq; -1 for other records
	ack  string // an ack's key, so a newer ack replaces it
	mem  int64  // a sample's memory while it waits (its line and its sample)
}

// ledger is what the writer tells the index of the samples it writes, and
// asks it, and all it knows of it. Calls are made with the spool's lock
// held.
type ledger interface {
	// placed: the line of sample seq is in the file at off, n bytes long.
	placed(seq, off int64, n int)
	// drop: sample seq will never be in the file (the buffer was full).
	drop(seq int64)
	// evict: the file is durable up to byte synced (fsynced, or held by
	// the trackers); the samples before it may leave memory.
	evict(synced int64)
	// moved: a size-cap rewrite put the samples it kept at these offsets
	// (by seq); the others left the file.
	moved(newOff map[int64]int64)
	// safeThrough is the highest seq of the current attempt every tracker
	// holds: the fsync rule needs no fsync for it.
	safeThrough() int64
	// delivered reports whether sample seq of attempt att (its number of
	// start records before it, less one) reached every run of its
	// attempt: the size cap drops those first.
	delivered(att int, seq int64) bool
	// lastAcks are the acknowledgements a rewrite keeps: the highest of
	// each sink and run, in order.
	lastAcks() []Record
}

// writer owns the spool's file: it appends whole records, keeps those it
// cannot write in a bounded memory buffer, cuts a failed write back to the
// last whole record, applies the fsync rule (see the package doc) and the
// size cap. It knows the index only as its ledger.
//
// Every call on the file is made by one goroutine of its own (run), with
// the spool's lock (mu) let go around it: mu guards memory only, so a disk
// that stalls (a hard NFS mount whose server went away, a hung FUSE daemon)
// holds run alone. The sampler's appends, the trackers' acks and Pending
// go on from memory; Close waits for run only as long as its caller allows.
// What run holds while it is out of the lock (the batch in flight, wbuf,
// the file) no other goroutine changes.
type writer struct {
	path string
	f    file // replaced (under mu, by run) by a size-cap rewrite; nil once closed
	log  *slog.Logger
	opt  *Options
	st   *Stats
	ix   ledger
	mu   *sync.Mutex

	size     int64    // bytes of whole records in the file: where the next goes
	queue    []queued // waiting for run
	inflight []queued // taken off queue: being written by run
	queuedN  int      // samples in queue
	queuedB  int64    // the memory they hold (queued.mem)
	failing  bool
	nextTry  time.Time // while failing, no retry before this
	gap      time.Duration
	lostLog  bool   // the buffer-full message was given
	capLog   uint8  // the size-cap kinds already given at WARN
	wbuf     []byte // what one write sends (run's, reused)
	gen      uint64 // size-cap rewrites: offsets taken before one are stale

	// The fsync rule. needSeq and needAll say what was written since the
	// last fsync that the trackers do not hold: the highest sample (-1:
	// none) and whether a start, run or end record. unsynced is a copy of
	// those bytes, to write them again when an fsync failed (Linux reports
	// a writeback error once and may drop the pages): resync. due: the
	// timer fired, run fsyncs if it is still needed.
	timer    *time.Timer
	armed    bool
	due      bool
	needSeq  int64
	needAll  bool
	unsynced []byte
	resync   bool

	// run and those who wait for it.
	wake      chan struct{} // a kick for run (one is enough)
	kicks     uint64        // work asked of run
	served    uint64        // kicks run has answered
	idle      *sync.Cond    // on mu: served moved, or run returned
	closing   bool
	remove    bool          // closing deletes the file instead of fsyncing it
	done      chan struct{} // run returned: the file is closed
	closeErr  error
	busy      string    // the call run is in, out of the lock ("" none)
	busySince time.Time // since when

	placed     func()        // told (mu held) when samples reached the file, or failed to
	stallAfter time.Duration // a call this old is a stalled disk (offered)
	stalled    bool          // written gave up waiting: the disk counts as stalled
}

// Bounds of the writer.
const (
	// retryGap spaces retries of a failing file: each retry rewrites the
	// whole buffer, and a cap rewrite reads the whole file.
	retryGap        = time.Second
	compactRetryGap = 30 * time.Second

	// maxKeptBuf bounds the write buffer kept between writes.
	maxKeptBuf = 1 << 20

	// maxUnsynced is how many written bytes may wait for an fsync: past it
	// the writer fsyncs at once (it keeps them in memory until then).
	maxUnsynced = 1 << 20

	// stallAfter is how long a write or fsync may take before the disk
	// counts as stalled: then the samples waiting for it go to the
	// trackers from memory, as when it fails.
	stallAfter = time.Second
)

func newWriter(path string, f file, log *slog.Logger, opt *Options, st *Stats, ix ledger, mu *sync.Mutex, placed func()) *writer {
	return &writer{path: path, f: f, log: log, opt: opt, st: st, ix: ix, mu: mu, placed: placed, gap: retryGap, needSeq: -1,
		stallAfter: stallAfter, wake: make(chan struct{}, 1), idle: sync.NewCond(mu), done: make(chan struct{})}
}

// offered reports whether samples not yet in the file may go to the
// trackers: the file is failing, or a call on it has been stalled for
// stallAfter. Otherwise a tracker never sees a sample before the file
// has it. mu held.
func (w *writer) offered() bool {
	return w.failing || w.stalled || w.busy != "" && time.Since(w.busySince) >= w.stallAfter
}

// written waits until run has written what was queued before the call,
// the file fails, or the disk counts as stalled: a call of run older than
// stallAfter, or ctx ended (then it counts as stalled from now on). mu
// held; it is let go while waiting.
func (w *writer) written(ctx context.Context) error {
	k := w.kicks
	wake := func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.idle.Broadcast()
	}
	defer context.AfterFunc(ctx, wake)()
	for w.served < k && w.f != nil && !w.failing {
		if ctx.Err() != nil {
			w.stalled = true
			w.placed()
		}
		if w.offered() {
			what, d := w.stall()
			return fmt.Errorf("writing spool %s: %w (%s for %v)", w.path, ErrStalled, what, d)
		}
		var t *time.Timer
		if w.busy != "" {
			t = time.AfterFunc(w.stallAfter-time.Since(w.busySince), wake)
		}
		w.idle.Wait()
		if t != nil {
			t.Stop()
		}
	}
	return nil
}

// start starts run, once the file is read; what is queued by then (a
// repaired tail's newline) is written first.
func (w *writer) start() {
	go w.run()
	if len(w.queue) > 0 {
		w.kick()
	}
}

// kick asks run to write what is queued and whatever else is due. mu held.
func (w *writer) kick() {
	w.kicks++
	select {
	case w.wake <- struct{}{}:
	default: // one is pending: it covers this one
	}
}

// run is the only goroutine that calls the file: it writes what is queued
// when kicked, fsyncs when the timer says so, and closes the file when
// asked (closing), then returns.
func (w *writer) run() {
	defer close(w.done)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for w.served == w.kicks && !w.closing {
			w.mu.Unlock()
			<-w.wake
			w.mu.Lock()
		}
		kicks := w.kicks
		if w.closing {
			w.closeErr = w.finish()
			w.served = kicks
			w.idle.Broadcast()
			return
		}
		if w.due {
			w.due = false
			if !w.needsSync() {
				w.forget()
			} else if err := w.sync(); err != nil {
				w.fail(err)
			}
		}
		w.flush(false)
		w.served = kicks
		w.idle.Broadcast()
	}
}

// settle waits until run has answered every kick given so far (written what
// was queued, or failed to), so that a reader of the file sees what was
// appended before it. It waits for the disk: never on the sampler's path.
// mu held.
func (w *writer) settle() {
	for k := w.kicks; w.served < k && w.f != nil; {
		w.idle.Wait()
	}
}

// unlocked makes a call on the file (what names it) without the spool's
// lock, so that a stalled disk holds run alone.
func (w *writer) unlocked(what string, call func() error) error {
	w.busy, w.busySince = what, time.Now()
	w.idle.Broadcast() // written times the call
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.busy = ""
	}()
	return call()
}

// enqueue queues a copy of line (a whole record and its newline) for run;
// mem is what a sample holds in memory while it waits.
func (w *writer) enqueue(line []byte, seq int64, ack string, mem int64) {
	if ack != "" {
		// Only the newest acknowledgement of a sink matters.
		for i := len(w.queue) - 1; i >= 0; i-- {
			if w.queue[i].ack == ack {
				w.queue = append(w.queue[:i], w.queue[i+1:]...)
				break
			}
		}
	}
	w.queue = append(w.queue, queued{line: append([]byte(nil), line...), seq: seq, ack: ack, mem: mem})
	if seq >= 0 {
		w.queuedN++
		w.queuedB += mem
		w.bound(1, mem)
	}
	w.kick()
}

// bound drops the oldest waiting samples past MaxBuffered or
// MaxBufferedBytes, not counting the newest n (holding mem), which run may
// yet write with them: the buffer holds its bounds while the file fails,
// and the sample that comes when it works again costs none. The newest
// sample always stays.
func (w *writer) bound(n int, mem int64) {
	for {
		older, olderB := w.queuedN-n, w.queuedB-mem
		if older <= 0 || (older <= w.opt.MaxBuffered && (older <= 1 || olderB <= w.opt.MaxBufferedBytes)) {
			break
		}
		for i, q := range w.queue {
			if q.seq < 0 {
				continue
			}
			w.queue = append(w.queue[:i], w.queue[i+1:]...)
			w.queuedN--
			w.queuedB -= q.mem
			w.st.LostUnwritten++
			w.ix.drop(q.seq)
			break
		}
	}
	if w.st.LostUnwritten > 0 && !w.lostLog {
		w.lostLog = true
		w.log.Error("the spool's memory buffer is full; dropping the oldest samples that could not be written",
			"buffer_limit", w.opt.MaxBuffered, "buffer_limit_bytes", w.opt.MaxBufferedBytes)
	}
}

// waiting is how many records wait for the file: queued or in flight.
func (w *writer) waiting() int { return len(w.queue) + len(w.inflight) }

// flush writes the queue in order, in writes of at most maxKeptBuf (or one
// record), so that writing a long buffer after an outage never copies it
// whole; a failure leaves the file as it was (whole lines only) and the
// rest of the queue for the next try, which waits for nextTry unless
// forced. Run only.
func (w *writer) flush(force bool) {
	if len(w.queue) == 0 || w.f == nil {
		return
	}
	if w.failing && !force && time.Now().Before(w.nextTry) {
		return
	}
	n, written := len(w.queue), w.st.Written
	defer func() {
		if w.st.Written > written {
			w.placed()
		}
	}()
	for len(w.queue) > 0 {
		if w.resync {
			// What a failed fsync may have lost goes first, so that the
			// file keeps its records in order.
			if err := w.sync(); err != nil {
				w.fail(err)
				return
			}
		}
		k, buf := 0, w.wbuf[:0]
		for k < len(w.queue) && (k == 0 || len(buf)+len(w.queue[k].line) <= maxKeptBuf) {
			buf = append(buf, w.queue[k].line...)
			k++
		}
		if cap(buf) <= maxKeptBuf {
			w.wbuf = buf // kept for the next write; one of a longer record is not
		}
		// In flight: out of the queue, which others change meanwhile.
		w.inflight = append(w.inflight[:0], w.queue[:k]...)
		w.dequeue(k)
		if w.opt.MaxSize > 0 && w.size+int64(len(buf)) > w.opt.MaxSize && w.size > 0 {
			if err := w.compact(); err != nil {
				w.requeue(err)
				w.nextTry = time.Now().Add(max(w.gap, compactRetryGap))
				return
			}
		}
		if err := w.write(buf); err != nil {
			w.requeue(err)
			return
		}
		off, acks := w.size, false
		w.size += int64(len(buf))
		for _, q := range w.inflight {
			switch {
			case q.seq >= 0:
				w.st.Written++
				w.ix.placed(q.seq, off, len(q.line))
				w.needSeq = max(w.needSeq, q.seq)
			case q.ack == "":
				w.needAll = true
			default:
				acks = true
			}
			off += int64(len(q.line))
		}
		clear(w.inflight)
		w.inflight = w.inflight[:0]
		if err := w.wrote(buf); err != nil {
			w.fail(err)
			return
		}
		if acks {
			w.acked()
		}
	}
	w.ix.evict(w.synced())
	if w.failing {
		w.failing = false
		w.log.Info("the spool is writable again; the records held in memory are written", "records", n)
	}
}

// dequeue takes the first n records off the queue (its slice is reused).
func (w *writer) dequeue(n int) {
	for _, q := range w.queue[:n] {
		if q.seq >= 0 {
			w.queuedN--
			w.queuedB -= q.mem
		}
	}
	rest := copy(w.queue, w.queue[n:])
	clear(w.queue[rest:]) // the lines and keys go
	w.queue = w.queue[:rest]
}

// requeue puts the batch that failed back in front of the queue, in order,
// and records the failure.
func (w *writer) requeue(err error) {
	q := make([]queued, 0, len(w.inflight)+len(w.queue))
	q = append(append(q, w.inflight...), w.queue...)
	for _, r := range w.inflight {
		if r.seq >= 0 {
			w.queuedN++
			w.queuedB += r.mem
		}
	}
	w.queue = q
	clear(w.inflight)
	w.inflight = w.inflight[:0]
	w.bound(0, 0)
	w.fail(err)
}

// write appends b, and fsyncs it when SyncEvery is 0, out of the lock; on
// failure it cuts the file back to its last whole record, so that a retry
// does not glue records to torn bytes. Run only.
func (w *writer) write(b []byte) error {
	f, size := w.f, w.size
	err := w.unlocked("write", func() error { _, err := f.Write(b); return err })
	if err == nil && w.opt.SyncEvery <= 0 {
		err = w.unlocked("fsync", f.Sync)
	}
	if err != nil {
		if terr := w.unlocked("write", func() error { return f.Truncate(size) }); terr != nil {
			err = errors.Join(err, fmt.Errorf("cutting back to byte %d: %w", size, terr))
		}
		return fmt.Errorf("writing spool %s: %w", w.path, err)
	}
	return nil
}

func (w *writer) fail(err error) {
	w.st.WriteFailures++
	w.nextTry = time.Now().Add(w.gap)
	if !w.failing {
		w.failing = true
		w.placed() // what waits in memory goes to the trackers now
		w.st.Outages++
		w.log.Error("cannot write the spool; samples still go to the trackers, wait in memory and are written when it works again",
			"err", err, "buffer_limit", w.opt.MaxBuffered, "buffer_limit_bytes", w.opt.MaxBufferedBytes)
	}
}

// finish ends run's work: it writes what waits in memory if it can and
// fsyncs (or, with remove, deletes the file instead: what it held was
// delivered), then closes the file. Run only.
func (w *writer) finish() error {
	if w.armed {
		w.timer.Stop()
		w.armed = false
	}
	if w.f == nil {
		return nil
	}
	var rerr error
	if w.remove {
		if rerr = w.unlocked("remove", func() error { return os.Remove(w.path) }); rerr == nil {
			// What waited for the file (the end record) goes with it: it
			// held nothing a user needs, and nothing waits for it now.
			w.dequeue(len(w.queue))
			f := w.f
			w.f = nil
			return w.unlocked("close", f.Close)
		}
		rerr = fmt.Errorf("removing delivered spool %s: %w", w.path, rerr)
	}
	w.flush(true)
	if w.queuedN > 0 {
		w.log.Error("samples never reached the spool file (they were sent to the trackers that were up)", "samples", w.queuedN)
	}
	serr := w.sync()
	if serr != nil {
		w.fail(serr)
		w.log.Error("the spool's last records are in the file but may not survive a machine crash (fsync failed)",
			"bytes", len(w.unsynced), "err", serr)
	}
	f := w.f
	w.f = nil
	if err := w.unlocked("close", f.Close); err != nil {
		serr = errors.Join(serr, fmt.Errorf("closing spool %s: %w", w.path, err))
	}
	return errors.Join(rerr, serr)
}

// close asks run to finish (with remove, to delete the file) and waits for
// it until ctx ends: then the disk stalled, and what run had not written or
// fsynced is reported (Stats.Stalled) and left to it. mu held; it is let go
// while waiting.
func (w *writer) close(ctx context.Context, remove bool) error {
	w.closing, w.remove = true, remove
	w.kick()
	w.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
	}
	w.mu.Lock()
	select {
	case <-w.done:
		return w.closeErr
	default:
	}
	what, d := w.stall()
	w.st.Stalled = what
	w.log.Error("the disk under the spool does not answer; bridge stops waiting for it: records it has not taken may be lost, and what was written since the last fsync may not survive a machine crash",
		"stalled_in", what, "for", d, "records_not_known_written", w.waiting(), "bytes_not_fsynced", len(w.unsynced))
	return fmt.Errorf("closing spool %s: %w (%s for %v)", w.path, ErrStalled, what, d)
}

// stall names the call run is stalled in, and for how long. mu held.
func (w *writer) stall() (string, time.Duration) {
	if w.busy == "" {
		return "call", 0 // between two of them
	}
	return w.busy, time.Since(w.busySince).Round(time.Millisecond)
}
