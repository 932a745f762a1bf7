package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/upload"
)

// runSync is `bridge sync FILE [--run-id ID]`: it uploads what a spool holds
// and its trackers have not acknowledged (package upload).
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
	// The timeout bounds all of sync, the file's stat and open included: a
	// disk that does not answer (a hung network mount) is given up on.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// A missing file is the user's to fix, and nothing is created for it
	// (neither the file nor a run).
	st, err := kfile.Stat(ctx, path)
	if errors.Is(err, kfile.ErrNoAnswer) {
		fmt.Fprintf(stderr, "bridge: sync: spool file %q: its disk did not answer within --timeout=%s; nothing was sent\n", path, timeout)
		return 1
	}
	if err != nil || !st.Mode().IsRegular() {
		why := "not a regular file"
		if err != nil {
			why = err.Error()
		}
		fmt.Fprintf(stderr, "bridge: sync: spool file %q: %s\n", path, why)
		return exitUsage
	}
	log := newLogger(stderr, cfg.LogLevel)
	sp, err := pipeline.OpenSpool(ctx, path, pipeline.ForSync, cfg, log)
	if errors.Is(err, spool.ErrStalled) || ctx.Err() != nil {
		fmt.Fprintf(stderr, "bridge: sync: %v; nothing was sent\n", err)
		return 1
	}
	if errors.Is(err, spool.ErrLocked) {
		// Sending what a live bridge is sending would make two runs of it,
		// or the same samples twice.
		fmt.Fprintf(stderr, "bridge: sync: %s is being written by a running bridge (one writer per spool); run bridge sync once it has exited\n", path)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return exitUsage
	}
	defer func() {
		// What sync recorded (acknowledgements, its end) gets the time left,
		// and at least a second, however long the upload took; a disk that
		// has not taken it by then is not waited for.
		deadline, _ := ctx.Deadline()
		cctx, cancel := context.WithDeadline(context.Background(), latest(deadline, time.Now().Add(time.Second)))
		defer cancel()
		if err := sp.CloseContext(cctx); err != nil {
			fmt.Fprintf(stderr, "bridge: sync: %v\n", err)
		}
	}()

	on, off := pipeline.Trackers().BuildSinks(cfg, pipeline.Overrides{}, nil, log) // a tracker off is said in the log
	if len(on) == 0 {
		fmt.Fprintln(stderr, "bridge: sync needs a tracker: "+pipeline.Trackers().NoTracker(off))
		return exitUsage
	}
	var trackers []string
	for _, s := range on {
		trackers = append(trackers, s.Name())
	}
	return upload.Run(ctx, upload.Options{Config: cfg, Spool: sp, Path: path, RunID: runID, Trackers: trackers,
		Version: version, Log: log, Stdout: stdout, Stderr: stderr})
}

// latest is the later of two times.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
