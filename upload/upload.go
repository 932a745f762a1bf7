// Package upload is `bridge sync`: it sends what a spool holds and its
// trackers have not acknowledged to the runs its attempts recorded (or to
// runs it finds or creates for them), and records each job's end there.
// Acknowledgements are written back to the file, so a second sync sends
// nothing (and MLflow drops exact duplicate points anyway).
package upload

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/tracker"
)

// Options are one sync of a spool.
type Options struct {
	Config   config.Config
	Spool    *spool.Spool // opened pipeline.ForSync
	Path     string       // the spool's path, as the user gave it
	RunID    string       // --run-id: every tracker's samples go to it
	Trackers []string     // the trackers on where sync runs
	Version  string       // bridge's, for the sync's records and the runs it creates
	Log      *slog.Logger
	Stdout   io.Writer // one line per run: what was sent, how its end was recorded
	Stderr   io.Writer // what went wrong, worded for the user
}

// Run uploads the spool's samples within ctx (sync's --timeout) and returns
// sync's exit code: 0, or 1 when a run was not found or a sample or an end
// not delivered (what was not sent stays in the file). The sync itself is
// recorded in the spool (with the runs it uses), so that a later sync finds
// them, and marked as one, so that forensics does not read it as a lost
// training attempt.
func Run(ctx context.Context, o Options) int {
	sp := o.Spool
	jobs, skipped := Plan(sp.Attempts(), o.Trackers, o.RunID)
	for _, sk := range skipped {
		fmt.Fprintf(o.Stderr, "bridge: sync: %s\n", sk)
	}
	if st := sp.Stats(); st.BadValues > 0 {
		fmt.Fprintf(o.Stderr, "bridge: sync: %d values in %s are not numbers; each was left out of its sample, the rest is sent\n", st.BadValues, o.Path)
	}
	if err := sp.WriteStart(spool.Record{Time: time.Now().UnixMilli(), Version: o.Version, Info: map[string]string{"mode": "sync"}}); err != nil {
		fmt.Fprintf(o.Stderr, "bridge: %v\n", err)
		return 1
	}
	code := 0
	for _, j := range jobs {
		code = max(code, j.upload(ctx, o))
	}
	if err := sp.WriteEnd(spool.Record{Time: time.Now().UnixMilli(), Info: map[string]string{"mode": "sync"}}); err != nil {
		fmt.Fprintf(o.Stderr, "bridge: %v\n", err)
	}
	return code
}

// upload sends the job's samples to its run (found, or created) and
// records the end of the job on it; it returns sync's exit code for it.
func (j Job) upload(ctx context.Context, o Options) int {
	if j.ended(o) {
		return 0
	}
	r, owned, err := j.find(ctx, o)
	if err != nil {
		fmt.Fprintf(o.Stderr, "bridge: %v\n", err)
		return 1
	}
	if err := j.record(o, r); err != nil {
		fmt.Fprintf(o.Stderr, "bridge: %v\n", err)
		return 1
	}
	sent, err := j.send(ctx, o, r)
	if err != nil {
		fmt.Fprintf(o.Stderr, "bridge: %v\n", err)
		return 1
	}
	return j.finish(ctx, o, r, owned, sent)
}

// ended reports (and says) that the job's run was ended by its bridge and
// has every sample: a reused spool names every earlier job's run, and such
// a run is left alone.
func (j Job) ended(o Options) bool {
	t, sp := j.tracker, o.Spool
	if j.run == "" || j.last == nil || j.last.End == nil || j.last.End.Info[pipeline.EndRecordedTag(t)] != j.run {
		return false
	}
	if err := sp.Track(t, j.run); err != nil || sp.PendingCount(t, j.run) > 0 {
		return false
	}
	fmt.Fprintf(o.Stdout, "%s run %s: 0 samples sent%s; its end was recorded by its bridge\n", t, j.run, ackedBefore(sp.Acked(t, j.run)))
	return true
}

