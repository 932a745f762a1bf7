package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/config"
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
		fs.SetInterspersed(true) // `bridge sync FILE --run-id ID`, as documented, and flags first
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
	sp, err := spool.OpenWith(path, spool.Options{Logger: log, MustExist: true, SyncEvery: cfg.SpoolSync})
	if err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return exitUsage
	}
	defer sp.Close()

	attempts := sp.Attempts()
	ov := pipeline.SameRun(runID)
	if runID == "" {
		// The latest attempt's run of each tracker.
		ov = pipeline.Overrides{RunIDs: map[string]string{}}
		for _, a := range attempts {
			for name, id := range a.Start.Runs {
				if id != "" {
					ov.RunIDs[name] = id
				}
			}
		}
	}
	// A run bridge (or an earlier sync) created is bridge's to end.
	ov.Owned = map[string]bool{}
	for name, id := range ov.RunIDs {
		ov.Owned[name] = createdByBridge(attempts, name, id)
	}
	// A multi-node job's spool is joined to the job's run by its key, as
	// its bridge would have: the election finds the elected run.
	job := jobOf(attempts, cfg)
	if job != nil && runID == "" {
		cfg.NodeID = job.NodeID
		delete(ov.RunIDs, "mlflow")
		log.Info("the spool is one node's of a multi-node job: uploading to the job's run", "key", job.Key, "node", job.NodeID)
	} else {
		job = nil
	}
	sinks, err := pipeline.BuildSinks(cfg, ov, job, log)
	if err != nil {
		return usageError(stderr, err)
	}
	if len(sinks) == 0 {
		fmt.Fprintln(stderr, "bridge: sync needs a tracker: set MLFLOW_TRACKING_URI=http(s)://... (or W&B's variables)")
		return exitUsage
	}
	info := tracker.StartInfo{RunName: "bridge sync " + path, NodeID: cfg.NodeID, Tags: map[string]string{"bridge.version": version, "bridge.synced_from": path}}
	// No background start: sync has no child to keep waiting, and a tracker
	// that does not answer within --start-timeout fails the sync.
	runs := pipeline.StartSinksWith(context.Background(), sinks, info, pipeline.StartPolicy{Timeout: cfg.StartTimeout}, log).Runs
	if len(runs) == 0 {
		fmt.Fprintln(stderr, "bridge: no tracker run to upload to (see the error above)")
		return 1
	}
	ids := pipeline.Started{Runs: runs}.RunIDs()
	startInfo := map[string]string{"mode": "sync"}
	for _, r := range runs {
		if r.Created {
			startInfo[pipeline.CreatedTag(r.Sink.Name())] = "true"
		}
	}
	// Recorded so that a later sync finds the run it created, and marked as a
	// sync so that forensics does not read it as a lost training attempt.
	if err := sp.WriteStart(spool.Record{Time: time.Now().UnixMilli(), Version: version, Runs: ids, Info: startInfo}); err != nil {
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
		// A run left RUNNING (its bridge was killed, or sync created it)
		// gets its terminal status; the sink changes only runs bridge owns
		// and that are still RUNNING.
		end, how := endOfJob(attempts, r.Sink.Name(), r.RunID)
		switch err := r.Sink.Finish(ctx, end); {
		case err != nil:
			fmt.Fprintf(stderr, "bridge: %s run %s: cannot record the end of the job: %v\n", r.Sink.Name(), r.RunID, err)
			code = 1
		case r.Created || ov.Owned[r.Sink.Name()]:
			fmt.Fprintf(stdout, "%s run %s: end recorded (%s)\n", r.Sink.Name(), r.RunID, how)
		default:
			fmt.Fprintf(stdout, "%s run %s: not created by bridge, its status is left as it is\n", r.Sink.Name(), r.RunID)
		}
	}
	if err := sp.WriteEnd(spool.Record{Time: time.Now().UnixMilli(), Info: map[string]string{"mode": "sync"}}); err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
	}
	return code
}

// createdByBridge reports whether an attempt recorded in the spool created
// the sink's run id.
func createdByBridge(attempts []spool.Attempt, sink, id string) bool {
	if id == "" {
		return false
	}
	for _, a := range attempts {
		if a.Start.Runs[sink] == id && a.Start.Info[pipeline.CreatedTag(sink)] == "true" {
			return true
		}
	}
	return false
}

// endOfJob is how the job that wrote to the run ended, from the spool: the
// last training attempt (not a sync) that wrote to it, or the last one at all
// for an offline spool. Its end record gives the exit; an attempt without one
// was lost (its bridge killed with it), which is KILLED.
func endOfJob(attempts []spool.Attempt, sink, id string) (tracker.EndInfo, string) {
	var last, wrote *spool.Attempt
	for i := range attempts {
		a := &attempts[i]
		if a.Start.Info["mode"] == "sync" {
			continue
		}
		last = a
		if a.Start.Runs[sink] == id {
			wrote = a
		}
	}
	if wrote != nil {
		last = wrote
	}
	tags := map[string]string{"bridge.end_recorded_by": "sync"}
	switch {
	case last == nil:
		return tracker.EndInfo{Time: time.Now(), Tags: tags}, "no training attempt in the spool"
	case last.End == nil || last.End.ExitCode == nil:
		t := time.Now()
		if last.LastSample != nil {
			t = last.LastSample.Time
		}
		tags["bridge.exit_status"] = "lost: bridge stopped without recording the end (killed with the job, or its node failed)"
		return tracker.EndInfo{ExitCode: 128 + int(syscall.SIGKILL), Signal: int(syscall.SIGKILL), Time: t, Tags: tags}, "the attempt was lost: KILLED"
	default:
		end := tracker.EndInfo{ExitCode: *last.End.ExitCode, Time: time.UnixMilli(last.End.Time), Tags: tags}
		if last.End.Info["bridge.exit_signal"] != "" {
			end.Signal = *last.End.ExitCode - 128
		}
		return end, fmt.Sprintf("exit code %d", end.ExitCode)
	}
}

// jobOf is the multi-node job the spool's last training attempt belonged
// to, nil for a single-node one.
func jobOf(attempts []spool.Attempt, cfg config.Config) *pipeline.Job {
	for i := len(attempts) - 1; i >= 0; i-- {
		if a := attempts[i]; a.Start.Info["mode"] != "sync" {
			return pipeline.JobFromTags(a.Start.Info, cfg.JobSettle)
		}
	}
	return nil
}
