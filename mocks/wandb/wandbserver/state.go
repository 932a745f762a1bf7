package wandbserver

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

// File names used by file_stream.
const (
	HistoryFile = "wandb-history.jsonl"
	EventsFile  = "wandb-events.jsonl"
	SummaryFile = "wandb-summary.json"
	OutputFile  = "output.log"
)

// Primary is the writer id of file_stream requests sent without
// X-WANDB-ASYNC-CLIENT-ID (an ordinary, non-shared client).
const Primary = ""

type runKey struct{ entity, project, name string }

type run struct {
	key       runKey
	storageID string
	display   string
	group     string // groupName: the runs W&B shows together
	jobType   string
	created   time.Time
	config    map[string]any // as the client sends it: {"key": {"value": v}}
	tags      []string
	notes     *string  // nil until an UpsertBucket sets notes
	upserts   []string // X-WANDB-CLIENT-ID of each UpsertBucket ("" without)

	// The summary is its last write: a summary line (file_stream; only a
	// primary writer sends them, which in shared mode has a client id of
	// its own) or an UpsertBucket's summaryMetrics (the public API's
	// run.summary.update()), whichever came last. W&B does not say how it
	// merges them; the mock takes the last one whole, the stricter reading.
	summaryWrites int            // writes of either kind so far
	fileSummary   string         // the last summary line
	fileSummaryAt int            // summaryWrites at the last summary line
	apiSummary    map[string]any // the last summaryMetrics set
	apiSummaryAt  int            // summaryWrites when it was set

	writers map[string]*writer
	wOrder  []string

	complete   bool
	exitCode   *int
	finishedBy *string
	preempting bool
	uploaded   map[string]bool   // "uploaded" field of file_stream
	uploads    map[string][]byte // PUT bodies
	created2   []string          // CreateRunFiles names, in order
}

type writer struct {
	requests   int
	heartbeats int
	files      map[string]*streamFile
}

type streamFile struct {
	lines      map[int]string
	overwrites int // lines replaced by different content
	resent     int // lines sent again with the same content
	gaps       int // requests whose offset was past the last line
}

// Run is a snapshot of one run.
type Run struct {
	Entity      string         `json:"entity"`
	Project     string         `json:"project"`
	Name        string         `json:"name"` // the run id
	StorageID   string         `json:"storage_id"`
	DisplayName string         `json:"display_name"`
	Group       string         `json:"group"`    // groupName, as the last UpsertBucket that sent one set it
	JobType     string         `json:"job_type"` // jobType, likewise
	Created     time.Time      `json:"created"`
	Config      map[string]any `json:"config"`
	Tags        []string       `json:"tags"`
	Notes       string         `json:"notes"`
	// UpsertClients holds X-WANDB-CLIENT-ID of every UpsertBucket for this
	// run, in order ("" when the header was absent).
	UpsertClients []string `json:"upsert_clients"`
	Writers       []Writer `json:"writers"`
	Complete      bool     `json:"complete"`
	ExitCode      *int     `json:"exit_code"`
	// FinishedBy is the writer that sent complete=true (nil while running).
	FinishedBy *string  `json:"finished_by"`
	Preempting bool     `json:"preempting"`
	Uploaded   []string `json:"uploaded"`     // names reported in file_stream "uploaded"
	Uploads    []string `json:"uploads"`      // names PUT to the upload URL
	RunFiles   []string `json:"create_files"` // names asked for by CreateRunFiles

	fileSummary     string
	apiSummary      map[string]any
	apiSummaryNewer bool
}

// Writer is one file_stream writer's view of a run.
type Writer struct {
	ID         string          `json:"id"` // Primary ("") or the async client id
	Requests   int             `json:"requests"`
	Heartbeats int             `json:"heartbeats"`
	Files      map[string]File `json:"files"`
}

// File is one writer's lines of one file_stream file.
type File struct {
	Lines      []Line `json:"lines"` // by offset
	Overwrites int    `json:"overwrites"`
	Resent     int    `json:"resent"`
	Gaps       int    `json:"gaps"`
}

// Line is one line at its offset.
type Line struct {
	Offset  int    `json:"offset"`
	Content string `json:"content"`
}

// Contents returns the lines' contents in offset order.
func (f File) Contents() []string {
	out := make([]string, len(f.Lines))
	for i, l := range f.Lines {
		out[i] = l.Content
	}
	return out
}

// Contiguous reports whether the lines are exactly offsets 0..n-1.
func (f File) Contiguous() bool {
	for i, l := range f.Lines {
		if l.Offset != i {
			return false
		}
	}
	return true
}

