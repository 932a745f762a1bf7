package spool

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// index is the spool's view of what the file holds and who still needs it
// (the writer's ledger):
// the attempts (start, run and end records), the acknowledgements, and the
// samples that some tracked (sink, run) has not acknowledged, each in
// memory, in the file, or both. It does no I/O: the Spool reads the file for
// it. Not safe for concurrent use; the Spool's lock guards it.
type index struct {
	attempts   []Attempt
	pend       []entry          // by seq, each seq once
	inMem      int              // entries with smp set that are also in the file (evictable)
	inMemBytes int64            // what their samples hold (held)
	acks       map[string]int64 // ackKey -> highest acknowledged seq
	tracked    map[string]bool  // ackKeys whose samples are kept
	gaveUp     bool             // a tracked sink gave up: its samples are only in the file
	partial    bool             // pend may lack samples of the file (dropped, or never added)
	memSamples int
	memBytes   int64
	evictFrom  int // entries before it hold nothing evict can free (reset when pend changes shape)
}

// entry is one sample some tracked (sink, run) has not acknowledged.
type entry struct {
	seq int64
	att int             // the attempt that wrote it, an index of attempts; -1: before any start record
	off int64           // offset of its line in the file; -1 while only in memory
	n   int             // length of its line, newline included
	smp *metrics.Sample // in memory; nil when only in the file
}

// held is what e's sample holds in memory (0 when it is only in the file).
func (e *entry) held() int64 {
	if e.smp == nil {
		return 0
	}
	return e.smp.MemBytes()
}

func newIndex(memSamples int, memBytes int64) index {
	return index{acks: map[string]int64{}, tracked: map[string]bool{}, memSamples: memSamples, memBytes: memBytes}
}

func ackKey(sink, run string) string { return sink + "\x00" + run }

func splitKey(k string) (sink, run string) {
	sink, run, _ = strings.Cut(k, "\x00")
	return sink, run
}

// lastAcks are the ack records of every sink and run, by key.
func (ix *index) lastAcks() []Record {
	keys := slices.Sorted(maps.Keys(ix.acks))
	recs := make([]Record, len(keys))
	for i, k := range keys {
		seq := ix.acks[k]
		sink, run := splitKey(k)
		recs[i] = Record{Type: TypeAck, Sink: sink, Run: run, Seq: &seq}
	}
	return recs
}

func (ix *index) ackOf(key string) int64 {
	if v, ok := ix.acks[key]; ok {
		return v
	}
	return -1
}

// current is the attempt new samples belong to (-1: none started).
func (ix *index) current() int { return len(ix.attempts) - 1 }

// belongs is the rule that keeps jobs apart: a sample is offered to a
// (sink, run) only when the attempt that wrote it recorded that run for the
// sink (in its start record, or in a run record that names it). Samples
// written before any start record (a file bridge did not write) belong to
// every run.
func (ix *index) belongs(att int, key string) bool {
	if att < 0 || att >= len(ix.attempts) {
		return true
	}
	sink, run := splitKey(key)
	return ix.attempts[att].Start.Runs[sink] == run
}

// wants reports whether the tracked key still needs sample seq of att.
func (ix *index) wants(key string, att int, seq int64) bool {
	return seq > ix.ackOf(key) && ix.belongs(att, key)
}

// needed reports whether some tracked key still needs the sample.
func (ix *index) needed(att int, seq int64) bool {
	for k := range ix.tracked {
		if ix.wants(k, att, seq) {
			return true
		}
	}
	return false
}

// claims is a copy of what needed reads (the tracked keys, their acks, the
// attempts' runs), for a reader of the file out of the spool's lock.
func (ix *index) claims() *index {
	return &index{attempts: slices.Clone(ix.attempts), acks: maps.Clone(ix.acks), tracked: maps.Clone(ix.tracked)}
}

// load takes one record read from the file at off.
func (ix *index) load(rec *Record, line []byte, off int64) {
	switch rec.Type {
	case TypeStart:
		ix.attempts = append(ix.attempts, Attempt{Start: *rec, lastSeq: -1})
	case TypeRun:
		ix.mergeRun(*rec)
	case TypeEnd:
		ix.setEnd(*rec)
	case TypeSample:
		smp := toSample(rec)
		ix.counted(&smp)
		if k := len(ix.pend); k > 0 && ix.pend[k-1].seq >= smp.Seq {
			return // out of order: a duplicate of what is kept
		}
		ix.pend = append(ix.pend, entry{seq: smp.Seq, att: ix.current(), off: off, n: len(line), smp: &smp})
		ix.hold(&ix.pend[len(ix.pend)-1])
		ix.evict(off + int64(len(line)))
	case TypeAck:
		if k := ackKey(rec.Sink, rec.Run); *rec.Seq > ix.ackOf(k) {
			ix.acks[k] = *rec.Seq
		}
	}
}

