package spool

// Open opens the spool at path with default options, for tests.
func Open(path string) (*Spool, error) { return OpenWith(path, Options{}) }

// OpenWith is OpenWithin without its stall watch, for tests: the open runs
// on the test's goroutine.
func OpenWith(path string, opt Options) (*Spool, error) { return openWith(path, opt, nil) }