// Writer returns the writer with the given id, if it wrote to the run.
func (r Run) Writer(id string) (Writer, bool) {
	for _, w := range r.Writers {
		if w.ID == id {
			return w, true
		}
	}
	return Writer{}, false
}

// File returns the writer's file (empty when it never wrote it).
func (r Run) File(writerID, name string) File {
	w, _ := r.Writer(writerID)
	return w.Files[name]
}

// Summary returns the run's summary: the last summary line a writer sent,
// parsed, or the summaryMetrics an UpsertBucket set after it.
func (r Run) Summary() map[string]any {
	if r.apiSummaryNewer {
		return deepCopy(r.apiSummary)
	}
	if r.fileSummary == "" {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(r.fileSummary), &m); err != nil {
		return nil
	}
	return m
}

// Runs returns every run, in creation order.
func (s *Server) Runs() []Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Run, 0, len(s.order))
	for _, k := range s.order {
		out = append(out, s.runs[k].snapshot())
	}
	return out
}

// Run returns one run.
func (s *Server) Run(entity, project, name string) (Run, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.runs[runKey{entity, project, name}]
	if !ok {
		return Run{}, false
	}
	return r.snapshot(), true
}

// FindRun returns the first run with the given id in any entity and project.
func (s *Server) FindRun(name string) (Run, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.order {
		if k.name == name {
			return s.runs[k].snapshot(), true
		}
	}
	return Run{}, false
}

// Lines returns one writer's lines of one file, in offset order.
func (s *Server) Lines(entity, project, name, writerID, file string) []string {
	r, _ := s.Run(entity, project, name)
	return r.File(writerID, file).Contents()
}

// HistoryLines returns the primary writer's history lines.
func (s *Server) HistoryLines(entity, project, name string) []string {
	return s.Lines(entity, project, name, Primary, HistoryFile)
}

// EventsLines returns one writer's system-metrics lines.
func (s *Server) EventsLines(entity, project, name, writerID string) []string {
	return s.Lines(entity, project, name, writerID, EventsFile)
}

// Writers returns the ids of the run's file_stream writers, in order of
// their first request.
func (s *Server) Writers(entity, project, name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.runs[runKey{entity, project, name}]
	if !ok {
		return nil
	}
	return slices.Clone(r.wOrder)
}

func (r *run) snapshot() Run {
	out := Run{
		Entity: r.key.entity, Project: r.key.project, Name: r.key.name,
		StorageID: r.storageID, DisplayName: r.display, Group: r.group, JobType: r.jobType, Created: r.created,
		Config:        deepCopy(r.config),
		Tags:          slices.Clone(r.tags),
		UpsertClients: slices.Clone(r.upserts),
		Complete:      r.complete,
		Preempting:    r.preempting,
		RunFiles:      slices.Clone(r.created2),
		fileSummary:   r.fileSummary,
		apiSummary:    deepCopy(r.apiSummary),
		// A set summary is the run's until a summary line comes after it.
		apiSummaryNewer: r.apiSummary != nil && r.apiSummaryAt > r.fileSummaryAt,
	}
	if r.notes != nil {
		out.Notes = *r.notes
	}
	if r.exitCode != nil {
		c := *r.exitCode
		out.ExitCode = &c
	}
	if r.finishedBy != nil {
		w := *r.finishedBy
		out.FinishedBy = &w
	}
	out.Uploaded = slices.Sorted(maps.Keys(r.uploaded))
	out.Uploads = slices.Sorted(maps.Keys(r.uploads))
	for _, id := range r.wOrder {
		w := r.writers[id]
		ws := Writer{ID: id, Requests: w.requests, Heartbeats: w.heartbeats, Files: map[string]File{}}
		for name, f := range w.files {
			fs := File{Overwrites: f.overwrites, Resent: f.resent, Gaps: f.gaps}
			offs := slices.Sorted(maps.Keys(f.lines))
			for _, o := range offs {
				fs.Lines = append(fs.Lines, Line{Offset: o, Content: f.lines[o]})
			}
			ws.Files[name] = fs
		}
		out.Writers = append(out.Writers, ws)
	}
	return out
}

func deepCopy(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil
	}
	return out
}

// lineCount is the number of lines a writer has in a file (its next offset).
func (r *run) lineCount(writerID, file string) int {
	w, ok := r.writers[writerID]
	if !ok {
		return 0
	}
	f, ok := w.files[file]
	if !ok {
		return 0
	}
	n := 0
	for o := range f.lines {
		n = max(n, o+1)
	}
	return n
}