// config is sync's configuration for the job's tracker, with what the spool
// recorded winning over where sync runs: the node id its samples were keyed
// with, and for a multi-node job (without --run-id) the job itself, whose
// run the election finds (or makes, when none was recorded), with the
// node's (or its task's) keys and this node's record of the end.
func (j Job) config(o Options) (config.Config, *pipeline.Job) {
	cfg := o.Config
	cfg.Trackers = []string{j.tracker} // on where sync runs: the others' warnings were said
	if j.last == nil {
		return cfg, nil
	}
	if info := j.last.Start.Info; info["bridge.version"] != "" {
		if rec := info["bridge.node_id"]; rec != cfg.NodeID {
			if cfg.NodeID != "" {
				o.Log.Warn("--node-id differs from the node id the spool recorded for this run; the spool's is used",
					"node_id", cfg.NodeID, "recorded", rec, "tracker", j.tracker)
			}
			cfg.NodeID = rec
		}
	}
	if o.RunID != "" {
		return cfg, nil
	}
	job := pipeline.JobFromTags(j.last.Start.Info, cfg.JobSettle)
	if job != nil {
		cfg.NodeID = job.NodeID
		o.Log.Info("the spool is one node's of a multi-node job: uploading to the job's run", "key", job.Key, "node", job.Label(), "tracker", j.tracker)
	}
	return cfg, job
}

// find builds the job's sink and finds (or creates) its run; owned says
// that an attempt of the spool created that run.
func (j Job) find(ctx context.Context, o Options) (r pipeline.SinkRun, owned bool, err error) {
	cfg, job := j.config(o)
	owned = createdByBridge(o.Spool.Attempts(), j.tracker, j.run)
	ov := pipeline.Overrides{RunIDs: map[string]string{j.tracker: j.run}, Owned: map[string]bool{j.tracker: owned}}
	if j.last != nil {
		ov.Recorded = j.last.Start.Info // where the job's run is: the tracker's variables here may name another place
	}
	sinks, _ := pipeline.Trackers().BuildSinks(cfg, ov, job, o.Log)
	if len(sinks) != 1 {
		return r, false, fmt.Errorf("%s: not configured where sync runs (see the messages above)", j.tracker)
	}
	info := j.startInfo(o, cfg.NodeID)
	// Patient, within sync's --timeout: there is no child to keep waiting.
	fd := finder{sink: sinks[0], info: info, job: job, spool: o.Path, out: o.Stderr}
	if err := fd.find(ctx); err != nil {
		return r, false, err
	}
	ri := sinks[0].Run()
	return pipeline.SinkRun{Sink: sinks[0], RunID: ri.ID, Created: ri.Created}, owned, nil
}

// startInfo is what the job's trackers were told at its start, from the
// spool's start record of its first attempt (the last that recorded the
// run, for a run recorded: pipeline.RecordedStart): the
// run sync creates is the run a live upload would have made (name, start
// time, tags, provenance), with the file it was synced from. A file bridge
// did not write has no start record: its run is named after the file.
func (j Job) startInfo(o Options, nodeID string) tracker.StartInfo {
	first := j.last
	if len(j.claim) > 0 {
		atts := o.Spool.Attempts()
		for i := range atts {
			if a := &atts[i]; a.Start.Attempt == j.claim[0] && !isSync(a) {
				first = a
				break
			}
		}
	}
	if first == nil {
		return tracker.StartInfo{RunName: "bridge sync " + o.Path, NodeID: nodeID, Time: time.Now(),
			Tags: map[string]string{"bridge.version": o.Version, "bridge.synced_from": o.Path}}
	}
	info := pipeline.RecordedStart(pipeline.Trackers(), first.Start.Info, time.UnixMilli(first.Start.Time), nodeID)
	info.Tags["bridge.synced_from"] = o.Path
	return info
}

// record writes the run into the spool before anything is sent, so that a
// later sync finds it (and that bridge made it) instead of creating
// another: for each attempt it claims, and for sync's own attempt. A run
// that is not the one recorded (that one was deleted) takes the samples of
// the attempts that recorded it too.
func (j Job) record(o Options, r pipeline.SinkRun) error {
	t, sp := j.tracker, o.Spool
	claim := j.claim
	if j.run != "" && r.RunID != j.run {
		o.Log.Warn("the job's run is not the one the spool recorded; its samples go to the job's run", "recorded", j.run, "run", r.RunID, "tracker", t)
		for _, a := range sp.Attempts() {
			if !isSync(&a) && a.Start.Runs[t] == j.run {
				claim = append(claim, a.Start.Attempt)
			}
		}
	}
	created := pipeline.RunRecordInfo(r.Sink, r.Created)
	for _, k := range append(claim, 0) { // 0: sync's own attempt
		if err := sp.WriteRun(spool.Record{Time: time.Now().UnixMilli(), Sink: t, Run: r.RunID, Attempt: k, Info: created}); err != nil {
			return err
		}
	}
	return nil
}

