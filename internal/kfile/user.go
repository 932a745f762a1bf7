package kfile

import (
	"context"
	"fmt"
)

// ReadUserFile reads a file whose path the user gave (the --config file, a
// CA bundle, a credentials file): a regular file of at most max bytes, read
// within DefaultWait. /dev/zero, a FIFO, a directory, a huge file or one on
// a disk that does not answer is an error naming the path, never an
// endless read or a wait for a writer that never comes.
func ReadUserFile(path string, max int) ([]byte, error) {
	b, err := ReadFile(context.Background(), path, max)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}