// tail returns the last n lines of a writer's file as a JSON list of strings,
// the shape RunResumeStatus uses for historyTail and eventsTail.
func (r *run) tail(writerID, file string, n int) string {
	snap := r.snapshot()
	lines := snap.File(writerID, file).Contents()
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if lines == nil {
		lines = []string{}
	}
	b, _ := json.Marshal(lines)
	return string(b)
}

// fileStreamRequest is the body wandb-core posts (filestreamrequest.go).
type fileStreamRequest struct {
	Files map[string]struct {
		Offset  int      `json:"offset"`
		Content []string `json:"content"`
	} `json:"files"`
	Uploaded   []string `json:"uploaded"`
	Preempting *bool    `json:"preempting"`
	Complete   *bool    `json:"complete"`
	ExitCode   *int     `json:"exitcode"`
}

// serveFileStream handles POST /files/{entity}/{project}/{run}/file_stream.
func (s *Server) serveFileStream(w http.ResponseWriter, r *http.Request, body []byte) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) != 5 {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "bad file_stream path " + r.URL.Path})
		return
	}
	key := runKey{parts[1], parts[2], parts[3]}
	var req fileStreamRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "file_stream body is not JSON: " + err.Error()})
			return
		}
	}
	writerID := r.Header.Get("X-WANDB-ASYNC-CLIENT-ID")

	s.mu.Lock()
	defer s.mu.Unlock()
	ru, ok := s.runs[key]
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "run " + key.entity + "/" + key.project + "/" + key.name + " not found"})
		return
	}
	wr, ok := ru.writers[writerID]
	if !ok {
		wr = &writer{files: map[string]*streamFile{}}
		ru.writers[writerID] = wr
		ru.wOrder = append(ru.wOrder, writerID)
	}
	wr.requests++
	if len(req.Files) == 0 && len(req.Uploaded) == 0 && req.Preempting == nil && req.Complete == nil && req.ExitCode == nil {
		wr.heartbeats++
	}
	for name, fc := range req.Files {
		f, ok := wr.files[name]
		if !ok {
			f = &streamFile{lines: map[int]string{}}
			wr.files[name] = f
		}
		if fc.Offset > ru.lineCount(writerID, name) {
			f.gaps++
		}
		if name == SummaryFile && len(fc.Content) > 0 {
			ru.summaryWrites++
			ru.fileSummary, ru.fileSummaryAt = fc.Content[len(fc.Content)-1], ru.summaryWrites
		}
		for i, line := range fc.Content {
			o := fc.Offset + i
			if old, ok := f.lines[o]; ok {
				if old == line {
					f.resent++
				} else {
					f.overwrites++
				}
			}
			f.lines[o] = line
		}
	}
	for _, u := range req.Uploaded {
		ru.uploaded[u] = true
	}
	if req.Preempting != nil && *req.Preempting {
		ru.preempting = true
	}
	if req.Complete != nil && *req.Complete {
		ru.complete = true
		id := writerID
		ru.finishedBy = &id
	}
	if req.ExitCode != nil {
		c := *req.ExitCode
		ru.exitCode = &c
	}
	// wandb-core reads only "stopped"; the real server also sends these.
	writeJSON(w, http.StatusOK, map[string]any{"exitcode": nil, "limits": map[string]any{}})
}

const uploadPrefix = "/_upload/"

// serveUpload stores a PUT to an upload URL handed out by CreateRunFiles.
func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, uploadPrefix)
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) != 4 {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "bad upload path " + r.URL.Path})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ru, ok := s.runs[runKey{parts[0], parts[1], parts[2]}]
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "run not found for upload " + r.URL.Path})
		return
	}
	ru.uploads[parts[3]] = body
	w.WriteHeader(http.StatusOK)
}

// Upload returns the body PUT for a run file, if any.
func (s *Server) Upload(entity, project, name, file string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ru, ok := s.runs[runKey{entity, project, name}]
	if !ok {
		return nil, false
	}
	b, ok := ru.uploads[file]
	return slices.Clone(b), ok
}

// serveDebug answers GET /_mock/state (every run, with every writer's lines)
// and GET /_mock/requests (every request so far) for tests outside Go.
func (s *Server) serveDebug(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"error": "GET only"})
		return
	}
	switch r.URL.Path {
	case "/_mock/state":
		writeJSON(w, http.StatusOK, map[string]any{
			"runs":               s.Runs(),
			"unknown_operations": s.UnknownOperations(),
		})
	case "/_mock/requests":
		reqs := s.Requests()
		sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].Time.Before(reqs[j].Time) })
		writeJSON(w, http.StatusOK, reqs)
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "unknown debug path " + r.URL.Path})
	}
}

func newGzipReader(r io.Reader) (io.ReadCloser, error) { return gzip.NewReader(r) }
