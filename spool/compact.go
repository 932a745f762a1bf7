package spool

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// compactLocked rewrites the file within the size cap: every start and end
// record, one ack per sink and run, and the newest samples that fit in half
// the cap (the half leaves room to append before the next rewrite). The
// oldest samples go first: the ones every sink has acknowledged are always
// older than the ones some sink still needs. The new file replaces the old
// one by rename, so a crash leaves one or the other.
func (s *Spool) compactLocked() error {
	// The old file stays if the rewrite fails: what it holds must be durable.
	if err := s.syncLocked(); err != nil {
		return fmt.Errorf("compacting spool %s: %w", s.path, err)
	}
	src, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("compacting spool %s: %w", s.path, err)
	}
	defer src.Close()

	var acks []byte
	keys := make([]string, 0, len(s.acks))
	for k := range s.acks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		seq := s.acks[k]
		sink, run := splitKey(k)
		b, _ := json.Marshal(Record{Type: TypeAck, Sink: sink, Run: run, Seq: &seq})
		acks = append(append(acks, b...), '\n')
	}

	// Pass 1: what the records other than samples take, and each sample's size.
	type sized struct {
		seq int64
		n   int
	}
	var meta int64
	var samples []sized
	if _, err := scan(io.LimitReader(src, s.size), s.opt.MaxLine, func(rec *Record, line []byte, _ int64) {
		switch rec.Type {
		case TypeSample:
			samples = append(samples, sized{*rec.Seq, len(line)})
		case TypeAck:
		default:
			meta += int64(len(line))
		}
	}); err != nil {
		return fmt.Errorf("compacting spool %s: %w", s.path, err)
	}
	budget := s.opt.MaxSize/2 - meta - int64(len(acks))
	keep := len(samples)
	for used := int64(0); keep > 0 && used+int64(samples[keep-1].n) <= budget; keep-- {
		used += int64(samples[keep-1].n)
	}
	firstKept := int64(math.MaxInt64)
	if keep < len(samples) {
		firstKept = samples[keep].seq
	}

	// Pass 2: the new file.
	tmp, err := os.CreateTemp(filepath.Dir(s.path), ".bridge-spool-*.tmp")
	if err != nil {
		return fmt.Errorf("compacting spool %s: %w", s.path, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename: nothing to remove
	w := bufio.NewWriter(tmp)
	newOff := map[int64]int64{}
	var size int64
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		tmp.Close()
		return fmt.Errorf("compacting spool %s: %w", s.path, err)
	}
	_, err = scan(io.LimitReader(src, s.size), s.opt.MaxLine, func(rec *Record, line []byte, _ int64) {
		switch {
		case rec.Type == TypeAck:
			return
		case rec.Type == TypeSample && *rec.Seq < firstKept:
			return
		case rec.Type == TypeSample:
			newOff[*rec.Seq] = size
		}
		w.Write(line) // errors stay in w and come back from Flush
		size += int64(len(line))
	})
	if err == nil {
		_, err = w.Write(acks)
		size += int64(len(acks))
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.path)
	}
	if err != nil {
		return fmt.Errorf("compacting spool %s: %w", s.path, err)
	}
	syncDir(filepath.Dir(s.path))
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("reopening spool %s after compacting: %w", s.path, err)
	}
	s.f.Close()
	s.f, s.size = f, size // the new file was fsynced (nothing is unsynced)

	// Samples that left the file leave memory too; count those not delivered.
	low := s.lowAckLocked()
	var dropped, undelivered int64
	for _, smp := range samples[:keep] {
		dropped++
		if len(s.tracked) == 0 || smp.seq > low {
			undelivered++
		}
	}
	kept := s.pend[:0]
	for _, e := range s.pend {
		if e.off >= 0 {
			off, ok := newOff[e.seq]
			if !ok {
				if e.smp != nil {
					s.inMem--
				}
				continue
			}
			e.off = off
		}
		kept = append(kept, e)
	}
	s.pend = kept
	s.stats.Compactions++
	s.stats.DroppedByCap += undelivered
	s.log.Warn("the spool reached its size cap; its oldest samples were removed",
		"max_size", s.opt.MaxSize, "removed", dropped, "not_yet_delivered", undelivered)
	return nil
}

// lowAckLocked is the highest seq every tracked sink acknowledged (-1: none).
func (s *Spool) lowAckLocked() int64 {
	low := int64(math.MaxInt64)
	for k := range s.tracked {
		a := int64(-1)
		if v, ok := s.acks[k]; ok {
			a = v
		}
		low = min(low, a)
	}
	if low == math.MaxInt64 {
		return -1
	}
	return low
}

func splitKey(k string) (sink, run string) {
	sink, run, _ = strings.Cut(k, "\x00")
	return sink, run
}

// syncDir makes a rename durable; a failure only weakens that, so it is
// not reported.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
