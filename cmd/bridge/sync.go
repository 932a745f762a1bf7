package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
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
	sp, err := pipeline.OpenSpool(path, pipeline.ForSync, pipeline.SettingsFrom(cfg), log)
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

	on, _ := pipeline.BuildSinks(cfg, pipeline.Overrides{}, nil, log) // a tracker off is said in the log
	if len(on) == 0 {
		fmt.Fprintln(stderr, "bridge: sync needs a tracker: set MLFLOW_TRACKING_URI=http(s)://... (or W&B's variables)")
		return exitUsage
	}
	var trackers []string
	for _, s := range on {
		trackers = append(trackers, s.Name())
	}
	jobs, skipped := planSync(sp.Attempts(), trackers, runID)
	for _, sk := range skipped {
		fmt.Fprintf(stderr, "bridge: sync: %s\n", sk)
	}
	if st := sp.Stats(); st.BadValues > 0 {
		fmt.Fprintf(stderr, "bridge: sync: %d values in %s are not numbers; each was left out of its sample, the rest is sent\n", st.BadValues, path)
	}
	// Recorded (with the runs it uses, below) so that a later sync finds
	// them, and marked as a sync so that forensics does not read it as a
	// lost training attempt.
	if err := sp.WriteStart(spool.Record{Time: time.Now().UnixMilli(), Version: version, Info: map[string]string{"mode": "sync"}}); err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	code := 0
	for _, j := range jobs {
		code = max(code, j.upload(ctx, syncEnv{cfg: cfg, sp: sp, path: path, byKey: runID == "", log: log, stdout: stdout, stderr: stderr}))
	}
	if err := sp.WriteEnd(spool.Record{Time: time.Now().UnixMilli(), Info: map[string]string{"mode": "sync"}}); err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
	}
	return code
}

// syncJob is one run `bridge sync` uploads to, and the attempts whose
// samples belong to it: those that recorded it, or, for run "", a chain of
// attempts that recorded no run for the tracker (an attempt that follows a
// lost one resumes its job), which the run sync creates then takes
// (claim).
type syncJob struct {
	tracker string
	run     string // "": sync creates one
	claim   []int  // attempt numbers the run is recorded for
	last    *spool.Attempt
}

// planSync lists the runs to upload to, tracker by tracker, in the order
// the file first names them. With runID, every tracker uploads to it the
// samples of the attempts that recorded it or no run at all; attempts that
// wrote to other runs are left out and named in skipped.
func planSync(attempts []spool.Attempt, trackers []string, runID string) (jobs []syncJob, skipped []string) {
	var training []*spool.Attempt
	lastSync := map[string]string{}
	for i := range attempts {
		if a := &attempts[i]; a.Start.Info["mode"] == "sync" {
			for t, r := range a.Start.Runs {
				lastSync[t] = r
			}
		} else {
			training = append(training, a)
		}
	}
	for _, t := range trackers {
		if len(training) == 0 {
			// A file bridge did not write: its samples go to the run an
			// earlier sync gave them, else to a new one.
			jobs = append(jobs, syncJob{tracker: t, run: cmp.Or(runID, lastSync[t])})
			continue
		}
		if runID != "" {
			j := syncJob{tracker: t, run: runID}
			var others []string
			for _, a := range training {
				switch r := a.Start.Runs[t]; r {
				case "":
					j.claim, j.last = append(j.claim, a.Start.Attempt), a
				case runID:
					j.last = a
				default:
					others = append(others, fmt.Sprintf("%d (run %s)", a.Start.Attempt, r))
				}
			}
			if len(others) > 0 {
				skipped = append(skipped, fmt.Sprintf("%s: attempts %s wrote to other runs; their samples are not sent to --run-id %s (without --run-id, sync sends them to their own runs)",
					t, strings.Join(others, ", "), runID))
			}
			jobs = append(jobs, j)
			continue
		}
		byRun := map[string]int{}
		chain := -1 // the job of the run-less chain the previous attempt is in
		for i, a := range training {
			r := a.Start.Runs[t]
			if r != "" {
				if k, ok := byRun[r]; ok {
					jobs[k].last = a
				} else {
					byRun[r] = len(jobs)
					jobs = append(jobs, syncJob{tracker: t, run: r, last: a})
				}
				chain = -1
				continue
			}
			if chain >= 0 && training[i-1].End == nil {
				jobs[chain].claim, jobs[chain].last = append(jobs[chain].claim, a.Start.Attempt), a
				continue
			}
			chain = len(jobs)
			jobs = append(jobs, syncJob{tracker: t, claim: []int{a.Start.Attempt}, last: a})
		}
	}
	// A chain whose attempts wrote no sample has nothing to upload.
	kept := jobs[:0]
	for _, j := range jobs {
		if j.run != "" || j.last == nil || slices.ContainsFunc(training, func(a *spool.Attempt) bool {
			return a.Samples > 0 && slices.Contains(j.claim, a.Start.Attempt)
		}) {
			kept = append(kept, j)
		}
	}
	return kept, skipped
}

