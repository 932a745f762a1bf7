package spool

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/bridge-dev/bridge/internal/flock"
)

// compact rewrites the file within the size cap: every start, run and end
// record, one ack per sink and run, and the samples that fit in half the
// cap (the half leaves room to append before the next rewrite). Samples
// every run of their attempt acknowledged go first, then the oldest of the
// rest. The new file, locked before it takes the old one's place by rename
// (a crash leaves one or the other), becomes the spool's file. Run only:
// the file is read and written out of the lock, and nothing else writes it
// meanwhile.
func (w *writer) compact() error {
	// The old file stays if the rewrite fails: what it holds must be durable.
	if err := w.sync(); err != nil {
		return fmt.Errorf("compacting spool %s: %w", w.path, err)
	}
	src, size, acks := w.f, w.size, w.ackLines()
	samples, meta, err := w.measure(src, size)
	if err != nil {
		return fmt.Errorf("compacting spool %s: %w", w.path, err)
	}
	keep := keepWithin(samples, w.opt.MaxSize/2-meta-int64(len(acks)))

	var tmp *os.File
	newOff := map[int64]int64{}
	var newSize int64
	err = w.unlocked("size-cap rewrite", func() (err error) {
		tmp, newSize, err = rewrite(w.path, io.NewSectionReader(src, 0, size), w.opt.MaxLine, keep, acks, newOff)
		return err
	})
	if err != nil {
		return fmt.Errorf("compacting spool %s: %w", w.path, err)
	}
	w.f, w.size = tmp, newSize // the new file was fsynced (nothing is unsynced)
	w.gen++
	// The new offsets before the lock is let go (the close below): a
	// reader that plans from the new file must not get the old ones.
	w.ix.moved(newOff)
	if err := w.unlocked("close", src.Close); err != nil {
		w.log.Debug("closing the spool's file replaced by its rewrite", "err", err)
	}
	w.capped(samples, keep)
	return nil
}

// sized is a sample of the file, as a size-cap rewrite weighs it.
type sized struct {
	seq  int64
	n    int  // its line's length
	att  int  // its attempt (start records before it, less one)
	done bool // delivered: dropped first
}

// measure reads the file (out of the lock) for what its records other
// than samples and acks take (meta), and each sample's size, attempt and
// whether it was delivered.
func (w *writer) measure(src file, size int64) (samples []sized, meta int64, err error) {
	err = w.unlocked("size-cap rewrite", func() error {
		att := -1
		_, err := scan(io.NewSectionReader(src, 0, size), w.opt.MaxLine, func(rec *Record, line []byte, _ int64) {
			switch rec.Type {
			case TypeSample:
				samples = append(samples, sized{seq: *rec.Seq, n: len(line), att: att})
			case TypeAck:
			case TypeStart:
				att++
				fallthrough
			default:
				meta += int64(len(line))
			}
		})
		return err
	})
	for i := range samples {
		samples[i].done = w.ix.delivered(samples[i].att, samples[i].seq)
	}
	return samples, meta, err
}

// keepWithin chooses the samples a rewrite keeps within budget bytes: the
// newest undelivered ones first, then the newest delivered ones.
func keepWithin(samples []sized, budget int64) map[int64]bool {
	order := make([]int, len(samples))
	for i := range order {
		order[i] = len(samples) - 1 - i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case samples[a].done == samples[b].done:
			return 0
		case samples[a].done:
			return 1
		}
		return -1
	})
	keep := map[int64]bool{}
	for used, k := int64(0), 0; k < len(order); k++ {
		s := samples[order[k]]
		if used+int64(s.n) > budget {
			break
		}
		used += int64(s.n)
		keep[s.seq] = true
	}
	return keep
}

// capped counts a rewrite and the undelivered samples it dropped, and says
// so once per kind: a small cap rewrites at every sample, and the
// end-of-run table counts them all. Losing unsent samples is worse news
// than trimming sent ones, so it gets its own warning.
func (w *writer) capped(samples []sized, keep map[int64]bool) {
	var dropped, undelivered int64
	for _, s := range samples {
		if !keep[s.seq] {
			dropped++
			if !s.done {
				undelivered++
			}
		}
	}
	w.st.Compactions++
	w.st.DroppedByCap += undelivered
	kind := capTrimmed
	msg := "the spool reached its size cap (--spool-max-size); its oldest samples were removed"
	if undelivered > 0 {
		kind = capLost
		msg = "the spool reached its size cap (--spool-max-size); samples no tracker has yet were removed and will never be sent (a larger cap keeps them)"
	}
	log := w.log.Debug
	if w.capLog&kind == 0 {
		w.capLog, log = w.capLog|kind, w.log.Warn
	}
	log(msg, "max_size", w.opt.MaxSize, "removed", dropped, "not_yet_delivered", undelivered)
}

// ackLines are the ack records of the rewrite: one per sink and run.
func (w *writer) ackLines() []byte {
	var acks []byte
	for _, rec := range w.ix.lastAcks() {
		b, _ := json.Marshal(rec)
		acks = append(append(acks, b...), '\n')
	}
	return acks
}

// rewrite writes the new file of a size-cap rewrite beside path from src:
// its records but the acks and the samples not kept, then acks; it fsyncs
// and locks it and puts it at path. newOff gets the kept samples' offsets.
func rewrite(path string, src io.Reader, maxLine int, keep map[int64]bool, acks []byte, newOff map[int64]int64) (*os.File, int64, error) {
	tmpPath := filepath.Join(filepath.Dir(path), ".bridge-spool-"+rand.Text()+".tmp")
	tmp, err := os.OpenFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, err
	}
	defer os.Remove(tmpPath) // after a successful rename: nothing to remove
	bw := bufio.NewWriter(tmp)
	var size int64
	_, err = scan(src, maxLine, func(rec *Record, line []byte, _ int64) {
		switch {
		case rec.Type == TypeAck:
			return
		case rec.Type == TypeSample && !keep[*rec.Seq]:
			return
		case rec.Type == TypeSample:
			newOff[*rec.Seq] = size
		}
		bw.Write(line) // errors stay in bw and come back from Flush
		size += int64(len(line))
	})
	if err == nil {
		_, err = bw.Write(acks)
		size += int64(len(acks))
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		// Locked before it is at path: no other bridge can take it there.
		// (On a filesystem without locks it goes unlocked, as at open.)
		_ = flock.Try(tmp)
	}
	if err == nil {
		err = os.Rename(tmpPath, path)
	}
	if err != nil {
		tmp.Close()
		return nil, 0, err
	}
	syncDir(filepath.Dir(path))
	return tmp, size, nil
}

// Kinds of size-cap message, each given once at WARN.
const (
	capTrimmed uint8 = 1 << iota // only delivered samples removed
	capLost                      // undelivered samples removed
)

// syncDir makes a rename durable; a failure only weakens that, so it is
// not reported.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
