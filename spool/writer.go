package spool

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// file is what the writer needs of its *os.File (a seam for tests that
// make writes or fsyncs fail).
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

// writer owns the spool's file: it appends whole records, keeps those it
// cannot write in a bounded memory buffer, cuts a failed write back to the
// last whole record, applies the fsync rule (see the package doc) and the
// size cap. It reads the index only to place samples, to drop the ones the
// buffer cannot hold, and to know what the trackers already hold. Its
// methods run under the spool's lock (mu), the timer's included.
type writer struct {
	path string
	f    file
	log  *slog.Logger
	opt  *Options
	st   *Stats
	ix   *index
	mu   *sync.Mutex

	size    int64 // bytes of whole records in the file: where the next goes
	queue   []queued
	queuedN int   // samples in queue
	queuedB int64 // the memory they hold (queued.mem)
	failing bool
	nextTry time.Time // while failing, no retry before this
	gap     time.Duration
	lostLog bool   // the buffer-full message was given
	capLog  uint8  // the size-cap kinds already given at WARN
	wbuf    []byte // what one write sends (reused)

	// The fsync rule. needSeq and needAll say what was written since the
	// last fsync that the trackers do not hold: the highest sample (-1:
	// none) and whether a start, run or end record. unsynced is a copy of
	// those bytes, to write them again when an fsync failed (Linux reports
	// a writeback error once and may drop the pages): resync.
	timer    *time.Timer
	armed    bool
	needSeq  int64
	needAll  bool
	unsynced []byte
	resync   bool
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
)

// enqueue queues a copy of line (a whole record and its newline) and writes
// what is queued; mem is what a sample holds in memory while it waits.
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
	}
	w.flush(false)
	w.bound()
}

