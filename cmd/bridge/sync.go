package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/tracker"
)

// runSync is `bridge sync FILE [--run-id ID]`: it uploads what a spool holds
// and its trackers have not acknowledged. Acknowledgements are written back to
// the file, so a second sync sends nothing (and MLflow drops exact duplicate
// points anyway).
func runSync(args []string, stdout, stderr io.Writer) int {
	var runID string
	var timeout time.Duration
	fs, cfg, ok := parse("sync", args, stderr, func(fs *pflag.FlagSet) {
		fs.StringVar(&runID, "run-id", "", "run to upload to (default: the run recorded in the spool; else a new run)")
		fs.DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long; what is not sent stays in the file")
	})
	if !ok {
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "bridge: usage: bridge sync FILE [--run-id ID]")
		return exitUsage
	}
	path := fs.Arg(0)
	log := newLogger(stderr, cfg.LogLevel)
	sp, err := spool.OpenWith(path, spool.Options{Logger: log, MustExist: true})
	if err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return exitUsage
	}
	defer sp.Close()

	ov := pipeline.SameRun(runID)
	if runID == "" {
		// The latest attempt's run of each tracker.
		ov = pipeline.Overrides{RunIDs: map[string]string{}}
		for _, a := range sp.Attempts() {
			for name, id := range a.Start.Runs {
				if id != "" {
					ov.RunIDs[name] = id
				}
			}
		}
	}
	sinks, err := pipeline.BuildSinks(cfg, ov, log)
	if err != nil {
		return usageError(stderr, err)
	}
	if len(sinks) == 0 {
		fmt.Fprintln(stderr, "bridge: sync needs a tracker: set MLFLOW_TRACKING_URI=http(s)://... (or W&B's variables)")
		return exitUsage
	}
	info := tracker.StartInfo{RunName: "bridge sync " + path, NodeID: cfg.NodeID, Tags: map[string]string{"bridge.version": version, "bridge.synced_from": path}}
	runs := pipeline.StartSinks(context.Background(), sinks, info, log).Runs
	if len(runs) == 0 {
		fmt.Fprintln(stderr, "bridge: no tracker run to upload to (see the error above)")
		return 1
	}
	ids := pipeline.Started{Runs: runs}.RunIDs()
	// Recorded so that a later sync finds the run it created, and marked as a
	// sync so that forensics does not read it as a lost training attempt.
	if err := sp.WriteStart(spool.Record{Time: time.Now().UnixMilli(), Version: version, Runs: ids, Info: map[string]string{"mode": "sync"}}); err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	code := 0
	for _, r := range runs {
		before := sp.Acked(r.Sink.Name(), r.RunID)
		if err := sp.Track(r.Sink.Name(), r.RunID); err != nil {
			fmt.Fprintf(stderr, "bridge: %v\n", err)
			return 1
		}
		pending := sp.PendingCount(r.Sink.Name(), r.RunID)
		fwd := &tracker.Forwarder{Sink: r.Sink, RunID: r.RunID, Queue: sp, Log: log}
		done := fwd.Drain(ctx)
		_, ferr, sent := fwd.Status()
		fmt.Fprintf(stdout, "%s run %s: %d samples sent, %d already acknowledged before (up to step %d)\n",
			r.Sink.Name(), r.RunID, sent, max(0, int(before+1)), before)
		if !done {
			fmt.Fprintf(stderr, "bridge: %s: %d of %d samples not sent: %v\n", r.Sink.Name(), pending-sent, pending, ferr)
			code = 1
		}
	}
	if err := sp.WriteEnd(spool.Record{Time: time.Now().UnixMilli(), Info: map[string]string{"mode": "sync"}}); err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
	}
	return code
}
