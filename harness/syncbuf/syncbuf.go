// Package syncbuf is a bytes.Buffer safe for one writer and one reader at
// once: tests read a log or a child's output while it is being written.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a locked bytes.Buffer; the zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns a copy of what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
