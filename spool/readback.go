package spool

import (
	"bytes"
	"fmt"
	"io"

	"github.com/bridge-dev/bridge/metrics"
)

// The samples no longer in memory are read back from the file by the
// caller that needs them, out of the spool's lock: a stalled disk holds
// that caller only, never the sampler, the other trackers or run. The
// offsets are taken under the lock with the file and its generation (a
// size-cap rewrite moves them); a read of an older generation is done
// again.

// Pending returns up to max samples that sink has not acknowledged for run,
// oldest first, holding at most maxBatchBytes (at least one sample).
func (s *Spool) Pending(sink, run string, max int) []metrics.Sample {
	key := ackKey(sink, run)
	for try := 0; ; try++ {
		s.mu.Lock()
		b := s.planLocked(key, max)
		s.mu.Unlock()
		if len(b.reads) == 0 {
			return b.out
		}
		bad := b.read(s.path, s.opt.MaxLine)
		if len(bad) == 0 {
			return b.fit()
		}
		s.mu.Lock()
		if s.w.gen == b.gen {
			// Not readable any more (the file changed under bridge): it
			// cannot be sent; say so once per sample, then move on.
			for seq, err := range bad {
				s.log.Warn("cannot re-read a sample from the spool; it is skipped", "seq", seq, "err", err)
				s.ix.drop(seq)
			}
		}
		s.mu.Unlock()
		if try == maxReadTries {
			// Rewritten at every try (a tiny cap): what was read is sent.
			b.out = b.out[:b.firstBad(bad)]
			return b.fit()
		}
	}
}

// maxReadTries bounds how often Pending plans again because a size-cap
// rewrite moved the samples it was reading.
const maxReadTries = 4

// batch is what Pending returns: the samples in memory, and the places of
// those to read from the file (f, of generation gen).
type batch struct {
	out   []metrics.Sample
	reads []readAt
	f     file
	gen   uint64
}

type readAt struct {
	slot int // in out
	seq  int64
	off  int64
	n    int
}

// planLocked takes the key's samples after its ack: those in memory as
// they are, the others as places to read; those not yet in the file only
// when the file fails or stalls (writer.offered). Line bytes bound what is
// read (a sample holds more): fit bounds the batch once they are read.
func (s *Spool) planLocked(key string, max int) batch {
	var b batch
	if s.w != nil {
		b.f, b.gen = s.w.f, s.w.gen
	}
	used := int64(0)
	unwritten := s.w == nil || s.w.offered()
	for i := s.ix.first(s.ix.ackOf(key)); i < len(s.ix.pend) && len(b.out) < max; i++ {
		e := &s.ix.pend[i]
		if e.off < 0 && !unwritten {
			break // it and the later ones: the file has them first
		}
		if !s.ix.belongs(e.att, key) {
			continue
		}
		if e.smp != nil {
			used += e.held()
		} else {
			used += int64(e.n)
		}
		if len(b.out) > 0 && used > maxBatchBytes {
			break
		}
		if e.smp != nil {
			b.out = append(b.out, *e.smp)
			continue
		}
		b.reads = append(b.reads, readAt{slot: len(b.out), seq: e.seq, off: e.off, n: e.n})
		b.out = append(b.out, metrics.Sample{})
	}
	return b
}

// read fills the batch's samples from the file; it returns those it could
// not read, by seq.
func (b *batch) read(path string, maxLine int) map[int64]error {
	var bad map[int64]error
	for _, r := range b.reads {
		smp, err := readSample(b.f, path, r, maxLine)
		if err != nil {
			if bad == nil {
				bad = map[int64]error{}
			}
			bad[r.seq] = err
			continue
		}
		b.out[r.slot] = smp
	}
	return bad
}

// firstBad is the slot of the first sample that could not be read.
func (b *batch) firstBad(bad map[int64]error) int {
	for _, r := range b.reads {
		if _, ok := bad[r.seq]; ok {
			return r.slot
		}
	}
	return len(b.out)
}

// fit cuts the batch to maxBatchBytes of what its samples hold (at least
// one sample).
func (b *batch) fit() []metrics.Sample {
	used := int64(0)
	for i := range b.out {
		if used += b.out[i].MemBytes(); i > 0 && used > maxBatchBytes {
			return b.out[:i]
		}
	}
	return b.out
}

func readSample(f file, path string, r readAt, maxLine int) (metrics.Sample, error) {
	if r.n <= 0 || r.n > maxLine+1 || f == nil {
		return metrics.Sample{}, fmt.Errorf("line of %d bytes at byte %d", r.n, r.off)
	}
	b := make([]byte, r.n)
	if _, err := f.ReadAt(b, r.off); err != nil {
		return metrics.Sample{}, fmt.Errorf("reading spool %s at byte %d: %w", path, r.off, err)
	}
	rec, ok := parseRecord(bytes.TrimSpace(b))
	if !ok || rec.Type != TypeSample || *rec.Seq != r.seq {
		return metrics.Sample{}, fmt.Errorf("spool %s at byte %d: not sample %d", path, r.off, r.seq)
	}
	return toSample(rec), nil
}

// Track keeps samples until sink acknowledges them for run; call it for
// each sink before sampling starts. The samples it is offered are those of
// the attempts that recorded run for sink (see the package doc), the ones
// already in the file included (read back by this call, which waits for
// the disk). A sink whose tracker starts late is tracked with run "" until
// then; tracking its run (after WriteRun) replaces that, and is not giving
// up (Untrack).
func (s *Spool) Track(sink, run string) error {
	s.mu.Lock()
	reread := s.ix.track(ackKey(sink, run)) && s.w != nil
	s.mu.Unlock()
	if !reread {
		return nil
	}
	return s.reindex()
}

// reindex puts the file's samples that a tracked key needs and pend lacks
// back into pend (offsets only). The file is read out of the lock, after
// run wrote what was appended before this call.
func (s *Spool) reindex() error {
	for try := 0; ; try++ {
		s.mu.Lock()
		s.w.settle()
		f, size, gen, claims := s.w.f, s.w.size, s.w.gen, s.ix.claims()
		s.mu.Unlock()
		if f == nil {
			return nil // closed
		}
		var older []entry
		att, last := -1, int64(-1)
		res, err := scan(io.NewSectionReader(f, 0, size), s.opt.MaxLine, func(rec *Record, line []byte, off int64) {
			switch rec.Type {
			case TypeStart:
				att++
			case TypeSample:
				if seq := *rec.Seq; seq > last {
					last = seq
					if claims.needed(att, seq) {
						older = append(older, entry{seq: seq, att: att, off: off, n: len(line)})
					}
				}
			}
		})
		s.mu.Lock()
		// A rewrite moved the offsets, or a failed fsync's rewrite had cut
		// the file short for a moment: read it again.
		if (s.w.gen != gen || (err == nil && res.end < size)) && try < maxReadTries {
			s.mu.Unlock()
			continue
		}
		if err == nil && s.w.gen == gen {
			s.ix.merge(older)
			s.ix.trim() // what was acknowledged meanwhile
		}
		s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("re-reading spool %s: %w", s.path, err)
		}
		return nil
	}
}
