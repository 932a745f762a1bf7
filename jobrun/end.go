package jobrun

import (
	"context"
	"errors"
	"fmt"
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

// End decides a multi-node job's end on the job's run (runs.Job), once
// node's end is recorded on its own (the sink's Finish): within ctx, every
// write retried by the write policy (tracker.Request).
//
// On a run bridge owns (tracker.RunOwner, MLflow's), the node's state line
// (its end, report.EndLine) and, when it did not end cleanly, its failure
// (bridge.failed.<who>, a record that stays) go to the job's run (again
// where the read shows a tick's late write over the line); then one
// read of the job's run decides, from every node's line, the run's status
// (FAILED or KILLED as soon as one node's child failed; FINISHED once every
// node the launcher started ended cleanly; with the node count unknown
// nothing more, the child's mlflow.end_run() decides; a status only gets
// worse), the job's first failure, and whether to write its report: the
// node that set the job's status writes it, and so does a node whose read
// shows every node ended (the last to end), a report claim left by a
// bridge that stopped first (stale on node.Clock), or a status set with
// no report nor claim (its setter stopped before it claimed). No node's series is read: a node's end costs
// a write and a read of the job's run (more only where it changes what the
// run says), whatever the job's size.
//
// On a run whose status is not bridge's (W&B's shared run), every node's
// end writes the first failure and the report's summary: there is no one
// node that settles the job.
func End(ctx context.Context, st tracker.RunStore, runs Runs, node Node, end tracker.EndInfo, log *slog.Logger) error {
	if runs.Job == "" {
		return errNoRun
	}
	o, ok := st.(tracker.RunOwner)
	if !ok {
		return summarize(ctx, st, runs.Job, log)
	}
	var tags map[string]string
	if runs.Node != "" {
		tags = endTags(runs, node, end)
		if err := keepWorseRecord(ctx, o, runs.Job, node, tags); err != nil {
			return err
		}
		if err := o.SetTags(ctx, runs.Job, tags); err != nil {
			return err
		}
	}
	run, wrote, err := settle(ctx, o, runs.Job, node, end, log)
	if err != nil {
		return err
	}
	if again, err := keepEndLine(ctx, o, run, node, tags); err != nil {
		return err
	} else if again {
		var w bool
		if run, w, err = settle(ctx, o, runs.Job, node, end, log); err != nil {
			return err
		}
		wrote = wrote || w
	}
	named, err := recordFirstFailure(ctx, o, run, node, log)
	if err != nil {
		return err
	}
	// A run whose status is set and holds no report (nor a claim): the
	// node that set it stopped before it claimed the report.
	unclaimed := tracker.Severity(run.Status) > 0 && run.Tags[report.TagReport] == ""
	if !wrote && !named && !unclaimed && !allEnded(run, node.Nodes) && !staleClaim(run.Tags[report.TagReport], node.now()) {
		return nil
	}
	return writeReport(ctx, o, runs.Job, node, log)
}

// keepWorseRecord leaves out of tags (a restarted attempt's endTags) its
// failure where the job's run holds one of the node's earlier attempts as
// bad or worse (tracker.Severity): bridge.failed.<who> is a record no
// later attempt lowers (a FAILED attempt stays FAILED after a KILLED
// one). One read, only for a restarted attempt that did not end cleanly.
func keepWorseRecord(ctx context.Context, o tracker.RunOwner, id string, node Node, tags map[string]string) error {
	key := "bridge.failed." + node.Who
	if node.Attempt <= 0 || tags[key] == "" {
		return nil
	}
	run, err := o.GetRun(ctx, id)
	if err != nil {
		return err
	}
	if tracker.Severity(recordStatus(run.Tags[key])) >= tracker.Severity(recordStatus(tags[key])) {
		delete(tags, key)
	}
	return nil
}

// recordStatus is the status a bridge.failed.<who> record names.
func recordStatus(v string) string {
	st, _, _ := strings.Cut(v, ":")
	return st
}

// keepEndLine writes this node's end (tags, its endTags) again where the
// run as read after it (run) holds the node's running line of the same
// attempt: a tick's write whose answer never came, applied by the server
// after the end's. again: it wrote, and the job's end is to be read again.
func keepEndLine(ctx context.Context, o tracker.RunOwner, run tracker.StoredRun, node Node, tags map[string]string) (again bool, err error) {
	key := tracker.StateTag(node.Node, node.Task)
	l := tracker.ParseLine(run.Tags[key])
	if tags == nil || l[tracker.LineStatus] != tracker.StatusRunning || l[tracker.LineAttempt] != tracker.ParseLine(tags[key])[tracker.LineAttempt] {
		return false, nil
	}
	return true, o.SetTags(ctx, run.ID, tags)
}

// endTags are what a node's end writes on the job's run: its state line,
// and its failure where it did not end cleanly.
func endTags(runs Runs, node Node, end tracker.EndInfo) map[string]string {
	status := tracker.TerminalStatus(end)
	tags := map[string]string{tracker.StateTag(node.Node, node.Task): report.EndLine(end.Tags,
		report.Ending{Who: node.Who, Status: status, Ended: end.Time, Attempt: node.Attempt, Run: runs.Node})}
	if status != tracker.StatusFinished {
		at := ""
		if node.Attempt >= 0 {
			at = fmt.Sprintf(", attempt %d", node.Attempt)
		}
		tags["bridge.failed."+node.Who] = fmt.Sprintf("%s: exit %d%s", status, end.ExitCode, at)
	}
	return tags
}

// Status is the status the nodes' records on a job's run call for ("" for
// none yet): the worst of bridge.failed.<node>, else FINISHED once nodes
// nodes (when known) ended FINISHED.
func Status(tags map[string]string, nodes int) string {
	worst := ""
	for k, v := range tags {
		if strings.HasPrefix(k, "bridge.failed.") {
			if st := recordStatus(v); tracker.Severity(st) > tracker.Severity(worst) {
				worst = st
			}
		}
	}
	if worst != "" || nodes <= 0 {
		return worst
	}
	clean := 0
	for _, r := range report.Records(report.Run{Tags: tags}) {
		if !r.Task && r.Status == tracker.StatusFinished {
			clean++
		}
	}
	if clean >= nodes {
		return tracker.StatusFinished
	}
	return ""
}

// allEnded reports whether every bridge the job's run records has ended,
// and (when the node count is known: nodes, else the run's record of it)
// every node the launcher started: the node that reads it is among the
// last to end.
func allEnded(run tracker.StoredRun, nodes int) bool {
	if nodes <= 0 {
		nodes, _ = strconv.Atoi(run.Tags[tracker.TagNodes])
	}
	recs := report.Records(reportRun(run))
	ended := 0
	for _, r := range recs {
		if r.Status == "" {
			return false
		}
		if !r.Task {
			ended++
		}
	}
	return len(recs) > 0 && ended >= nodes
}

// staleClaim reports whether a report tag (report.TagReport) is a claim
// whose writer's budget ended before now (reportClaim): its bridge stopped
// before it wrote the report.
func staleClaim(tag string, now time.Time) bool {
	if !strings.HasPrefix(tag, "being written by ") {
		return false
	}
	_, rest, ok := strings.Cut(tag, ", until ")
	if !ok {
		return false
	}
	until, _, _ := strings.Cut(rest, " ")
	t, err := time.Parse(time.RFC3339, until)
	return err == nil && t.Before(now)
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

// lastEnd is the latest end the nodes' records on a job's run hold (their
// state lines' ended, ms), else def.
func lastEnd(tags map[string]string, def time.Time) time.Time {
	var last time.Time
	for _, r := range report.Records(report.Run{Tags: tags}) {
		if r.Ended.After(last) {
			last = r.Ended
		}
	}
	if last.IsZero() {
		return def
	}
	return last
}

// recordFirstFailure sets report.TagFirstFailure to the earliest failure
// the nodes' records show, unless it already names an earlier (or the
// same) one that agrees with them: a later failure never takes its place,
// and a tag that names no failed node (forged, or garbled) does not stay.
// Nodes failing together may each write theirs: the writer reads again,
// and writes again while the tag names a later failure than the records
// show. run is the job's run as read after this node's records landed;
// named says whether this node wrote the tag.
func recordFirstFailure(ctx context.Context, st tracker.RunStore, run tracker.StoredRun, node Node, log *slog.Logger) (named bool, err error) {
	for range 3 {
		rr := reportRun(run)
		f := report.FirstFailureOf(rr)
		if f == nil {
			return named, nil
		}
		if cur := report.RecordedFailureOf(rr); cur != nil && !f.At().Before(cur.At()) {
			return named, nil
		}
		if err := st.SetTags(ctx, run.ID, map[string]string{report.TagFirstFailure: f.Tag()}); err != nil {
			return named, err
		}
		named = true
		log.Info("named the job's first failure", "run_id", run.ID, "first_failure", f.Node, "reason", f.Reason, "node", node.Who)
		if run, err = st.GetRun(ctx, run.ID); err != nil {
			return named, err
		}
	}
	return named, nil
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
