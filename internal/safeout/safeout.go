// Package safeout carries bridge's own output (its log and end-of-run table
// on stderr, `bridge sample` and `bridge sync` on stdout) so that the output
// failing can never harm the job: a Write never blocks its caller and never
// fails it. A reader that went away (EPIPE), a full disk (ENOSPC), an I/O
// error, or a pipe that nobody drains (a stalled log shipper) costs the
// lines that could not be written, and nothing else.
//
// Lines are queued, up to maxQueued bytes, and written in order by one
// goroutine; past the bound new lines are dropped and counted, and the next
// line that is written says how many were lost.
package safeout

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// maxQueued bounds the bytes waiting to be written: a few hundred log lines.
const maxQueued = 256 << 10

// Writer is an io.Writer whose Write always succeeds at once. Safe for
// concurrent use; each Write is kept whole (slog writes one record, fmt one
// line per call).
type Writer struct {
	out io.Writer

	mu      sync.Mutex
	queue   []item
	queued  int             // bytes in queue
	busy    bool            // the loop holds an item it is writing
	waiters []chan struct{} // Flush calls waiting for the queue to empty
	wake    chan struct{}   // capacity 1: work is queued
}

// item is one Write, or (lost > 0) the place where lines were dropped.
type item struct {
	p    []byte
	lost int
}

// New returns a Writer that writes to out from a goroutine of its own. The
// goroutine lives as long as the process (bridge's stdout and stderr).
func New(out io.Writer) *Writer {
	w := &Writer{out: out, wake: make(chan struct{}, 1)}
	go w.loop()
	return w
}

// Write queues a copy of p and returns len(p), nil; it drops p when
// maxQueued bytes already wait, and the output then says so at that place.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.queued+len(p) > maxQueued {
		w.markLost(1)
	} else {
		w.queue = append(w.queue, item{p: append([]byte(nil), p...)})
		w.queued += len(p)
	}
	// A drop wakes the loop too: the last lines lost are said even when
	// nothing is written after them.
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

// markLost counts n lost lines at the end of the queue; w.mu is held.
func (w *Writer) markLost(n int) {
	if k := len(w.queue) - 1; k >= 0 && w.queue[k].lost > 0 {
		w.queue[k].lost += n
		return
	}
	w.queue = append(w.queue, item{lost: n})
}

// Flush waits until everything queued so far has been written (or has
// failed), at most d. It reports whether the queue emptied in time; bridge
// exits after it either way.
func (w *Writer) Flush(d time.Duration) bool {
	w.mu.Lock()
	if len(w.queue) == 0 && !w.busy {
		w.mu.Unlock()
		return true
	}
	done := make(chan struct{})
	w.waiters = append(w.waiters, done)
	w.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func (w *Writer) loop() {
	failed := 0 // lines lost since the last write that worked; only here
	for range w.wake {
		for {
			w.mu.Lock()
			if len(w.queue) == 0 {
				w.busy = false
				for _, c := range w.waiters {
					close(c)
				}
				w.waiters = nil
				w.mu.Unlock()
				break
			}
			it := w.queue[0]
			w.queue[0] = item{}
			w.queue = w.queue[1:]
			w.queued -= len(it.p)
			w.busy = true
			w.mu.Unlock()

			// A gap is said where it is: at a drop, or before the first
			// line written after failed writes. Nothing is retried, so a
			// dead output costs one write per line and no more.
			lost, p := failed+it.lost, it.p
			if lost > 0 {
				p = append(fmt.Appendf(nil, "bridge: %d lines of bridge's own output were lost here (its output could not be written)\n", lost), p...)
			}
			if _, err := w.out.Write(p); err != nil {
				failed = lost + min(len(it.p), 1)
			} else {
				failed = 0
			}
		}
	}
}
