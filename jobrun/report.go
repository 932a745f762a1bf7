package jobrun

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
)

// The job's report as run artifacts (docs/multinode.md).
const (
	ReportMarkdown = "bridge-report.md"
	ReportJSON     = "bridge-report.json"
)

// Report reads run id and makes its report (`bridge report`): the run's
// tags and latest values in one read (a job's run: every node's state
// line), and the series of the nodes that recorded no figures of their
// own, each once: on the run itself, or on a node's own run (at most
// report.DefaultMaxNodeRuns of them). When ctx ends while the series are
// read, the report so far comes with the error (report.BuildRead). An id
// that is no valid run id is refused before any request.
func Report(ctx context.Context, o tracker.RunOwner, id string) (*report.Report, error) {
	if err := tracker.ValidID("run id", id); err != nil {
		return nil, err
	}
	run, err := o.GetRun(ctx, id)
	if err != nil {
		return nil, err
	}
	return report.BuildRead(ctx, reportRun(run), report.Read{History: historyOf(o, id), NodeRun: nodeRunOf(o)})
}

// nodeRunOf opens a node's own run for the report: one read for its
// latest values, its series each read once.
func nodeRunOf(o tracker.RunOwner) report.NodeRun {
	return func(ctx context.Context, id string) (map[string]float64, report.History, error) {
		run, err := o.GetRun(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		return run.Latest, historyOf(o, id), nil
	}
}

// reportRun is what the report reads of a run: its end time only once it
// ended.
func reportRun(run tracker.StoredRun) report.Run {
	r := report.Run{ID: run.ID, Status: run.Status, Tags: run.Tags, Latest: run.Latest, Step: run.Step}
	if r.Latest == nil {
		r.Latest = map[string]float64{}
	}
	if !run.End.IsZero() && run.Status != statusRunning {
		r.EndTime = run.End
	}
	return r
}

// statusRunning is a run's status while it runs (MLflow's name).
const statusRunning = "RUNNING"

// historyOf reads one of run's series for the report.
func historyOf(o tracker.RunOwner, run string) report.History {
	return func(ctx context.Context, key string) ([]report.Point, error) {
		pts, err := o.History(ctx, run, key)
		if err != nil {
			return nil, err
		}
		out := make([]report.Point, len(pts))
		for i, p := range pts {
			out[i] = report.Point{Time: p.Time, Value: p.Value}
		}
		return out, nil
	}
}

// writeReport writes the job's report on run id: bridge-report.md and
// bridge-report.json as artifacts where the server takes them, else its
// summary in a tag.
func writeReport(ctx context.Context, o tracker.RunOwner, id string, node Node, log *slog.Logger) error {
	began := node.now()
	now := began.UTC().Format(time.RFC3339)
	// The claim comes before the read: a node whose end lands after this
	// read finds the claim at its own end and writes the report again.
	if err := o.SetTags(ctx, id, map[string]string{report.TagReport: reportClaim(ctx, node.Who, began)}); err != nil {
		return err
	}
	run, err := o.GetRun(ctx, id)
	if err != nil {
		return err
	}
	// From the run alone: no node's series is read at a node's end.
	rep, err := report.Build(ctx, reportRun(run), nil)
	if err != nil {
		return err
	}
	var md bytes.Buffer
	if err := rep.Markdown(&md); err != nil {
		return err
	}
	tags := map[string]string{}
	uctx, cancel := uploadBudget(ctx)
	err = putReport(uctx, o, run, md.Bytes(), rep.JSON())
	cancel()
	if err != nil {
		log.Info("the job's report goes in a tag: the run's artifacts cannot be written through this tracker's server", "run_id", id, "why", err)
		tags[report.TagReport] = fmt.Sprintf("tag %s, written by %s at %s", report.TagReportSummary, node.Who, now)
		tags[report.TagReportSummary] = rep.Summary()
	} else {
		tags[report.TagReport] = fmt.Sprintf("artifacts %s and %s, written by %s at %s", ReportMarkdown, ReportJSON, node.Who, now)
		log.Info("wrote the job's report", "run_id", id, "artifacts", ReportMarkdown+", "+ReportJSON, "node", node.Who)
	}
	return o.SetTags(ctx, id, tags)
}

// putReport writes the report's two files into run's artifacts, the
// Markdown first; the first that fails ends it.
func putReport(ctx context.Context, o tracker.RunOwner, run tracker.StoredRun, md, js []byte) error {
	if err := o.PutArtifact(ctx, run, ReportMarkdown, "text/markdown; charset=utf-8", md); err != nil {
		return err
	}
	return o.PutArtifact(ctx, run, ReportJSON, "application/json", js)
}

// reportClaim is report.TagReport while who writes the report, begun at
// began, within ctx's deadline (the end's budget). A claim still there
// after that deadline is one whose writer stopped first (its bridge killed
// or its budget spent): it says so, and what settles it.
func reportClaim(ctx context.Context, who string, began time.Time) string {
	until, ok := ctx.Deadline()
	if !ok {
		until = began.Add(tracker.Writes.MaxElapsed)
	}
	return fmt.Sprintf("being written by %s since %s, until %s at the latest; still this later, its bridge stopped first: "+
		"the next node to end writes it again, and `bridge report RUN` makes it from the run",
		who, began.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
}

// uploadBudget bounds the report's upload to a quarter of what is left of
// ctx's budget, at most 10 s: an artifact store that keeps refusing it (a
// 500, a reset, retried like every write at the end) leaves the summary
// tag, its fallback, the time for its own retries.
func uploadBudget(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithTimeout(ctx, 10*time.Second)
	}
	return context.WithTimeout(ctx, min(time.Until(dl)/4, 10*time.Second))
}
