// Package userfile reads a file whose path the user gave (the --config
// file, a CA bundle, a credentials file) through the bounded reader
// (internal/kfile): only a regular file of at most a given size, within
// kfile.DefaultWait. /dev/zero, a FIFO, a directory, a huge file or one on
// a disk that does not answer is an error naming the path, never an
// endless read or a wait for a writer that never comes.
package userfile

import (
	"context"
	"fmt"

	"github.com/bridge-dev/bridge/internal/kfile"
)

// ErrNotRegular: the path is a device, FIFO, socket or directory.
var ErrNotRegular = kfile.ErrNotRegular

// ErrTooLarge: the file holds more than the bound.
var ErrTooLarge = kfile.ErrTooLarge

// Read returns the contents of the regular file at path, at most max
// bytes, read within kfile.DefaultWait (kfile.ReadFile: the open does not
// wait for a FIFO's writer, and the open descriptor is what is checked).
func Read(path string, max int) ([]byte, error) {
	b, err := kfile.ReadFile(context.Background(), path, max)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}
