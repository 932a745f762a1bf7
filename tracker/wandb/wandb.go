// Package wandb is bridge's W&B sink: it writes bridge's samples into the
// run the training process creates, as a second, non-primary file_stream
// writer in W&B's "shared mode"; in a multi-node job, into a run of the
// node's own that bridge creates, in the job's group (noderun.go).
//
// The sink never creates the child's run and never sends it config,
// complete or exitcode: the child's wandb.init() owns the run, so resume
// and the run's final state behave as without bridge. Start hands the child a
// WANDB_RUN_ID; Send waits (ErrNotReady) until that run exists, then posts
// one wandb-events.jsonl line per sample, keys "system.<name>/l:<label>",
// under its own client id (X-WANDB-ASYNC-CLIENT-ID) so the server keeps its
// line numbers apart from the child's.
//
// Wire details follow wandb-core: core/internal/stream/stream_init.go
// (shared-mode headers), core/internal/filestream (request shape, events
// lines; filestreamrequest.go and updateexit.go: the last request's
// "complete" and "exitcode"), core/api/graphql/query_run_resume_status.graphql
// and core/internal/runbranch/resume.go (when a run counts as started),
// core/api/graphql/mutation_run.graphql and core/internal/runupserter
// (UpsertBucket: a run's groupName, jobType, displayName).
package wandb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-resty/resty/v2"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/redact"
	"github.com/bridge-dev/bridge/tracker"
)

// maxRequestBytes keeps one file_stream request well under the ~10 MiB that
// wandb-core caps its own requests at.
const maxRequestBytes = 4 << 20

const userAgent = "bridge"

// Sink implements tracker.Sink for W&B.
//
// Contract: as tracker.Sink, its methods are called from one goroutine;
// they are also safe to call concurrently (one mutex). Every call honours
// ctx; Start and Send make one HTTP attempt per request (their callers
// retry), Finish retries each by the write policy (tracker.Request).
type Sink struct {
	tracker.Reach // whether W&B ever answered

	cfg      Config
	url      string // cfg.BaseURL redacted (redact.URI), for messages
	log      *slog.Logger
	client   *resty.Client
	clientID string // this writer's id, 32 lowercase alphanumerics as wandb's
	maxBytes int    // request size cap; a field so tests can make it small

	mu      sync.Mutex
	label   string
	start   time.Time // _runtime is counted from here
	entity  string    // resolved when the run is found
	project string
	ready   bool
	next    int   // offset of the next events line: lines acknowledged so far
	lastSeq int64 // Seq of the last sample acknowledged; -1 before any
	stopped bool  // the server said the run was stopped (logged once)
	skipped int   // non-finite values dropped (JSON cannot carry them)
}

// New returns a sink for cfg. It returns an error naming the variable when
// cfg.Mode is offline or disabled (buildSinks checks the mode first) or no
// key was found.
func New(cfg Config, log *slog.Logger) (*Sink, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("tracker", "wandb")
	if cfg.Mode == "" {
		cfg.Mode = ModeOnline
	}
	if cfg.Mode != ModeOnline {
		return nil, fmt.Errorf("W&B sink off: WANDB_MODE=%s", cfg.Mode)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("W&B base URL %q is not an http(s) URL", redact.URI(cfg.BaseURL))
	}
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("no W&B API key for %s: set WANDB_API_KEY or add \"machine %s password <key>\" to ~/.netrc", redact.URI(cfg.BaseURL), u.Host)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	id, err := randomID(32)
	if err != nil {
		return nil, err
	}
	return &Sink{
		cfg:      cfg,
		url:      redact.URI(cfg.BaseURL),
		log:      log,
		client:   newClient(cfg, log),
		clientID: id,
		maxBytes: maxRequestBytes,
		lastSeq:  -1,
	}, nil
}

// Name implements tracker.Sink.
func (s *Sink) Name() string { return "wandb" }

// ClientID is the writer id bridge's file_stream requests carry.
func (s *Sink) ClientID() string { return s.clientID }

// Run implements tracker.Sink: the run bridge writes to (its id generated
// by Start when unset). The child creates it: bridge never owns it, and
// its variables alone find it.
func (s *Sink) Run() tracker.RunInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return tracker.RunInfo{ID: s.cfg.RunID}
}

