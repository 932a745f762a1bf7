package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/bridge-dev/bridge/internal/kfile"
)

// OpenWithin opens (creating if needed, private to the user) the spool at
// path, takes its writer lock, and reads what it holds; ErrLocked while
// another live process holds the lock. An unterminated last line (a crash
// or a full disk mid-write) is repaired: kept when it is a whole record,
// cut off otherwise; lines that are not records are skipped, counted and
// logged once.
//
// A job must not wait on a dead disk (a hard NFS mount whose server went
// away blocks open, read and fsync with no end): when one step of the open
// (creating the directory, opening and locking the file, one read,
// repairing its tail) has not returned after stall, it gives up with ErrStalled; when ctx ends first (a signal before
// the child starts), it gives up at once with ctx's cause. A slow but live
// disk is waited for however long the whole read takes. The abandoned open
// goes on in the background (kfile.Call) and closes the file if the disk
// ever answers.
func OpenWithin(ctx context.Context, path string, opt Options, stall time.Duration) (*Spool, error) {
	p := &progress{}
	p.mark()
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		tick := time.NewTicker(max(stall/8, time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
				if p.idle() >= stall {
					cancel(ErrStalled)
					return
				}
			}
		}
	}()
	s, err := kfile.Call(wctx, func() (*Spool, error) { return openWith(path, opt, p) }, func(s *Spool) { s.Close() })
	if !errors.Is(err, kfile.ErrNoAnswer) {
		return s, err
	}
	if errors.Is(context.Cause(wctx), ErrStalled) {
		return nil, fmt.Errorf("opening spool %s: its disk did not answer for %v: %w", path, stall, ErrStalled)
	}
	return nil, fmt.Errorf("opening spool %s: %w", path, context.Cause(ctx))
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
