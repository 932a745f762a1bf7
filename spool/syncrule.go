package spool

import (
	"fmt"
	"time"
)

// The fsync rule (see the package doc), applied by run: what was written
// since the last fsync, and whether the trackers hold it.

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

// acked is told of acknowledgements once they are written: when the
// trackers hold all that was written since the last fsync (these acks
// included), no fsync is needed: the timer is stopped (no wake-up for a
// healthy tracker) and nothing is kept for one. A timer that fires first
// finds the same (run looks again). Run only: an fsync in flight keeps
// what it syncs.
func (w *writer) acked() {
	if w.needsSync() {
		return
	}
	if w.armed {
		w.timer.Stop()
		w.armed = false
	}
	w.forget()
}

// forget ends a wait for an fsync that is not needed.
func (w *writer) forget() {
	w.unsynced = w.unsynced[:0]
	w.needSeq, w.needAll = -1, false
}

// fire is the timer: run fsyncs unless the trackers come to hold all of it
// meanwhile. A failure is reported as a failed write: the records stay in
// memory and are written again by the next attempt (the next record, or
// Close).
func (w *writer) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil || !w.armed {
		return
	}
	w.armed = false
	w.due = true
	w.kick()
}

// synced is where the bytes known to be on disk (or held by the trackers)
// end.
func (w *writer) synced() int64 { return w.size - int64(len(w.unsynced)) }

// sync makes every written record durable: the unsynced bytes are first
// written again if an earlier fsync failed, then the file is fsynced, out
// of the lock. Only once it returned are they counted as synced (and
// dropped from memory): run writes nothing meanwhile, so the fsync covers
// all of them. On failure they stay in memory for the next attempt. Run
// only.
func (w *writer) sync() error {
	if w.armed {
		w.timer.Stop()
		w.armed = false // so that no ack forgets what this fsync holds
	}
	if len(w.unsynced) == 0 {
		return nil
	}
	f, resync, from, redo := w.f, w.resync, w.synced(), w.unsynced
	err := w.unlocked("fsync", func() error {
		if resync {
			if err := f.Truncate(from); err != nil {
				return fmt.Errorf("writing spool %s again from byte %d after a failed fsync: %w", w.path, from, err)
			}
			if _, err := f.Write(redo); err != nil {
				return fmt.Errorf("writing spool %s again from byte %d after a failed fsync: %w", w.path, from, err)
			}
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("syncing spool %s: %w", w.path, err)
		}
		return nil
	})
	if err != nil {
		w.resync = true
		return err
	}
	w.resync = false
	w.forget()
	if cap(w.unsynced) > 2*maxUnsynced {
		w.unsynced = nil // a flush after an outage: not kept
	}
	return nil
}