// Label is the writer label in bridge's keys (set by Start).
func (s *Sink) Label() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.label
}

// Start implements tracker.Sink. It picks the run id (WANDB_RUN_ID, else a
// new one as wandb generates them) and returns WANDB_RUN_ID for the child;
// it creates nothing. It checks the API key with one Viewer query, so that a
// bad key is reported before the child starts: that error wraps
// tracker.ErrPermanent; an unreachable server gives a retryable error. The
// env is returned in every case.
func (s *Sink) Start(ctx context.Context, info tracker.StartInfo) ([]string, error) {
	ctx = tracker.OneAttempt(ctx) // the caller retries Start
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.RunID == "" {
		id, err := randomID(8)
		if err != nil {
			return nil, err
		}
		s.cfg.RunID = id
	}
	s.label = sanitizeLabel(firstNonEmpty(s.cfg.Label, info.NodeID, hostname()))
	s.start = time.Now()
	env := []string{"WANDB_RUN_ID=" + s.cfg.RunID}
	if s.cfg.Shared {
		if s.cfg.NodeRun == "" {
			s.cfg.NodeRun = NodeRunID(s.cfg.RunID, s.label)
		}
		env = append(env, SharedEnv(s.label, s.cfg.RunID, s.cfg.Primary, s.cfg.PrimaryKnown)...)
		s.log.Info("W&B: the training process creates the job's run; bridge writes this node's system metrics to a run of its own in the job's group",
			"run_id", s.cfg.RunID, "node_run_id", s.cfg.NodeRun, "label", s.label, "base_url", s.url, "key_from", s.cfg.KeySource)
	} else {
		s.log.Info("W&B: the training process creates the run; bridge writes its system metrics as a second writer",
			"run_id", s.cfg.RunID, "label", s.label, "base_url", s.url, "key_from", s.cfg.KeySource)
	}

	var resp struct {
		Viewer *struct {
			Entity   string `json:"entity"`
			Username string `json:"username"`
		} `json:"viewer"`
	}
	if err := s.graphql(ctx, "Viewer", viewerQuery, nil, &resp); err != nil {
		return env, fmt.Errorf("checking the W&B API key at %s: %w", s.url, err)
	}
	if resp.Viewer == nil {
		return env, tracker.Permanent(fmt.Errorf("W&B at %s does not recognise the API key (from %s): no viewer", s.url, s.cfg.KeySource))
	}
	return env, nil
}

// Send implements tracker.Sink. Until the run exists (created by the child's
// wandb.init) it returns an error wrapping tracker.ErrNotReady; a job's
// node's run it creates itself (createNodeRun). Then it posts
// the samples as events lines at this writer's next offsets; a repeat after
// an error reuses the same offsets, and samples already acknowledged (Seq
// at or below the last one) are skipped, so a resend never duplicates or
// moves a line.
func (s *Sink) Send(ctx context.Context, samples []metrics.Sample) (int, error) {
	ctx = tracker.OneAttempt(ctx) // the Forwarder retries Send
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.start.IsZero() {
		return 0, errors.New("W&B sink: Send before Start")
	}
	if !s.ready {
		check := s.checkRun
		if s.cfg.Shared {
			check = s.createNodeRun
		}
		if err := check(ctx); err != nil {
			return 0, err
		}
	}
	acked := 0
	// Samples acknowledged before (a resend after a lost ack) count as sent.
	for acked < len(samples) && samples[acked].Seq <= s.lastSeq {
		acked++
	}
	for acked < len(samples) {
		lines, n, err := s.lines(samples[acked:])
		if err != nil {
			return acked, err
		}
		if len(lines) > 0 {
			if err := s.postEvents(ctx, s.next, lines); err != nil {
				return acked, err
			}
			s.next += len(lines)
		}
		s.lastSeq = samples[acked+n-1].Seq
		acked += n
	}
	return acked, nil
}