// sent is what one job's upload delivered.
type sent struct {
	done    bool  // every pending sample was delivered
	err     error // why not
	pending int   // samples the run lacked
	sent    int   // samples delivered
	left    int   // points the tracker refuses, left out
}

// send delivers the samples the run lacks and says how many went.
func (j Job) send(ctx context.Context, o Options, r pipeline.SinkRun) (sent, error) {
	t, sp := j.tracker, o.Spool
	before := sp.Acked(t, r.RunID)
	if err := sp.Track(t, r.RunID); err != nil {
		return sent{}, err
	}
	s := sent{pending: sp.PendingCount(t, r.RunID)}
	fwd := &tracker.Forwarder{Sink: r.Sink, RunID: r.RunID, Queue: sp, Log: o.Log}
	s.done = fwd.Drain(ctx)
	_, s.sent, s.err = fwd.Status()
	line := fmt.Sprintf("%s run %s: %d samples sent%s", t, r.RunID, s.sent, ackedBefore(before))
	if s.left = r.Sink.Run().Dropped; s.left > 0 {
		line += fmt.Sprintf("; %d points left out (the tracker refuses them)", s.left)
	}
	fmt.Fprintln(o.Stdout, line)
	return s, nil
}

// finish records the end of the job on its run: a run left RUNNING (its
// bridge was killed, or sync created it) gets its terminal status; the
// sink changes only runs bridge owns and that are still RUNNING.
func (j Job) finish(ctx context.Context, o Options, r pipeline.SinkRun, owned bool, s sent) int {
	t := j.tracker
	code := 0
	end, how, lost := endOfJob(o.Spool.Attempts(), t, r.RunID)
	if lost != nil {
		// The spool lacks the attempt's end; the tracker may hold it (a full
		// disk kept only the end record out of the file).
		end, how, code = trackerEnd(ctx, r.Sink, lost, end, how, o.Stderr)
	}
	if s.left > 0 {
		end.Tags["bridge.sync_points_left_out"] = strconv.Itoa(s.left)
	}
	if !s.done {
		fmt.Fprintf(o.Stderr, "bridge: %s: %d of %d samples not sent: %v\n", t, s.pending-s.sent, s.pending, s.err)
		code = 1
		// Not FINISHED (or FAILED) as if its samples were all there: the
		// status stays, and the next sync that delivers them records it.
		end.KeepStatus = true
		end.Tags["bridge.sync_incomplete"] = fmt.Sprintf("%d of %d samples not delivered; run bridge sync again", s.pending-s.sent, s.pending)
		how = "status left as it is: samples are missing"
	}
	switch err := r.Sink.Finish(ctx, end); {
	case err != nil:
		fmt.Fprintf(o.Stderr, "bridge: %s run %s: cannot record the end of the job: %v\n", t, r.RunID, err)
		code = 1
	case r.Created || owned:
		fmt.Fprintf(o.Stdout, "%s run %s: end recorded (%s)\n", t, r.RunID, how)
		j.note(ctx, o, r, end)
	default:
		fmt.Fprintf(o.Stdout, "%s run %s: not created by bridge, its status is left as it is\n", t, r.RunID)
	}
	return code
}

// note writes the run's note as the live run's last tick would have (a
// synced run is the run a live upload makes): read from the run, now that
// its end is recorded. A note that cannot be written leaves the run as it
// is, said.
func (j Job) note(ctx context.Context, o Options, r pipeline.SinkRun, end tracker.EndInfo) {
	js, ok := r.Sink.(*jobrun.Sink)
	if !ok || end.KeepStatus {
		return
	}
	live := jobrun.Live{Tags: end.Tags, End: true, Status: tracker.TerminalStatus(end)}
	if _, err := js.Tick(ctx, r.RunID, live); err != nil {
		o.Log.Warn("cannot write the run's note", "tracker", j.tracker, "run", r.RunID, "err", err)
	}
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
	return id != "" && slices.ContainsFunc(attempts, func(a spool.Attempt) bool {
		return a.Start.Runs[sink] == id && a.Start.Info[pipeline.CreatedTag(sink)] == "true"
	})
}