// syncEnv is what every job of one sync shares.
type syncEnv struct {
	cfg            config.Config
	sp             *spool.Spool
	path           string
	byKey          bool // no --run-id: a multi-node job's attempts go to the job's run, found by its key
	log            *slog.Logger
	stdout, stderr io.Writer
}

// upload sends the job's samples to its run (found, or created) and
// records the end of the job on it; it returns sync's exit code for it.
func (j syncJob) upload(ctx context.Context, e syncEnv) int {
	t, sp := j.tracker, e.sp
	// A run already ended by its bridge that has every sample is left
	// alone: a reused spool names every earlier job's run.
	if j.run != "" && j.last != nil && j.last.End != nil && j.last.End.Info[pipeline.EndRecordedTag(t)] == j.run {
		if err := sp.Track(t, j.run); err == nil && sp.PendingCount(t, j.run) == 0 {
			fmt.Fprintf(e.stdout, "%s run %s: 0 samples sent%s; its end was recorded by its bridge\n", t, j.run, ackedBefore(sp.Acked(t, j.run)))
			return 0
		}
	}
	// The node id the spool recorded wins: its samples were keyed with it.
	cfg := e.cfg
	if j.last != nil && j.last.Start.Info["bridge.version"] != "" {
		rec := j.last.Start.Info["bridge.node_id"]
		if rec != cfg.NodeID {
			if cfg.NodeID != "" {
				e.log.Warn("--node-id differs from the node id the spool recorded for this run; the spool's is used",
					"node_id", cfg.NodeID, "recorded", rec, "tracker", t)
			}
			cfg.NodeID = rec
		}
		if rec == "" && t == "wandb" {
			// W&B labels series with the host name when there is no node
			// id: the recorded host's, not sync's.
			cfg.NodeID = j.last.Start.Info["bridge.hostname"]
		}
	}
	ov := pipeline.Overrides{RunIDs: map[string]string{t: j.run}, Owned: map[string]bool{t: createdByBridge(sp.Attempts(), t, j.run)}}
	if j.last != nil {
		ov.Recorded = j.last.Start.Info // where the job's run is: the tracker's variables here may name another place
	}
	// The attempts of a multi-node job go to the job's run as their bridge
	// would have sent them: the election finds it (or makes it, when none
	// was recorded), the keys are the node's (or its task's), and the end
	// is this node's record on the job's run, not the run's status.
	var job *pipeline.Job
	if e.byKey && j.last != nil {
		job = pipeline.JobFromTags(j.last.Start.Info, cfg.JobSettle)
	}
	if job != nil {
		cfg.NodeID = job.NodeID
		e.log.Info("the spool is one node's of a multi-node job: uploading to the job's run", "key", job.Key, "node", job.Label(), "tracker", t)
	}
	cfg.Trackers = []string{t} // on in runSync: the others' warnings were said there
	sinks, _ := pipeline.BuildSinks(cfg, ov, job, e.log)
	sinks = slices.DeleteFunc(sinks, func(s tracker.Sink) bool { return s.Name() != t })
	info := tracker.StartInfo{RunName: "bridge sync " + e.path, NodeID: cfg.NodeID,
		Tags: map[string]string{"bridge.version": version, "bridge.synced_from": e.path}}
	if len(sinks) != 1 {
		fmt.Fprintf(e.stderr, "bridge: %s: not configured where sync runs (see the messages above)\n", t)
		return 1
	}
	// Patient, within sync's --timeout: there is no child to keep waiting.
	fd := syncFinder{sink: sinks[0], info: info, job: job, spool: e.path, out: e.stderr, every: syncProgress}
	if err := fd.find(ctx); err != nil {
		fmt.Fprintf(e.stderr, "bridge: %v\n", err)
		return 1
	}
	c, isCreator := sinks[0].(pipeline.RunCreator)
	r := pipeline.SinkRun{Sink: sinks[0], RunID: sinks[0].RunID(), Created: isCreator && c.Created()}
	created := pipeline.RunRecordInfo(r.Sink, r.Created)
	claim := j.claim
	if j.run != "" && r.RunID != j.run {
		// The job's run is not the one recorded (that one was deleted):
		// the samples of the attempts that recorded it go to the job's.
		e.log.Warn("the job's run is not the one the spool recorded; its samples go to the job's run", "recorded", j.run, "run", r.RunID, "tracker", t)
		for _, a := range sp.Attempts() {
			if a.Start.Info["mode"] != "sync" && a.Start.Runs[t] == j.run {
				claim = append(claim, a.Start.Attempt)
			}
		}
	}
	// Before anything is sent: a later sync finds the run (and that bridge
	// made it) instead of creating another.
	for _, k := range claim {
		if err := sp.WriteRun(spool.Record{Time: time.Now().UnixMilli(), Sink: t, Run: r.RunID, Attempt: k, Info: created}); err != nil {
			fmt.Fprintf(e.stderr, "bridge: %v\n", err)
			return 1
		}
	}
	if err := sp.WriteRun(spool.Record{Time: time.Now().UnixMilli(), Sink: t, Run: r.RunID, Info: created}); err != nil {
		fmt.Fprintf(e.stderr, "bridge: %v\n", err)
		return 1
	}
	before := sp.Acked(t, r.RunID)
	if err := sp.Track(t, r.RunID); err != nil {
		fmt.Fprintf(e.stderr, "bridge: %v\n", err)
		return 1
	}
	pending := sp.PendingCount(t, r.RunID)
	fwd := &tracker.Forwarder{Sink: r.Sink, RunID: r.RunID, Queue: sp, Log: e.log}
	done := fwd.Drain(ctx)
	_, ferr, sent := fwd.Status()
	line := fmt.Sprintf("%s run %s: %d samples sent%s", t, r.RunID, sent, ackedBefore(before))
	left := 0
	if d, ok := r.Sink.(tracker.Dropper); ok {
		left = d.Dropped()
	}
	if left > 0 {
		line += fmt.Sprintf("; %d points left out (the tracker refuses them)", left)
	}
	fmt.Fprintln(e.stdout, line)
	code := 0
	end, how, lost := endOfJob(sp.Attempts(), t, r.RunID)
	if lost != nil {
		// The spool lacks the attempt's end; the tracker may hold it (a full
		// disk kept only the end record out of the file).
		end, how, code = trackerEnd(ctx, r.Sink, lost, end, how, e.stderr)
	}
	if left > 0 {
		end.Tags["bridge.sync_points_left_out"] = strconv.Itoa(left)
	}
	if !done {
		fmt.Fprintf(e.stderr, "bridge: %s: %d of %d samples not sent: %v\n", t, pending-sent, pending, ferr)
		code = 1
		// Not FINISHED (or FAILED) as if its samples were all there: the
		// status stays, and the next sync that delivers them records it.
		end.KeepStatus = true
		end.Tags["bridge.sync_incomplete"] = fmt.Sprintf("%d of %d samples not delivered; run bridge sync again", pending-sent, pending)
		how = "status left as it is: samples are missing"
	}
	// A run left RUNNING (its bridge was killed, or sync created it) gets
	// its terminal status; the sink changes only runs bridge owns and that
	// are still RUNNING.
	switch err := r.Sink.Finish(ctx, end); {
	case err != nil:
		fmt.Fprintf(e.stderr, "bridge: %s run %s: cannot record the end of the job: %v\n", t, r.RunID, err)
		code = 1
	case r.Created || ov.Owned[t]:
		fmt.Fprintf(e.stdout, "%s run %s: end recorded (%s)\n", t, r.RunID, how)
	default:
		fmt.Fprintf(e.stdout, "%s run %s: not created by bridge, its status is left as it is\n", t, r.RunID)
	}
	return code
}