// bound drops the oldest waiting samples past MaxBuffered or
// MaxBufferedBytes; the newest stays.
func (w *writer) bound() {
	for w.queuedN > w.opt.MaxBuffered || (w.queuedN > 1 && w.queuedB > w.opt.MaxBufferedBytes) {
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

// flush writes the queue in order, in writes of at most maxKeptBuf (or one
// record), so that writing a long buffer after an outage never copies it
// whole; a failure leaves the file as it was (whole lines only) and the
// rest of the queue for the next try, which waits for nextTry unless
// forced.
func (w *writer) flush(force bool) {
	if len(w.queue) == 0 || w.f == nil {
		return
	}
	if w.failing && !force && time.Now().Before(w.nextTry) {
		return
	}
	n, done := len(w.queue), 0
	stop := func(err error) {
		w.dequeue(done)
		w.fail(err)
	}
	for done < n {
		if w.resync {
			// What a failed fsync may have lost goes first, so that the
			// file keeps its records in order.
			if err := w.sync(); err != nil {
				stop(err)
				return
			}
		}
		k, buf := done, w.wbuf[:0]
		for k < n && (k == done || len(buf)+len(w.queue[k].line) <= maxKeptBuf) {
			buf = append(buf, w.queue[k].line...)
			k++
		}
		if cap(buf) <= maxKeptBuf {
			w.wbuf = buf // kept for the next write; one of a longer record is not
		}
		if w.opt.MaxSize > 0 && w.size+int64(len(buf)) > w.opt.MaxSize && w.size > 0 {
			if err := w.compact(); err != nil {
				stop(err)
				w.nextTry = time.Now().Add(max(w.gap, compactRetryGap))
				return
			}
		}
		if err := w.write(buf); err != nil {
			stop(err)
			return
		}
		off := w.size
		w.size += int64(len(buf))
		for _, q := range w.queue[done:k] {
			switch {
			case q.seq >= 0:
				w.st.Written++
				w.ix.placed(q.seq, off, len(q.line))
				w.needSeq = max(w.needSeq, q.seq)
			case q.ack == "":
				w.needAll = true
			}
			off += int64(len(q.line))
		}
		done = k
		if err := w.wrote(buf); err != nil {
			stop(err)
			return
		}
	}
	w.dequeue(done)
	w.ix.evict(w.synced())
	if w.failing {
		w.failing = false
		w.log.Info("the spool is writable again; the records held in memory are written", "records", n)
	}
}

// dequeue takes the first n records, written, off the queue (its slice is
// reused).
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

// wrote applies the fsync rule to bytes just written: with SyncEvery 0
// they were fsynced by write; else they are kept until the next fsync,
// which comes at once past maxUnsynced, and otherwise SyncEvery after the
// first write the trackers do not hold, by a timer.
func (w *writer) wrote(b []byte) error {
	if w.opt.SyncEvery <= 0 {
		w.needSeq, w.needAll = -1, false
		return nil
	}
	w.unsynced = append(w.unsynced, b...)
	if len(w.unsynced) >= maxUnsynced {
		return w.sync()
	}
	if !w.armed && w.needsSync() {
		w.armed = true
		if w.timer == nil {
			w.timer = time.AfterFunc(w.opt.SyncEvery, w.fire)
		} else {
			w.timer.Reset(w.opt.SyncEvery)
		}
	}
	return nil
}

// needsSync reports whether something written since the last fsync is
// held by no tracker: a start, run or end record, a sample not every
// tracker of this attempt acknowledged, or bytes a failed fsync may have
// lost.
func (w *writer) needsSync() bool {
	return w.needAll || w.resync || w.needSeq > w.ix.safeThrough()
}

// acked is told of every acknowledgement: once the trackers hold all that
// waits for the timer, its fsync is not needed, and the timer is stopped
// (no wake-up for a healthy tracker).
func (w *writer) acked() {
	if w.armed && !w.needsSync() {
		w.timer.Stop()
		w.armed = false
		w.forget()
	}
}

// forget ends a wait for an fsync that is not needed.
func (w *writer) forget() {
	w.unsynced = w.unsynced[:0]
	w.needSeq, w.needAll = -1, false
}

// fire is the timer: it fsyncs unless the trackers came to hold all of
// it meanwhile. A failure is reported as a failed write: the records stay
// in memory and are written again by the next attempt (the next record,
// or Close).
func (w *writer) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil || !w.armed {
		return
	}
	w.armed = false
	if !w.needsSync() {
		w.forget()
		return
	}
	if err := w.sync(); err != nil {
		w.fail(err)
	}
}

// synced is where the bytes known to be on disk (or held by the trackers)
// end.
func (w *writer) synced() int64 { return w.size - int64(len(w.unsynced)) }

// sync makes every written record durable: the unsynced bytes are first
// written again if an earlier fsync failed, then the file is fsynced. On
// failure they stay in memory for the next attempt.
func (w *writer) sync() error {
	if w.armed {
		w.timer.Stop()
		w.armed = false
	}
	if len(w.unsynced) == 0 {
		return nil
	}
	if w.resync {
		synced := w.synced()
		if err := w.f.Truncate(synced); err != nil {
			return fmt.Errorf("writing spool %s again from byte %d after a failed fsync: %w", w.path, synced, err)
		}
		if _, err := w.f.Write(w.unsynced); err != nil {
			return fmt.Errorf("writing spool %s again from byte %d after a failed fsync: %w", w.path, synced, err)
		}
	}
	if err := w.f.Sync(); err != nil {
		w.resync = true
		return fmt.Errorf("syncing spool %s: %w", w.path, err)
	}
	w.resync = false
	w.forget()
	if cap(w.unsynced) > 2*maxUnsynced {
		w.unsynced = nil // a flush after an outage: not kept
	}
	return nil
}

// write appends b, and fsyncs it when SyncEvery is 0; on failure it cuts
// the file back to its last whole record, so that a retry does not glue
// records to torn bytes.
func (w *writer) write(b []byte) error {
	_, err := w.f.Write(b)
	if err == nil && w.opt.SyncEvery <= 0 {
		err = w.f.Sync()
	}
	if err != nil {
		if terr := w.f.Truncate(w.size); terr != nil {
			err = errors.Join(err, fmt.Errorf("cutting back to byte %d: %w", w.size, terr))
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
		w.st.Outages++
		w.log.Error("cannot write the spool; samples still go to the trackers, wait in memory and are written when it works again",
			"err", err, "buffer_limit", w.opt.MaxBuffered, "buffer_limit_bytes", w.opt.MaxBufferedBytes)
	}
}

// close writes what waits in memory if it can, fsyncs, and closes the file.
func (w *writer) close() error {
	if w.f == nil {
		return nil
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
	err := w.f.Close()
	w.f = nil
	if err != nil {
		return errors.Join(serr, fmt.Errorf("closing spool %s: %w", w.path, err))
	}
	return serr
}