// Finish implements tracker.Sink. On the run the training process
// created it never sends complete or exitcode (the child's wandb finishes
// the run with its own exit code, and a non-primary writer must not); it
// makes the exit verdict visible on the run: W&B tags "bridge-exit-<code>"
// and "bridge-<exit_reason>" added to the run's own, and a section
// appended to the run's notes listing end.Tags (exit code, reason,
// evidence), through UpsertBucket with only name, project, entity, tags
// and notes, so the child's config is not touched; then the job's figures
// (end.Figures) go into the run's summary, the child's keys kept
// (recordFigures). A repeated Finish replaces bridge's section instead of
// adding another.
//
// A job's node records that on its own run, which it then marks complete
// with the child's exit code (finishNodeRun), and its end among the job's
// records in the job's run's summary (recordNodeEnd), where package
// jobrun reads every node's in one request.
//
// Each request is retried by the write policy (tracker.Request) within
// ctx. Repeating one is safe: UpsertBucket sets the whole of the tags and
// notes (or the summary) computed from the run as read, so a second one
// after a lost answer writes the same values again.
func (s *Sink) Finish(ctx context.Context, end tracker.EndInfo) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.skipped > 0 {
		s.log.Warn("W&B: values that were NaN or infinite were not sent (JSON cannot carry them)", "count", s.skipped)
	}
	if len(end.Tags) == 0 || s.start.IsZero() {
		return nil
	}
	if s.cfg.Shared {
		if err := s.finishNodeRun(ctx, end); err != nil {
			return err
		}
	}
	b, err := s.lookupRun(ctx, s.cfg.RunID)
	if err != nil {
		return fmt.Errorf("recording the exit verdict on W&B run %s: %w", s.runPath(), err)
	}
	if b == nil {
		s.log.Info("W&B run was never created by the training process; the exit verdict is in the spool and on stderr only", "run", s.runPath())
		return nil
	}
	if s.cfg.Shared {
		if err := s.recordNodeEnd(ctx, end, s.label); err != nil {
			return fmt.Errorf("recording this node's end in W&B run %s's summary: %w", s.runPath(), err)
		}
		return nil
	}
	if err := s.recordVerdict(ctx, s.cfg.RunID, b, end); err != nil {
		return err
	}
	if err := s.recordFigures(ctx, s.cfg.RunID, end); err != nil {
		return fmt.Errorf("recording the job's figures in W&B run %s's summary: %w", s.runPath(), err)
	}
	return nil
}

// recordVerdict adds the exit verdict to run b's tags and notes.
func (s *Sink) recordVerdict(ctx context.Context, run string, b *bucket, end tracker.EndInfo) error {
	tags := mergeTags(b.Tags, verdictTags(end), tagPrefix)
	notes := withVerdict(derefOr(b.Notes, ""), end)
	v := map[string]any{"name": run, "project": s.project, "entity": s.entity, "tags": tags, "notes": notes}
	var out struct {
		UpsertBucket *struct {
			Bucket *struct {
				Name string `json:"name"`
			} `json:"bucket"`
		} `json:"upsertBucket"`
	}
	path := s.entity + "/" + s.project + "/" + run
	if err := s.graphql(ctx, "UpsertBucket", upsertBucketMutation, v, &out); err != nil {
		return fmt.Errorf("recording the exit verdict on W&B run %s: %w", path, err)
	}
	s.log.Info("W&B: exit verdict recorded in the run's tags and notes", "run", path, "tags", verdictTags(end))
	return nil
}

// verdictHeader starts bridge's part of the run's notes.
const verdictHeader = "\n\n---\nbridge (end of job):\n"

