package mlflow

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-resty/resty/v2"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

// The sink's runs as a run store (tracker.RunOwner): what package jobrun
// reads and writes of a job's run at its end, and what `bridge report`
// reads.

// GetRun implements tracker.RunStore: one runs/get, the run's status,
// tags, latest value of every series, its artifact root, its note
// (NoteTag) and the largest step of the series outside system/ (the
// training script's; a latest metric holds its key's largest step).
func (s *Sink) GetRun(ctx context.Context, id string) (tracker.StoredRun, error) {
	run, err := s.getRun(ctx, id)
	if err != nil {
		return tracker.StoredRun{}, err
	}
	r := tracker.StoredRun{ID: run.Info.RunID, Status: run.Info.Status, Tags: run.Data.TagMap(),
		Latest: make(map[string]float64, len(run.Data.Metrics)), Artifacts: run.Info.ArtifactURI}
	if run.Info.EndTime > 0 {
		r.End = time.UnixMilli(int64(run.Info.EndTime))
	}
	for _, m := range run.Data.Metrics {
		r.Latest[m.Key] = float64(m.Value)
		if !strings.HasPrefix(m.Key, "system/") && int64(m.Step) > r.Step {
			r.Step = int64(m.Step)
		}
	}
	r.Note = r.Tags[NoteTag]
	return r, nil
}

// LogPoints implements tracker.SeriesWriter: one runs/log-batch of a point
// a series (more only past the batch's limits), in key order. A value that
// is not finite is left out; a key MLflow refuses is an error, nothing
// sent: MLflow refuses the whole batch for one. Repeating it is safe:
// MLflow drops a point identical to a stored one.
func (s *Sink) LogPoints(ctx context.Context, id string, values map[string]float64, at time.Time, step int64) error {
	if id == "" {
		return errNoRun
	}
	b := newBatch(id, s.maxMetrics, s.maxBody)
	post := func() error {
		if b.count == 0 {
			return nil
		}
		err := s.call(ctx, http.MethodPost, "runs/log-batch", nil, b.body(), nil, fmt.Sprintf("recording %d series of run %s", b.count, id))
		b.reset()
		return err
	}
	keys := slices.Sorted(maps.Keys(values))
	for _, key := range keys {
		if !validKey(key) {
			return fmt.Errorf("recording series of run %s: MLflow does not take the key %q", id, key)
		}
	}
	for _, key := range keys {
		v, ok := metrics.Finite(values[key])
		if !ok {
			continue
		}
		m := encodeMetric(key, v.Float64(), at.UnixMilli(), step)
		if !b.fits(m) {
			if err := post(); err != nil {
				return err
			}
		}
		b.add(m)
	}
	return post()
}

// NoteTag is the tag MLflow shows as the run's description on its
// Overview page (mlflow/utils/mlflow_tags.py MLFLOW_RUN_NOTE), in
// Markdown.
const NoteTag = "mlflow.note.content"

// SetNote implements tracker.NoteWriter: the note is the tag NoteTag.
func (s *Sink) SetNote(ctx context.Context, id, note string) error {
	return s.SetTags(ctx, id, map[string]string{NoteTag: note})
}

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

// historyPageOf is the page size for a series named key: as many points
// as fit in four fifths of an answer, at most historyPage.
func historyPageOf(key string) int {
	return max(1, min(historyPage, tracker.MaxResponseBytes*4/5/(len(key)+historyPointJSON)))
}

// History implements tracker.RunOwner: every point of one of run's
// series, oldest first, to historyMaxPoints.
func (s *Sink) History(ctx context.Context, run, key string) ([]tracker.Point, error) {
	var ms []Metric
	token, page := "", historyPageOf(key)
	for pages := 1; ; pages++ {
		if pages > historyMaxPoints/page+1 {
			return nil, fmt.Errorf("%w (the server gave a next page after %d pages of at most %d points); its figures are left out",
				tracker.ErrHistoryTooLong, pages-1, page)
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
			return nil, fmt.Errorf("%w (%d); its figures are left out", tracker.ErrHistoryTooLong, historyMaxPoints)
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
	pts := make([]tracker.Point, len(ms))
	for i, m := range ms {
		pts[i] = tracker.Point{Time: time.UnixMilli(int64(m.Timestamp)), Value: float64(m.Value)}
	}
	return pts, nil
}

// SetStatus implements tracker.RunOwner with runs/update, which sets the
// same status and end time again when repeated. On the job's run this sink
// elected, the node that sets the job's status also deletes the election's
// stray candidates (sweep), as node 0 does at its end.
func (s *Sink) SetStatus(ctx context.Context, run, status string, end time.Time) error {
	if err := s.update(ctx, run, status, end); err != nil {
		return err
	}
	if s.jobRun != "" && run == s.jobRun {
		s.sweep(ctx)
	}
	return nil
}

// update sets run's terminal status and end time.
func (s *Sink) update(ctx context.Context, run, status string, end time.Time) error {
	req := updateRunRequest{RunID: run, Status: status, EndTime: end.UnixMilli()}
	return s.call(ctx, http.MethodPost, "runs/update", nil, req, nil, fmt.Sprintf("setting run %s to %s", run, status))
}

// artifactsAPI is the server's artifact proxy (`mlflow server
// --serve-artifacts`, MLflow 3's default): a PUT uploads a file.
const artifactsAPI = "/api/2.0/mlflow-artifacts/artifacts/"

// errNotProxied: the run's artifact root is one only MLflow's client
// writes (a path on the server, s3:, ...), not the server's proxy.
var errNotProxied = errors.New("the run's artifact root is not served by the MLflow server (start it with --serve-artifacts and an mlflow-artifacts: root, MLflow 3's default)")

// PutArtifact implements tracker.RunOwner: it uploads a file to the run's
// artifact root through the server's artifact proxy. A PUT of the same
// file to the same path replaces it: safe to repeat.
func (s *Sink) PutArtifact(ctx context.Context, run tracker.StoredRun, name, contentType string, body []byte) error {
	base, ok := s.proxiedPath(run.Artifacts)
	if !ok {
		return fmt.Errorf("%w: artifact_uri %s", errNotProxied, run.Artifacts)
	}
	op := fmt.Sprintf("uploading %s to run %s", name, run.ID)
	_, err := s.exchange(ctx, op, http.MethodPut, artifactsAPI+base+"/"+url.PathEscape(name), false, func(req *resty.Request) {
		req.SetHeader("Content-Type", contentType).SetBody(body)
	})
	return err
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

// reader is the store Registration.Store opens (`bridge report`): the
// sink's, its reads' errors the server's answer, without the forwarder's
// classification (permanent or not), which means nothing to a reader.
type reader struct{ *Sink }

func (r reader) GetRun(ctx context.Context, id string) (tracker.StoredRun, error) {
	run, err := r.Sink.GetRun(ctx, id)
	return run, serverSays(err)
}

func (r reader) History(ctx context.Context, id, key string) ([]tracker.Point, error) {
	pts, err := r.Sink.History(ctx, id, key)
	return pts, serverSays(err)
}

// serverSays is err, or the server's answer in it.
func serverSays(err error) error {
	if ae := (*APIError)(nil); errors.As(err, &ae) {
		return ae
	}
	return err
}
