package mlflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-resty/resty/v2"

	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
)

// The job's report as run artifacts (docs/multinode.md).
const (
	ReportMarkdown = "bridge-report.md"
	ReportJSON     = "bridge-report.json"
)

// artifactsAPI is the server's artifact proxy (`mlflow server
// --serve-artifacts`, MLflow 3's default): a PUT uploads a file.
const artifactsAPI = "/api/2.0/mlflow-artifacts/artifacts/"

// The series reads page metrics/get-history with max_results and
// next_page_token. The bulk endpoints (metrics/get-history-bulk,
// get-history-bulk-interval) batch one key across runs, while a job's
// nodes are different keys of one run; the interval one also samples the
// points down, losing the peaks.
//
// A page holds what one answer may (tracker.MaxResponseBytes, with room
// for its frame): about 6,000 points of a series named as bridge names
// them, at most historyPage. A series is read to historyMaxPoints at
// most, in as many full pages and one more: a server that pages on for
// ever (a token that never ends, pages that hold little) costs that, not
// time and memory without bound; past it the series is not used.
const (
	historyPage      = 25000
	historyMaxPoints = 1_000_000
	// historyPointJSON is a point's answer but for its key:
	// {"key":"","value":-1.2345678901234567e+308,"timestamp":1767225600000,"step":9223372036854775807},
	historyPointJSON = 100
)

// errHistoryTooLong: a series has more points than bridge report reads.
var errHistoryTooLong = errors.New("more points than bridge report reads")

// historyPageOf is the page size for a series named key: as many points
// as fit in four fifths of an answer, at most historyPage.
func historyPageOf(key string) int {
	return max(1, min(historyPage, tracker.MaxResponseBytes*4/5/(len(key)+historyPointJSON)))
}

// Report reads run id and makes its report (`bridge report`): the run's
// tags and latest values in one runs/get, and the series of the nodes that
// recorded no figures of their own, each once. When ctx ends while the
// series are read, the report so far comes with the error (report.Build).
func (s *Sink) Report(ctx context.Context, id string) (*report.Report, error) {
	if err := tracker.ValidID("run id", id); err != nil {
		return nil, err
	}
	run, err := s.getRun(ctx, id)
	if err != nil {
		return nil, serverSays(err)
	}
	rep, err := report.Build(ctx, reportRun(run), s.historyOf(id))
	return rep, serverSays(err)
}

// serverSays is err, or the server's answer in it: the forwarder's
// classification (permanent or not) means nothing to a reader.
func serverSays(err error) error {
	if ae := (*APIError)(nil); errors.As(err, &ae) {
		return ae
	}
	return err
}

// reportRun is what the report reads of an MLflow run.
func reportRun(run Run) report.Run {
	r := report.Run{ID: run.Info.RunID, Status: run.Info.Status, Tags: run.Data.TagMap(), Latest: map[string]float64{}}
	if run.Info.EndTime > 0 && run.Info.Status != StatusRunning {
		r.EndTime = time.UnixMilli(int64(run.Info.EndTime))
	}
	for _, m := range run.Data.Metrics {
		r.Latest[m.Key] = float64(m.Value)
	}
	return r
}

// historyOf reads every point of one of run's series, oldest first, to
// historyMaxPoints.
func (s *Sink) historyOf(run string) report.History {
	return func(ctx context.Context, key string) ([]report.Point, error) {
		var ms []Metric
		token, page := "", historyPageOf(key)
		for pages := 1; ; pages++ {
			if pages > historyMaxPoints/page+1 {
				return nil, fmt.Errorf("%w (the server gave a next page after %d pages of at most %d points); its figures are left out",
					errHistoryTooLong, pages-1, page)
			}
			q := map[string]string{"run_id": run, "metric_key": key, "max_results": strconv.Itoa(page)}
			if token != "" {
				q["page_token"] = token
			}
			var out struct {
				Metrics []Metric `json:"metrics"`
				Next    string   `json:"next_page_token"`
			}
			if err := s.call(ctx, http.MethodGet, "metrics/get-history", q, nil, &out, fmt.Sprintf("reading series %s of run %s", key, run)); err != nil {
				return nil, err
			}
			if len(ms)+len(out.Metrics) > historyMaxPoints {
				return nil, fmt.Errorf("%w (%d); its figures are left out", errHistoryTooLong, historyMaxPoints)
			}
			ms = append(ms, out.Metrics...)
			if out.Next == "" || out.Next == token {
				break
			}
			token = out.Next
		}
		sort.SliceStable(ms, func(i, j int) bool {
			if ms[i].Timestamp != ms[j].Timestamp {
				return ms[i].Timestamp < ms[j].Timestamp
			}
			return ms[i].Step < ms[j].Step
		})
		pts := make([]report.Point, len(ms))
		for i, m := range ms {
			pts[i] = report.Point{Time: time.UnixMilli(int64(m.Timestamp)), Value: float64(m.Value)}
		}
		return pts, nil
	}
}

// recordJob names the job's first failure on its run, and writes the
// job's report: the node that set the job's status writes it, and every
// node that ends after one was written writes it again (so the last node
// to end leaves the report of every node's end).
// run is the job's run as read after this node's records landed.
func (s *Sink) recordJob(ctx context.Context, run Run, wroteStatus bool) error {
	if err := s.recordFirstFailure(ctx, run); err != nil {
		return err
	}
	if !wroteStatus && run.Data.TagMap()[report.TagReport] == "" {
		return nil
	}
	return s.writeReport(ctx)
}

