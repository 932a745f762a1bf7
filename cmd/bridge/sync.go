package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/upload"
)

// runSync is `bridge sync FILE [--run-id ID]`: it uploads what a spool holds
// and its trackers have not acknowledged (upload.Sync), within --timeout.
func runSync(args []string, stdout, stderr io.Writer) int {
	var runID string
	var timeout time.Duration
	fs, cfg, exit := parse("sync", args, stdout, stderr, func(fs *pflag.FlagSet) {
		fs.SetInterspersed(true) // `bridge sync FILE --run-id ID`, as documented, and flags first
		fs.StringVar(&runID, "run-id", "", "run to upload to (default: each job's run recorded in the spool, else a new one)")
		fs.DurationVar(&timeout, "timeout", 5*time.Minute, "reading the file, finding each run and uploading: give up after this long; what is not sent stays in the file")
	})
	if fs == nil {
		return exit
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "bridge: usage: bridge sync FILE [--run-id ID]")
		return exitUsage
	}
	path := fs.Arg(0)
	if timeout <= 0 {
		fmt.Fprintf(stderr, "bridge: --timeout=%s: must be positive\n", timeout)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	code, err := upload.Sync(ctx, timeout, upload.Options{Config: cfg, Path: path, RunID: runID, Version: version,
		Log: newLogger(stderr, cfg.LogLevel), Stdout: stdout, Stderr: stderr})
	if err != nil {
		return usageError(stderr, err)
	}
	return code
}
