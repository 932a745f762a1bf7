package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

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
		fs.DurationVar(&timeout, "timeout", 5*time.Minute, "finding each run and uploading: give up after this long; what is not sent stays in the file")
	})
	if fs == nil {
		return exit
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "bridge: usage: bridge sync FILE [--run-id ID]")
		return exitUsage
	}
	path := fs.Arg(0)
	// A missing file is the user's to fix, and nothing is created for it
	// (neither the file nor a run).
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		why := "not a regular file"
		if err != nil {
			why = err.Error()
		}
		fmt.Fprintf(stderr, "bridge: sync: spool file %q: %s\n", path, why)
		return exitUsage
	}
	if timeout <= 0 {
		fmt.Fprintf(stderr, "bridge: --timeout=%s: must be positive\n", timeout)
		return exitUsage
	}
	log := newLogger(stderr, cfg.LogLevel)
	sp, err := pipeline.OpenSpool(path, pipeline.ForSync, cfg, log)
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
	defer sp.Close()

	on, _ := pipeline.Trackers().BuildSinks(cfg, pipeline.Overrides{}, nil, log) // a tracker off is said in the log
	if len(on) == 0 {
		fmt.Fprintf(stderr, "bridge: sync needs a tracker: --trackers auto turns on %s\n", strings.Join(pipeline.Trackers().TrackersOn(), ", and "))
		return exitUsage
	}
	var trackers []string
	for _, s := range on {
		trackers = append(trackers, s.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return upload.Run(ctx, upload.Options{Config: cfg, Spool: sp, Path: path, RunID: runID, Trackers: trackers,
		Version: version, Log: log, Stdout: stdout, Stderr: stderr})
}