// recordFirstFailure sets report.TagFirstFailure to the earliest failure
// the nodes' records show, unless it already names an earlier (or the
// same) one that agrees with them: a later failure never takes its place,
// and a tag that names no failed node (forged, or garbled) does not stay.
// Nodes failing together may each write theirs: the writer reads again,
// and writes again while the tag names a later failure than the records
// show.
func (s *Sink) recordFirstFailure(ctx context.Context, run Run) error {
	for range 3 {
		rr := reportRun(run)
		f := report.FirstFailureOf(rr)
		if f == nil {
			return nil
		}
		if cur := report.RecordedFailureOf(rr); cur != nil && !f.At().Before(cur.At()) {
			return nil
		}
		if err := s.SetTags(ctx, map[string]string{report.TagFirstFailure: f.Tag()}); err != nil {
			return err
		}
		s.log.Info("named the job's first failure", "run_id", s.runID, "first_failure", f.Node, "reason", f.Reason, "node", s.who)
		var err error
		if run, err = s.getRun(ctx, s.runID); err != nil {
			return err
		}
	}
	return nil
}

// writeReport writes the job's report on its run: bridge-report.md and
// bridge-report.json as artifacts where the server takes them, else its
// summary in a tag.
func (s *Sink) writeReport(ctx context.Context) error {
	began := time.Now()
	now := began.UTC().Format(time.RFC3339)
	// The claim comes before the read: a node whose end lands after this
	// read finds the claim at its own end and writes the report again.
	if err := s.SetTags(ctx, map[string]string{report.TagReport: reportClaim(ctx, s.who, began)}); err != nil {
		return err
	}
	run, err := s.getRun(ctx, s.runID)
	if err != nil {
		return err
	}
	rep, err := report.Build(ctx, reportRun(run), s.historyOf(s.runID))
	if err != nil {
		return err
	}
	var md bytes.Buffer
	if err := rep.Markdown(&md); err != nil {
		return err
	}
	tags := map[string]string{}
	uctx, cancel := uploadBudget(ctx)
	err = s.putArtifacts(uctx, run.Info.ArtifactURI, md.Bytes(), rep.JSON())
	cancel()
	if err != nil {
		s.log.Info("the job's report goes in a tag: the run's artifacts cannot be written through this MLflow server", "run_id", s.runID, "why", err)
		tags[report.TagReport] = fmt.Sprintf("tag %s, written by %s at %s", report.TagReportSummary, s.who, now)
		tags[report.TagReportSummary] = rep.Summary()
	} else {
		tags[report.TagReport] = fmt.Sprintf("artifacts %s and %s, written by %s at %s", ReportMarkdown, ReportJSON, s.who, now)
		s.log.Info("wrote the job's report", "run_id", s.runID, "artifacts", ReportMarkdown+", "+ReportJSON, "node", s.who)
	}
	return s.SetTags(ctx, tags)
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

// errNotProxied: the run's artifact root is one only MLflow's client
// writes (a path on the server, s3:, ...), not the server's proxy.
var errNotProxied = errors.New("the run's artifact root is not served by the MLflow server (start it with --serve-artifacts and an mlflow-artifacts: root, MLflow 3's default)")

// putArtifacts uploads the report to the run's artifact root through the
// server's artifact proxy.
func (s *Sink) putArtifacts(ctx context.Context, artifactURI string, md, js []byte) error {
	base, ok := s.proxiedPath(artifactURI)
	if !ok {
		return fmt.Errorf("%w: artifact_uri %s", errNotProxied, artifactURI)
	}
	for _, f := range []struct {
		name, ctype string
		body        []byte
	}{{ReportMarkdown, "text/markdown; charset=utf-8", md}, {ReportJSON, "application/json", js}} {
		op := fmt.Sprintf("uploading %s to run %s", f.name, s.runID)
		// A PUT of the same file to the same path replaces it: safe to
		// repeat.
		if _, err := s.exchange(ctx, op, http.MethodPut, artifactsAPI+base+"/"+url.PathEscape(f.name), false, func(req *resty.Request) {
			req.SetHeader("Content-Type", f.ctype).SetBody(f.body)
		}); err != nil {
			return err
		}
	}
	return nil
}

// proxiedPath is the path, under the server's artifact proxy, of a run's
// artifact root: mlflow-artifacts:/<path> (on this server), or this
// server's own artifacts URL.
func (s *Sink) proxiedPath(artifactURI string) (string, bool) {
	u, err := url.Parse(artifactURI)
	if err != nil {
		return "", false
	}
	var p string
	switch u.Scheme {
	case "mlflow-artifacts":
		if t, err := url.Parse(s.cfg.TrackingURI); u.Host != "" && (err != nil || u.Host != t.Host) {
			return "", false // another server's
		}
		p = u.Path
	case "http", "https":
		rest, ok := strings.CutPrefix(artifactURI, s.cfg.TrackingURI+artifactsAPI)
		if !ok {
			return "", false
		}
		p = rest
	default:
		return "", false
	}
	var segs []string
	for _, seg := range strings.Split(strings.Trim(p, "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", false
		}
		segs = append(segs, url.PathEscape(seg))
	}
	return strings.Join(segs, "/"), len(segs) > 0
}
