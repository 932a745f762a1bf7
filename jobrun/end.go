package jobrun

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
)

// TagFinishedBy names the node that set a job's run FINISHED. Nodes
// ending together may each set it: to the same status and the same end
// time (the last node's end, lastEnd), so which of them the tag names
// changes nothing.
const TagFinishedBy = "bridge.finished_by"

// End decides a multi-node job's end on its run id, once node's end is
// recorded there (the sink's Finish): within ctx, every write retried by
// the write policy (tracker.Request).
//
// On a run bridge owns (tracker.RunOwner, MLflow's), the run's status
// from every node's record (FAILED or KILLED as soon as one node's child
// failed, a record that stays; FINISHED once every node the launcher
// started ended cleanly; with the node count unknown nothing more, the
// child's mlflow.end_run() decides; a status only gets worse), the job's
// first failure, and its report: the node that set the job's status writes
// it, and every node that ends after one was written writes it again, so
// the last node to end leaves the report of every node's end.
//
// On a run whose status is not bridge's (W&B's shared run), every node's
// end writes the first failure and the report's summary: there is no one
// node that settles the job.
func End(ctx context.Context, st tracker.RunStore, id string, node Node, end tracker.EndInfo, log *slog.Logger) error {
	if id == "" {
		return errNoRun
	}
	o, ok := st.(tracker.RunOwner)
	if !ok {
		return summarize(ctx, st, id, log)
	}
	run, wrote, err := settle(ctx, o, id, node, end, log)
	if err != nil {
		return err
	}
	if err := recordFirstFailure(ctx, o, run, node, log); err != nil {
		return err
	}
	if !wrote && run.Tags[report.TagReport] == "" {
		return nil
	}
	return writeReport(ctx, o, id, node, log)
}

// Status is the status the nodes' records on a job's run call for ("" for
// none yet): the worst of bridge.failed.<node>, else FINISHED once nodes
// nodes (when known) ended FINISHED.
func Status(tags map[string]string, nodes int) string {
	worst := ""
	for k, v := range tags {
		if strings.HasPrefix(k, "bridge.failed.") {
			st, _, _ := strings.Cut(v, ":")
			if tracker.Severity(st) > tracker.Severity(worst) {
				worst = st
			}
		}
	}
	if worst != "" || nodes <= 0 {
		return worst
	}
	clean := 0
	for k, v := range tags {
		if strings.HasPrefix(k, "bridge.node.") && strings.HasSuffix(k, ".status") && v == tracker.StatusFinished {
			clean++
		}
	}
	if clean >= nodes {
		return tracker.StatusFinished
	}
	return ""
}

// settle moves the run to the status the records call for, and says
// whether this node wrote one, with the run as it last read it (after
// this node's records). Nodes ending together may each read the others'
// records before they land: the one that writes reads again, so the last
// writer saw every record. FINISHED ends at the last node's end, read
// from the records, so every node that writes it writes the same.
func settle(ctx context.Context, o tracker.RunOwner, id string, node Node, end tracker.EndInfo, log *slog.Logger) (last tracker.StoredRun, wrote bool, err error) {
	for range 3 {
		run, err := o.GetRun(ctx, id)
		if err != nil {
			return last, wrote, err
		}
		last = run
		nodes := node.Nodes
		if nodes <= 0 {
			nodes, _ = strconv.Atoi(run.Tags[tracker.TagNodes])
		}
		want := Status(run.Tags, nodes)
		if want == "" || tracker.Severity(want) <= tracker.Severity(run.Status) {
			return last, wrote, nil
		}
		at := end.Time
		if want == tracker.StatusFinished {
			at = lastEnd(run.Tags, end.Time)
			if err := o.SetTags(ctx, id, map[string]string{TagFinishedBy: node.Who}); err != nil {
				return last, wrote, err
			}
		}
		if err := o.SetStatus(ctx, id, want, at); err != nil {
			return last, wrote, err
		}
		wrote = true
		log.Info("set the job's run status", "run_id", id, "status", want, "node", node.Who)
	}
	return last, wrote, nil
}

// lastEnd is the latest end the nodes' records on a job's run hold
// (bridge.node.<id>.ended, bridge.task.<id>.<task>.ended, in ms), else
// def.
func lastEnd(tags map[string]string, def time.Time) time.Time {
	var last int64
	for k, v := range tags {
		if (strings.HasPrefix(k, "bridge.node.") || strings.HasPrefix(k, "bridge.task.")) && strings.HasSuffix(k, ".ended") {
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > last {
				last = ms
			}
		}
	}
	if last <= 0 {
		return def
	}
	return time.UnixMilli(last)
}

// recordFirstFailure sets report.TagFirstFailure to the earliest failure
// the nodes' records show, unless it already names an earlier (or the
// same) one that agrees with them: a later failure never takes its place,
// and a tag that names no failed node (forged, or garbled) does not stay.
// Nodes failing together may each write theirs: the writer reads again,
// and writes again while the tag names a later failure than the records
// show. run is the job's run as read after this node's records landed.
func recordFirstFailure(ctx context.Context, st tracker.RunStore, run tracker.StoredRun, node Node, log *slog.Logger) error {
	for range 3 {
		rr := reportRun(run)
		f := report.FirstFailureOf(rr)
		if f == nil {
			return nil
		}
		if cur := report.RecordedFailureOf(rr); cur != nil && !f.At().Before(cur.At()) {
			return nil
		}
		if err := st.SetTags(ctx, run.ID, map[string]string{report.TagFirstFailure: f.Tag()}); err != nil {
			return err
		}
		log.Info("named the job's first failure", "run_id", run.ID, "first_failure", f.Node, "reason", f.Reason, "node", node.Who)
		var err error
		if run, err = st.GetRun(ctx, run.ID); err != nil {
			return err
		}
	}
	return nil
}

// summarize writes, on a run whose status is not bridge's, the job's first
// failure (the one recorded where it agrees with the nodes and is earlier,
// else the records') and its report's summary, from the nodes' records.
// A run that does not exist yet (the child never created it) has nothing
// to summarize.
func summarize(ctx context.Context, st tracker.RunStore, id string, log *slog.Logger) error {
	run, err := st.GetRun(ctx, id)
	if errors.Is(err, tracker.ErrNotReady) {
		return nil
	}
	if err != nil {
		return err
	}
	rep, _ := report.Build(ctx, reportRun(run), nil) // no series: no error
	tags := map[string]string{report.TagReportSummary: rep.Summary()}
	if f := rep.FirstFailure; f != nil {
		tags[report.TagFirstFailure] = f.Tag()
	}
	if err := st.SetTags(ctx, id, tags); err != nil {
		return err
	}
	log.Info("recorded the job's report in its run", "run_id", id)
	return nil
}