// ackedBefore says what the tracker had acknowledged before this sync
// (seq: the highest step, -1 for nothing): nothing to say when it had none.
func ackedBefore(seq int64) string {
	if seq < 0 {
		return ""
	}
	return fmt.Sprintf("; those up to step %d were acknowledged before", seq)
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

// trackerEnd looks at what the tracker holds before sync records an attempt
// the spool shows without an end (lost) as lost. An end its bridge recorded
// on the run since the attempt started is kept as it is (only sync's own
// tags are added); one that cannot be read leaves the run as it is too,
// and fails the sync. Otherwise the attempt was lost: end, how stand.
func trackerEnd(ctx context.Context, sink tracker.Sink, lost *spool.Attempt, end tracker.EndInfo, how string, stderr io.Writer) (tracker.EndInfo, string, int) {
	er, ok := sink.(tracker.EndReader)
	if !ok {
		return end, how, 0
	}
	rec, found, err := er.RecordedEnd(ctx, time.UnixMilli(lost.Start.Time))
	keep := tracker.EndInfo{KeepStatus: true, Time: end.Time, Tags: map[string]string{}}
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "bridge: %s run %s: the spool has no end for attempt %d and the run's cannot be read, so it is not recorded as lost; run bridge sync again: %v\n",
			sink.Name(), sink.RunID(), lost.Start.Attempt, err)
		return keep, "status left as it is: the end recorded on the run could not be read", 1
	case found:
		return keep, fmt.Sprintf("kept the end its bridge recorded on the run: exit code %d, %s; the spool lacked it", rec.ExitCode, cmp.Or(rec.Status, "status not recorded")), 0
	}
	return end, how, 0
}