// withVerdict appends (or replaces) bridge's section of the notes: one
// "key: value" line per end tag, the exit code and reason first (what a
// reader looks for), the rest sorted.
func withVerdict(notes string, end tracker.EndInfo) string {
	h := verdictHeader
	if i := strings.Index(notes, h); i >= 0 {
		notes = notes[:i]
	}
	first := []string{"bridge.exit_code", "bridge.exit_reason"}
	keys := slices.SortedFunc(maps.Keys(end.Tags), func(a, b string) int {
		ia, ib := slices.Index(first, a), slices.Index(first, b)
		switch {
		case ia >= 0 && ib >= 0:
			return ia - ib
		case ia >= 0:
			return -1
		case ib >= 0:
			return 1
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	b.WriteString(notes)
	b.WriteString(h)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, end.Tags[k])
	}
	return b.String()
}

// tagPrefix starts bridge's verdict tags.
const tagPrefix = "bridge-"

// verdictTags are the W&B tags of the verdict: letters, digits, '-' and
// '_', at most 64 characters (W&B's tag limit).
func verdictTags(end tracker.EndInfo) []string {
	tags := []string{tagPrefix + "exit-" + strconv.Itoa(end.ExitCode)}
	if r := end.Tags["bridge.exit_reason"]; r != "" {
		tags = append(tags, tagPrefix+r)
	}
	for i, t := range tags {
		t = sanitizeLabel(t)
		if len(t) > 64 {
			t = t[:64]
		}
		tags[i] = t
	}
	return tags
}

// mergeTags keeps the run's tags, drops the earlier verdict tags that start
// with prefix and adds the new ones.
func mergeTags(have, add []string, prefix string) []string {
	out := []string{}
	for _, t := range have {
		if !strings.HasPrefix(t, prefix) {
			out = append(out, t)
		}
	}
	return append(out, add...)
}

func derefOr(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}

// lines encodes samples from the start of ss into events lines, up to
// s.maxBytes; it returns the lines and how many samples they cover
// (samples without a finite point produce no line).
func (s *Sink) lines(ss []metrics.Sample) ([]string, int, error) {
	var (
		out   []string
		size  int
		taken int
	)
	for _, smp := range ss {
		row := make(map[string]any, len(smp.Points)+3)
		for _, p := range smp.Points {
			v, ok := metrics.Finite(p.Value)
			if !ok {
				s.skipped++
				continue
			}
			row[s.key(p.Name())] = v
		}
		if len(row) == 0 {
			taken++
			continue
		}
		row["_wandb"] = true
		// Times are finite by construction; Finite only says so to the
		// encoder's type.
		row["_timestamp"], _ = metrics.Finite(float64(smp.Time.UnixNano()) / 1e9)
		row["_runtime"], _ = metrics.Finite(smp.Time.Sub(s.start).Seconds())
		b, err := json.Marshal(row)
		if err != nil {
			return nil, 0, tracker.Permanent(fmt.Errorf("encoding sample %d as a W&B events line: %w", smp.Seq, err))
		}
		if len(out) > 0 && size+len(b) > s.maxBytes {
			break
		}
		out = append(out, string(b))
		size += len(b)
		taken++
	}
	return out, taken, nil
}

// Key is the W&B key of a bridge metric in a run it shares with the
// training process: "system.<name>/l:<label>", the form wandb itself gives
// a labelled writer's system metrics.
func Key(name, label string) string { return "system." + name + "/l:" + label }

// NodeKey is the W&B key of a bridge metric in a job's node's run, which
// bridge alone writes: "system.<name>", the same on every node's run, so
// that W&B draws a job's group as one line a metric.
func NodeKey(name string) string { return "system." + name }

func (s *Sink) key(name string) string {
	if s.cfg.Shared {
		return NodeKey(name)
	}
	return Key(name, s.label)
}

// bucket is what bridge reads of a run.
type bucket struct {
	Name        string   `json:"name"`
	WandbConfig *string  `json:"wandbConfig"`
	Tags        []string `json:"tags"`
	Notes       *string  `json:"notes"`
}

// lookupRun reads run (nil when it does not exist yet) and resolves the
// entity and project it lives in, for the file_stream path.
func (s *Sink) lookupRun(ctx context.Context, run string) (*bucket, error) {
	v := map[string]any{"name": run, "project": nilIfEmpty(s.cfg.Project), "entity": nilIfEmpty(s.cfg.Entity)}
	var resp struct {
		Model *struct {
			Name   string `json:"name"`
			Entity struct {
				Name string `json:"name"`
			} `json:"entity"`
			Bucket *bucket `json:"bucket"`
		} `json:"model"`
	}
	if err := s.graphql(ctx, "RunResumeStatus", runResumeStatusQuery, v, &resp); err != nil {
		return nil, fmt.Errorf("looking up W&B run %s: %w", s.runPath(), err)
	}
	if resp.Model == nil || resp.Model.Bucket == nil {
		return nil, nil
	}
	s.entity, s.project = resp.Model.Entity.Name, resp.Model.Name
	return resp.Model.Bucket, nil
}

// checkRun asks whether the run exists and has started, by wandb's own rule
// (a bucket whose config holds _wandb.t).
func (s *Sink) checkRun(ctx context.Context) error {
	b, err := s.lookupRun(ctx, s.cfg.RunID)
	if err != nil {
		return err
	}
	if b == nil || !hasT(b.WandbConfig) {
		return fmt.Errorf("%w: W&B run %s does not exist yet (the training process creates it with wandb.init; WANDB_PROJECT and WANDB_ENTITY must match its project and entity)",
			tracker.ErrNotReady, s.runPath())
	}
	s.ready = true
	s.log.Info("W&B run found; sending system metrics", "run", s.entity+"/"+s.project+"/"+s.cfg.RunID)
	return nil
}

func hasT(wandbConfig *string) bool {
	if wandbConfig == nil {
		return false
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(*wandbConfig), &m); err != nil {
		return false
	}
	_, ok := m["t"]
	return ok
}

func (s *Sink) runPath() string {
	return firstNonEmpty(s.cfg.Entity, "<default entity>") + "/" + firstNonEmpty(s.cfg.Project, "<default project>") + "/" + s.cfg.RunID
}

// postEvents makes one file_stream request with lines at offset, to the
// run bridge's series go to.
func (s *Sink) postEvents(ctx context.Context, offset int, lines []string) error {
	fb, err := s.fileStream(ctx, s.seriesRun(), map[string]any{
		"files": map[string]any{
			"wandb-events.jsonl": map[string]any{"offset": offset, "content": lines},
		},
	})
	if err != nil {
		return err
	}
	if fb.Stopped && !s.stopped {
		s.stopped = true
		s.log.Info("W&B says the run was stopped from the UI; the training process's wandb handles that, bridge keeps sending")
	}
	return nil
}

// fileStream makes one file_stream request with body to run, as this
// writer (X-WANDB-ASYNC-CLIENT-ID: lines of a restarted bridge, a new
// writer, never overwrite an earlier one's).
func (s *Sink) fileStream(ctx context.Context, run string, body map[string]any) (fileStreamAnswer, error) {
	js, err := json.Marshal(body)
	if err != nil {
		return fileStreamAnswer{}, tracker.Permanent(fmt.Errorf("encoding a W&B file_stream request: %w", err))
	}
	path := "/files/" + url.PathEscape(s.entity) + "/" + url.PathEscape(s.project) + "/" +
		url.PathEscape(run) + "/file_stream"
	raw, err := s.exchange(ctx, "file_stream "+s.url+path, path, "X-WANDB-ASYNC-CLIENT-ID", js)
	if err != nil {
		return fileStreamAnswer{}, err
	}
	fb, _ := decodeFileStream(raw) // exchange checked it is a JSON object; only "stopped" is read
	return fb, nil
}

// newClient builds the resty client: one attempt per request (retries belong
// to the forwarder and to tracker.Request), W&B's Basic auth `api:<key>` and the shared-mode header
// wandb-core sets for every writer of a shared run.
func newClient(cfg Config, log *slog.Logger) *resty.Client {
	return resty.New().
		SetBaseURL(cfg.BaseURL).
		SetTimeout(cfg.Timeout).
		SetRetryCount(0).
		SetLogger(tracker.DebugLogger{Log: log}).
		SetBasicAuth("api", cfg.APIKey).
		// resty warns about Basic over plain http on every request (a local
		// server); the user chose the server.
		SetDisableWarn(true).
		SetResponseBodyLimit(tracker.MaxResponseBytes).
		SetHeader("Content-Type", "application/json").
		SetHeader("User-Agent", userAgent).
		SetHeader("X-WANDB-USE-ASYNC-FILESTREAM", "true")
}

const viewerQuery = `query Viewer {
	viewer {
		id
		entity
		username
	}
}`

const runResumeStatusQuery = `query RunResumeStatus($project: String, $entity: String, $name: String!) {
	model(name: $project, entityName: $entity) {
		id
		name
		entity {
			id
			name
		}
		bucket(name: $name, missingOk: true) {
			id
			name
			wandbConfig(keys: ["t"])
			tags
			notes
		}
	}
}`

// upsertBucketMutation updates only the fields it is given: bridge sends
// the run's name, project, entity, tags and notes.
const upsertBucketMutation = `mutation UpsertBucket($name: String, $project: String, $entity: String, $notes: String, $tags: [String!]) {
	upsertBucket(input: {name: $name, modelName: $project, entityName: $entity, notes: $notes, tags: $tags}) {
		bucket {
			id
			name
		}
		inserted
	}
}`

// graphql makes one GraphQL request and decodes its data into out.
func (s *Sink) graphql(ctx context.Context, op, query string, vars map[string]any, out any) error {
	body, err := json.Marshal(map[string]any{"query": query, "operationName": op, "variables": vars})
	if err != nil {
		return tracker.Permanent(fmt.Errorf("encoding GraphQL %s: %w", op, err))
	}
	what := "GraphQL " + op + " at " + s.url + "/graphql"
	raw, err := s.exchange(ctx, what, "/graphql", "X-WANDB-CLIENT-ID", body)
	if err != nil {
		return err
	}
	return decodeGraphQL(raw, out, what)
}

// exchange is the one way a request reaches W&B: one POST of body to path
// with this writer's id in idHeader, through tracker.Request, which tries
// it once under a caller that retries (the forwarder's Send, the start)
// and retries it by the write policy otherwise (Finish). It returns the
// answer's body once it is a 2xx holding one JSON object (a 200 HTML page
// from a login proxy is not a delivery); what names the request in errors.
// What it does not retry: a GraphQL error inside a 200 (decodeGraphQL),
// which is the server's verdict on the request, not an outage.
func (s *Sink) exchange(ctx context.Context, what, path, idHeader string, body []byte) ([]byte, error) {
	var raw []byte
	err := tracker.Request(ctx, func(ctx context.Context) error {
		resp, err := s.client.R().SetContext(ctx).
			SetHeader(idHeader, s.clientID).
			SetBody(body).
			Post(path)
		if resp != nil && resp.RawResponse != nil {
			s.Answered()
		}
		if err != nil {
			return transportError("W&B "+what, err)
		}
		b := resp.Body()
		if err := statusError(resp, b, what); err != nil {
			return err
		}
		if err := tracker.CheckJSONObject(b, "W&B "+what); err != nil {
			return err
		}
		raw = b
		return nil
	})
	return raw, err
}

// decodeGraphQL reads a GraphQL answer's data into out; its errors become
// Go errors (PERMISSION_ERROR permanent). A fuzz target calls it with any
// bytes.
func decodeGraphQL(raw []byte, out any, what string) error {
	var env struct {
		Data   json.RawMessage `json:"data"`
		Errors []gqlError      `json:"errors"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s: response is not JSON: %w", what, err)
	}
	if len(env.Errors) > 0 {
		err := fmt.Errorf("%s: %s", what, tracker.Shorten(env.Errors[0].Message))
		if env.Errors[0].Extensions.Code == "PERMISSION_ERROR" {
			return tracker.Permanent(err)
		}
		return err
	}
	if len(env.Data) == 0 || string(env.Data) == "null" {
		return fmt.Errorf("%s: %w: no data and no errors", what, tracker.ErrNotJSON)
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return fmt.Errorf("%s: unexpected data: %w", what, err)
	}
	return nil
}

// fileStreamAnswer is the part of a file_stream answer bridge reads.
type fileStreamAnswer struct {
	Stopped bool `json:"stopped"`
}

func decodeFileStream(raw []byte) (fileStreamAnswer, error) {
	var fb fileStreamAnswer
	err := json.Unmarshal(raw, &fb)
	return fb, err
}

type gqlError struct {
	Message    string `json:"message"`
	Extensions struct {
		Code string `json:"code"`
	} `json:"extensions"`
}

// statusError classifies a non-2xx response by tracker.Classify, the policy
// every sink shares, with a hint for the statuses a user can fix.
func statusError(resp *resty.Response, body []byte, what string) error {
	code := resp.StatusCode()
	if code >= 200 && code < 300 {
		return nil
	}
	err := fmt.Errorf("%s: %s: %s", what, resp.Status(), tracker.Shorten(string(body)))
	switch code {
	case http.StatusUnauthorized:
		err = fmt.Errorf("the W&B API key was rejected (check WANDB_API_KEY or ~/.netrc): %w", err)
	case http.StatusForbidden:
		err = fmt.Errorf("the W&B API key may not write to this run (check WANDB_ENTITY and WANDB_PROJECT): %w", err)
	case http.StatusNotFound:
		err = fmt.Errorf("not found on W&B (check WANDB_BASE_URL, or the run was deleted): %w", err)
	}
	return tracker.Classify(code, resp.Header().Get("Retry-After"), time.Now(), err)
}

// transportError words an HTTP client error (no answer came) for what: an
// outage, or, for a certificate that fails verification, configuration
// (Permanent). The client's error quotes the request URL: redacted.
func transportError(what string, err error) error {
	err = redact.URLError(err)
	if tracker.TLSUntrusted(err) {
		// Go reads the system's CA certificates, or SSL_CERT_FILE and
		// SSL_CERT_DIR (crypto/x509); wandb's Python client reads
		// REQUESTS_CA_BUNDLE, which bridge does not.
		return tracker.Permanent(fmt.Errorf("%s: the W&B server's TLS certificate is not trusted, a configuration error (not retried): bridge verifies it with the system's CA certificates; set SSL_CERT_FILE (or SSL_CERT_DIR) to a bundle that holds the CA that signed it: %w", what, err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// randomID returns n lowercase alphanumerics, the alphabet wandb uses for
// run ids (8) and shared-mode client ids (32).
func randomID(n int) (string, error) {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a random W&B id: %w", err)
	}
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return string(b), nil
}

// sanitizeLabel keeps a label to letters, digits and "_.-", so that it stays
// one segment of the key.
func sanitizeLabel(l string) string {
	b := []byte(l)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "bridge"
	}
	return string(b)
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// SharedEnv are the variables that put the child's wandb in shared mode,
// one labelled writer of the job's run, in the job's group: wandb reads
// WANDB_MODE and WANDB_RUN_GROUP (its setting run_group), and a
// WANDB__NAME variable as its private setting x_name
// (wandb/sdk/wandb_settings.py, Settings.update_from_env_vars, wandb
// 0.31): x_label names its series, x_primary says who uploads config and
// files, x_update_finish_state whether it may mark the run finished.
func SharedEnv(label, group string, primary, known bool) []string {
	env := []string{"WANDB_MODE=shared", "WANDB__LABEL=" + label, "WANDB_RUN_GROUP=" + group}
	if known {
		env = append(env, "WANDB__PRIMARY="+strconv.FormatBool(primary))
		if !primary {
			env = append(env, "WANDB__UPDATE_FINISH_STATE=false")
		}
	}
	return env
}

// RunIDFor is the W&B run id of a job, the same on every node: its key
// with every character other than letters, digits, '_', '-' and '.' made
// '-' (runIDByte; wandb's validate_run_id refuses : ; , # ? / '), cut to 48, for
// reading, then 10 hex digits of the SHA-256 of the key and its generation
// ("" when the launcher gives none). The key is already distinct for
// distinct launcher values (package jobkey hashes what it cleans), so two
// jobs, or two generations of one job id, never share a W&B run.
func RunIDFor(key, generation string) string {
	id := []byte(key)
	for i, c := range id {
		// Byte by byte: each byte of a multi-byte rune is refused, so the
		// id keeps the length it always had.
		if !runIDByte(c) {
			id[i] = '-'
		}
	}
	if len(id) > 48 {
		id = id[:48]
	}
	material := key
	if generation != "" {
		// A key holds no NUL: (key, generation) pairs hash distinct inputs.
		material += "\x00" + generation
	}
	sum := sha256.Sum256([]byte(material))
	return string(id) + "-" + hex.EncodeToString(sum[:5])
}

// runIDByte reports whether c may stand in a run id bridge makes as it
// is: letters, digits, '_', '-' and '.' (ASCII), the characters of a key
// segment.
func runIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}
