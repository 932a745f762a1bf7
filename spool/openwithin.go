package spool

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// OpenWithin is OpenWith for a job that must not wait on a dead disk (a
// hard NFS mount whose server went away blocks open, read and fsync with
// no end): when one step of the open (creating the directory, opening and
// locking the file, one read, repairing its tail) has not returned after
// stall, it gives up with ErrStalled. A slow but live disk is waited for
// however long the whole read takes. The abandoned open goes on in the
// background and closes the file if the disk ever answers.
func OpenWithin(path string, opt Options, stall time.Duration) (*Spool, error) {
	p := &progress{}
	p.mark()
	type opened struct {
		s   *Spool
		err error
	}
	done := make(chan opened, 1)
	go func() {
		s, err := openWith(path, opt, p)
		done <- opened{s, err}
	}()
	tick := time.NewTicker(max(stall/8, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case o := <-done:
			return o.s, o.err
		case <-tick.C:
			if p.idle() < stall {
				continue
			}
			go func() {
				if o := <-done; o.s != nil {
					o.s.Close()
				}
			}()
			return nil, fmt.Errorf("opening spool %s: its disk did not answer for %v: %w", path, stall, ErrStalled)
		}
	}
}

// progress is when an open last finished a step; nil records nothing.
type progress struct{ at atomic.Int64 }

func (p *progress) mark() {
	if p != nil {
		p.at.Store(time.Now().UnixNano())
	}
}

func (p *progress) idle() time.Duration { return time.Duration(time.Now().UnixNano() - p.at.Load()) }

// reader marks progress at every read r answers.
func (p *progress) reader(r io.Reader) io.Reader {
	if p == nil {
		return r
	}
	return progressReader{r, p}
}

type progressReader struct {
	r io.Reader
	p *progress
}

func (pr progressReader) Read(b []byte) (int, error) {
	n, err := pr.r.Read(b)
	pr.p.mark()
	return n, err
}