// endOfJob is how the job that wrote to the run ended, from the spool: the
// last training attempt (not a sync) that wrote to it, or the last one at all
// for an offline spool. Its end record gives the exit; an attempt without one
// was lost (its bridge killed with it), which is KILLED, and is returned.
func endOfJob(attempts []spool.Attempt, sink, id string) (tracker.EndInfo, string, *spool.Attempt) {
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
		return tracker.EndInfo{Time: time.Now(), Tags: tags}, "no training attempt in the spool", nil
	case last.End == nil || last.End.ExitCode == nil:
		t := time.Now()
		if last.LastSample != nil {
			t = last.LastSample.Time
		}
		tags["bridge.exit_status"] = "lost: bridge stopped without recording the end (killed with the job, or its node failed)"
		return tracker.EndInfo{ExitCode: 128 + int(syscall.SIGKILL), Signal: int(syscall.SIGKILL), Time: t, Tags: tags}, "the attempt was lost: KILLED", last
	default:
		end := tracker.EndInfo{ExitCode: *last.End.ExitCode, Time: time.UnixMilli(last.End.Time), Tags: tags}
		if last.End.Info["bridge.exit_signal"] != "" {
			end.Signal = *last.End.ExitCode - 128
		}
		return end, fmt.Sprintf("exit code %d", end.ExitCode), nil
	}
}