// counted records a sample of the current attempt (read or appended).
func (ix *index) counted(smp *metrics.Sample) {
	if k := ix.current(); k >= 0 {
		a := &ix.attempts[k]
		c := *smp
		a.LastSample, a.Samples, a.lastSeq = &c, a.Samples+1, max(a.lastSeq, smp.Seq)
	}
}

func toSample(rec *Record) metrics.Sample {
	smp := metrics.Sample{Seq: *rec.Seq, Time: time.UnixMilli(rec.TS), Points: make([]metrics.Point, 0, len(rec.Metrics))}
	names := make([]string, 0, len(rec.Metrics))
	for k := range rec.Metrics {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		smp.Points = append(smp.Points, metrics.Named(k, rec.Metrics[k]))
	}
	return smp
}

// addAttempt records the start of a new attempt and returns its number.
func (ix *index) addAttempt(rec Record) int {
	rec.Attempt = len(ix.attempts) + 1
	ix.attempts = append(ix.attempts, Attempt{Start: rec, lastSeq: -1})
	return rec.Attempt
}

// mergeRun puts a run record into the start record of the attempt it names
// (rec.Attempt; 0: the last), with copies of its maps (the caller may
// still read the originals).
func (ix *index) mergeRun(rec Record) {
	k := len(ix.attempts) - 1
	if rec.Attempt > 0 {
		for k >= 0 && ix.attempts[k].Start.Attempt != rec.Attempt {
			k--
		}
	}
	if k < 0 || rec.Sink == "" || rec.Run == "" {
		return
	}
	st := &ix.attempts[k].Start
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

func (ix *index) setEnd(rec Record) {
	if k := ix.current(); k >= 0 {
		ix.attempts[k].End = &rec
	}
}

// appended makes a sample just appended, whose line is n bytes, pending for
// the keys that need it.
func (ix *index) appended(smp *metrics.Sample, n int) {
	ix.counted(smp)
	att := ix.current()
	if len(ix.pend) > 0 && ix.pend[len(ix.pend)-1].seq >= smp.Seq {
		return
	}
	if !ix.needed(att, smp.Seq) {
		ix.partial = true // in the file only: a later Track reads it back
		return
	}
	ix.pend = append(ix.pend, entry{seq: smp.Seq, att: att, off: -1, n: n, smp: smp})
}

// track starts keeping the key's samples; it reports whether samples it
// needs may be in the file only (the caller then re-reads it, reindex).
// A sink's run replaces the sink's run-less key (a tracker that had not
// started yet): that is not giving up.
func (ix *index) track(key string) (reread bool) {
	if ix.tracked[key] {
		return false
	}
	ix.tracked[key] = true
	if sink, run := splitKey(key); run != "" {
		delete(ix.tracked, ackKey(sink, ""))
	}
	reread = ix.partial
	ix.trim()
	return reread
}

// untrack stops keeping a key's samples: its sink gave up.
func (ix *index) untrack(key string) {
	if ix.tracked[key] {
		ix.gaveUp = true
	}
	delete(ix.tracked, key)
	ix.trim()
}

// ack records that key acknowledged every sample up to seq; false when it
// had already.
func (ix *index) ack(key string, seq int64) bool {
	if seq <= ix.ackOf(key) {
		return false
	}
	ix.acks[key] = seq
	ix.trim()
	return true
}

// trim drops the entries no tracked key needs (they stay in the file).
func (ix *index) trim() {
	kept := ix.pend[:0]
	for _, e := range ix.pend {
		if ix.needed(e.att, e.seq) {
			kept = append(kept, e)
			continue
		}
		if e.smp != nil && e.off >= 0 {
			ix.release(&e)
		}
		ix.partial = true
	}
	clear(ix.pend[len(kept):]) // the samples go
	ix.pend = kept
	ix.reshaped()
}

// merge puts entries read from the file (by seq) into pend, each seq once.
func (ix *index) merge(older []entry) {
	if len(older) == 0 {
		return
	}
	out := make([]entry, 0, len(older)+len(ix.pend))
	i, j := 0, 0
	for i < len(older) || j < len(ix.pend) {
		switch {
		case j == len(ix.pend) || (i < len(older) && older[i].seq < ix.pend[j].seq):
			out = append(out, older[i])
			i++
		case i < len(older) && older[i].seq == ix.pend[j].seq:
			i++ // already kept
		default:
			out = append(out, ix.pend[j])
			j++
		}
	}
	ix.pend = out
	ix.reshaped()
}

// first is the index in pend of the first sample after seq.
func (ix *index) first(seq int64) int {
	return sort.Search(len(ix.pend), func(i int) bool { return ix.pend[i].seq > seq })
}

// at is the entry for seq, or nil.
func (ix *index) at(seq int64) *entry {
	if j := ix.first(seq - 1); j < len(ix.pend) && ix.pend[j].seq == seq {
		return &ix.pend[j]
	}
	return nil
}

// count is how many samples key has not acknowledged.
func (ix *index) count(key string) int {
	n, acked := 0, ix.ackOf(key)
	for _, e := range ix.pend[ix.first(acked):] {
		if ix.belongs(e.att, key) {
			n++
		}
	}
	return n
}

// placed records where an appended sample's line went in the file.
func (ix *index) placed(seq, off int64, n int) {
	if e := ix.at(seq); e != nil && e.off < 0 {
		e.off, e.n = off, n
		if e.smp != nil {
			ix.hold(e)
		}
	}
}

// moved takes the sample offsets of a rewritten file (by seq): a sample
// that is not in it any more leaves memory too.
func (ix *index) moved(newOff map[int64]int64) {
	kept := ix.pend[:0]
	for _, e := range ix.pend {
		if e.off >= 0 {
			off, ok := newOff[e.seq]
			if !ok {
				if e.smp != nil {
					ix.release(&e)
				}
				continue
			}
			e.off = off
		}
		kept = append(kept, e)
	}
	clear(ix.pend[len(kept):])
	ix.pend = kept
	ix.reshaped()
}

// hold and release count the samples in memory that are in the file: the
// window evict keeps within its bounds.
func (ix *index) hold(e *entry)    { ix.inMem++; ix.inMemBytes += e.held() }
func (ix *index) release(e *entry) { ix.inMem--; ix.inMemBytes -= e.held() }

// drop forgets a sample that will never be in the file (a full buffer).
func (ix *index) drop(seq int64) {
	if j := ix.first(seq - 1); j < len(ix.pend) && ix.pend[j].seq == seq {
		ix.pend = append(ix.pend[:j], ix.pend[j+1:]...)
		ix.reshaped()
	}
}

// evict keeps at most memSamples samples that are in the file in memory,
// holding at most memBytes; the oldest are read back from the file when a
// sink needs them. Samples past synced (written, not yet fsynced) stay: a
// failed fsync may take them from the file until they are written again.
// It resumes where it stopped (evictFrom): scanning from the front at every
// sample made a long outage, and opening a large spool, quadratic.
func (ix *index) evict(synced int64) {
	for ; (ix.inMem > ix.memSamples || ix.inMemBytes > ix.memBytes) && ix.evictFrom < len(ix.pend); ix.evictFrom++ {
		e := &ix.pend[ix.evictFrom]
		if e.smp != nil && e.off >= synced {
			return // it and every later one wait for the fsync
		}
		if e.smp != nil && e.off >= 0 {
			ix.release(e)
			e.smp = nil
		}
	}
}

// reshaped is told that pend lost or gained entries: evict starts over.
func (ix *index) reshaped() { ix.evictFrom = 0 }

// safeThrough is the highest seq of the current attempt that every tracked
// key claiming it acknowledged: what the trackers hold, so that the file
// need not be fsynced for it. -1 when no key claims it or a sink gave up
// (its samples are only in the file).
func (ix *index) safeThrough() int64 {
	if ix.gaveUp {
		return -1
	}
	low, att, any := int64(-1), ix.current(), false
	for k := range ix.tracked {
		if !ix.belongs(att, k) {
			continue
		}
		if a := ix.ackOf(k); !any || a < low {
			low = a
		}
		any = true
	}
	return low
}

// delivered reports whether sample seq of att reached every run its attempt
// recorded (and it recorded some).
func (ix *index) delivered(att int, seq int64) bool {
	if att < 0 || att >= len(ix.attempts) {
		return !ix.needed(att, seq) && len(ix.tracked) > 0 && !ix.gaveUp
	}
	runs := ix.attempts[att].Start.Runs
	if len(runs) == 0 {
		return false
	}
	for sink, run := range runs {
		if run == "" || ix.ackOf(ackKey(sink, run)) < seq {
			return false
		}
	}
	return true
}

// allDelivered reports whether every sample the file holds reached every
// run of the attempt that wrote it.
func (ix *index) allDelivered() bool {
	if len(ix.tracked) == 0 || ix.gaveUp || len(ix.pend) > 0 {
		return false
	}
	for i, a := range ix.attempts {
		if a.Samples > 0 && !ix.delivered(i, a.lastSeq) {
			return false
		}
	}
	return true
}
