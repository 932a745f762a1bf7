package wandbserver

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

type gqlRequest struct {
	Query         string         `json:"query"`
	OperationName string         `json:"operationName"`
	Variables     map[string]any `json:"variables"`
}

var opNameRE = regexp.MustCompile(`^\s*(?:#[^\n]*\n\s*)*(?:query|mutation)\s+([A-Za-z_][A-Za-z0-9_]*)`)

// operationName is the request's operationName, or the name in the query
// text (the Python side's gql client sends only the text).
func operationName(q gqlRequest) string {
	if q.OperationName != "" {
		return q.OperationName
	}
	if m := opNameRE.FindStringSubmatch(q.Query); m != nil {
		return m[1]
	}
	return ""
}

// serveGraphQL answers one GraphQL request and returns the operation name.
//
// The mock matches operations by name, as wandb-core's generated client
// (core/api/graphql/*.graphql) and the Python SDK name them, and returns the
// fields those queries select.
func (s *Server) serveGraphQL(w http.ResponseWriter, r *http.Request, body []byte) string {
	var q gqlRequest
	if err := json.Unmarshal(body, &q); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"errors": []any{map[string]any{"message": "body is not a GraphQL JSON request: " + err.Error()}}})
		return ""
	}
	op := operationName(q)
	v := vars(q.Variables)
	var data any
	switch op {
	case "Viewer", "GetDefaultEntity":
		// GetDefaultEntity is the public API's (wandb.Api) first question.
		data = map[string]any{"viewer": s.viewer()}
	case "ServerFeaturesQuery":
		// No optional features: the client takes its conservative paths
		// (no gzip on file_stream, no large file names, ...).
		data = map[string]any{"serverInfo": map[string]any{"features": []any{}}}
	case "ServerInfo":
		data = map[string]any{"serverInfo": map[string]any{
			"cliVersionInfo":         map[string]any{},
			"latestLocalVersionInfo": nil,
		}}
	case "UpsertBucket":
		if v.str("name") == "" && v.str("id") == "" {
			// wandb-core always sends the run id, the public API the run's
			// storage id; the real server would generate one, the mock
			// refuses so that a test notices.
			writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{"upsertBucket": nil},
				"errors": []any{map[string]any{"message": "wandb mock: UpsertBucket without a name", "path": []any{"upsertBucket"}}}})
			return op
		}
		data = s.upsertBucket(v, r.Header.Get("X-WANDB-CLIENT-ID"))
	case "RunResumeStatus", "RunSummary":
		// RunSummary (bridge's read of a job run's summary) selects fewer
		// fields of the same bucket.
		data = s.runResumeStatus(v)
	case "Run":
		data = s.publicRun(v)
	case "RunStoppedStatus":
		data = s.runStoppedStatus(v)
	case "OrganizationCoreWeaveOrganizationID":
		// Not a CoreWeave organization: wandb-core skips that metadata.
		data = map[string]any{"entity": map[string]any{"organization": nil}}
	case "CreateRunFiles":
		data = s.createRunFiles(v)
	default:
		s.mu.Lock()
		s.unknown = append(s.unknown, opOrQuery(op, q.Query))
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{
			"data":   nil,
			"errors": []any{map[string]any{"message": "wandb mock: operation not implemented: " + opOrQuery(op, q.Query)}},
		})
		return op
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data})
	return op
}

func opOrQuery(op, query string) string {
	if op != "" {
		return op
	}
	q := strings.Join(strings.Fields(query), " ")
	if len(q) > 80 {
		q = q[:80]
	}
	return q
}

type vars map[string]any

func (v vars) str(k string) string {
	s, _ := v[k].(string)
	return s
}

func (s *Server) viewer() map[string]any {
	return map[string]any{
		"id":       gqlID("User", s.opts.Username),
		"entity":   s.opts.Entity,
		"username": s.opts.Username,
		"email":    s.opts.Username + "@example.invalid",
		"flags":    "{}",
		"admin":    false,
		"teams":    map[string]any{"edges": []any{}},
	}
}

// gqlID mimics W&B's opaque base64 node ids.
func gqlID(kind string, parts ...string) string {
	return base64.StdEncoding.EncodeToString([]byte(kind + ":" + strings.Join(parts, ":")))
}

func (s *Server) entityOr(e string) string {
	if e == "" {
		return s.opts.Entity
	}
	return e
}

func projectOr(p string) string {
	if p == "" {
		return "uncategorized"
	}
	return p
}

// upsertBucket creates or updates a run (mutation UpsertBucket), named by
// entity, project and name (wandb-core), or by its storage id alone (the
// public API's run.update() and summary writes).
func (s *Server) upsertBucket(v vars, clientID string) any {
	key := runKey{s.entityOr(v.str("entity")), projectOr(v.str("project")), v.str("name")}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id := v.str("id"); key.name == "" {
		for k, r := range s.runs {
			if r.storageID == id {
				key = k
			}
		}
		if key.name == "" {
			return map[string]any{"upsertBucket": nil}
		}
	}
	ru, ok := s.runs[key]
	inserted := !ok
	if !ok {
		ru = s.newRun(key)
	}
	ru.upserts = append(ru.upserts, clientID)
	if d := v.str("displayName"); d != "" {
		ru.display = d
	}
	// wandb-core sends groupName and jobType with the run's other
	// parameters, null when unset (runupserter.lockedDoUpsert): a null
	// leaves them as they are.
	if g := v.str("groupName"); g != "" {
		ru.group = g
	}
	if j := v.str("jobType"); j != "" {
		ru.jobType = j
	}
	if c := v.str("config"); c != "" {
		var cfg map[string]any
		if err := json.Unmarshal([]byte(c), &cfg); err == nil {
			for k, val := range cfg {
				ru.config[k] = val
			}
		}
	}
	if tags, ok := v["tags"].([]any); ok {
		ru.tags = ru.tags[:0]
		for _, t := range tags {
			if ts, ok := t.(string); ok {
				ru.tags = append(ru.tags, ts)
			}
		}
	}
	// Only a notes variable that is sent changes the notes (UpsertBucket
	// updates the fields it is given).
	if n, ok := v["notes"].(string); ok {
		ru.notes = &n
	}
	if sm := v.str("summaryMetrics"); sm != "" {
		var m map[string]any
		if err := json.Unmarshal([]byte(sm), &m); err == nil {
			ru.summaryWrites++
			ru.apiSummary, ru.apiSummaryAt = m, ru.summaryWrites
		}
	}
	cfgJSON, _ := json.Marshal(ru.config)
	return map[string]any{"upsertBucket": map[string]any{
		"bucket": map[string]any{
			"id":          ru.storageID,
			"name":        key.name,
			"displayName": ru.display,
			"description": nil,
			"config":      string(cfgJSON),
			"sweepName":   nil,
			"project": map[string]any{
				"id":     gqlID("Project", key.project, key.entity),
				"name":   key.project,
				"entity": map[string]any{"id": gqlID("Entity", key.entity), "name": key.entity},
			},
			"historyLineCount": ru.lineCount(Primary, HistoryFile),
		},
		"inserted": inserted,
	}}
}

// newRun adds an empty run; s.mu is held.
func (s *Server) newRun(key runKey) *run {
	ru := &run{
		key:       key,
		storageID: gqlID("Run", "v1", key.name, key.project, key.entity),
		created:   time.Now(),
		config:    map[string]any{},
		writers:   map[string]*writer{},
		uploaded:  map[string]bool{},
		uploads:   map[string][]byte{},
	}
	s.runs[key] = ru
	s.order = append(s.order, key)
	return ru
}

// CreateStartedRun adds a run as a training process's wandb.init leaves it:
// its config holds _wandb.t, so clients count it as started. It makes no
// request: a test that does not run the real client uses it in place of the
// child's wandb.init, and the recorded requests stay the client's under test.
// An empty entity is the viewer's; an empty project "uncategorized".
func (s *Server) CreateStartedRun(entity, project, name string) {
	key := runKey{s.entityOr(entity), projectOr(project), name}
	s.mu.Lock()
	defer s.mu.Unlock()
	ru, ok := s.runs[key]
	if !ok {
		ru = s.newRun(key)
	}
	ru.config["_wandb"] = map[string]any{"value": map[string]any{"t": map[string]any{}}}
}

func (r *run) notesOrNil() any {
	if r.notes == nil {
		return nil
	}
	return *r.notes
}

// wandbT returns {"t": ...} from the run's _wandb config value, the field
// wandbConfig(keys: ["t"]) selects; wandb-core counts a run without it as
// not started (core/internal/runbranch/resume.go).
func (r *run) wandbT() any {
	wb, _ := r.config["_wandb"].(map[string]any)
	val, _ := wb["value"].(map[string]any)
	t, ok := val["t"]
	if !ok {
		return "{}"
	}
	b, _ := json.Marshal(map[string]any{"t": t})
	return string(b)
}

// runResumeStatus answers query RunResumeStatus: model(name, entityName)
// with bucket(name, missingOk: true); null model for an unknown project,
// null bucket for an unknown run.
func (s *Server) runResumeStatus(v vars) any {
	entity, project, name := s.entityOr(v.str("entity")), projectOr(v.str("project")), v.str("name")
	s.mu.Lock()
	defer s.mu.Unlock()
	projectExists := false
	for _, k := range s.order {
		if k.entity == entity && k.project == project {
			projectExists = true
			break
		}
	}
	if !projectExists {
		return map[string]any{"model": nil}
	}
	model := map[string]any{
		"id":     gqlID("Project", project, entity),
		"name":   project,
		"entity": map[string]any{"id": gqlID("Entity", entity), "name": entity},
		"bucket": nil,
	}
	ru, ok := s.runs[runKey{entity, project, name}]
	if ok {
		cfgJSON, _ := json.Marshal(ru.config)
		summary := "{}"
		if m := ru.snapshot().Summary(); m != nil {
			b, _ := json.Marshal(m)
			summary = string(b)
		}
		model["bucket"] = map[string]any{
			"id":               ru.storageID,
			"name":             name,
			"summaryMetrics":   summary,
			"displayName":      ru.display,
			"logLineCount":     ru.lineCount(Primary, OutputFile),
			"historyLineCount": ru.lineCount(Primary, HistoryFile),
			"eventsLineCount":  ru.lineCount(Primary, EventsFile),
			"historyTail":      ru.tail(Primary, HistoryFile, 10),
			"eventsTail":       ru.tail(Primary, EventsFile, 10),
			"config":           string(cfgJSON),
			"tags":             append([]string{}, ru.tags...),
			"notes":            ru.notesOrNil(),
			"wandbConfig":      ru.wandbT(),
		}
	}
	return map[string]any{"model": model}
}

// publicRun answers the public API's query Run: project(name,
// entityName) { run(name) { ...RunFragment } } (wandb/apis/public/runs.py);
// a null run for an unknown one.
func (s *Server) publicRun(v vars) any {
	key := runKey{s.entityOr(v.str("entity")), projectOr(v.str("project")), v.str("name")}
	s.mu.Lock()
	defer s.mu.Unlock()
	ru, ok := s.runs[key]
	if !ok {
		return map[string]any{"project": map[string]any{"run": nil}}
	}
	cfgJSON, _ := json.Marshal(ru.config)
	summary := "{}"
	if m := ru.snapshot().Summary(); m != nil {
		b, _ := json.Marshal(m)
		summary = string(b)
	}
	state := "running"
	if ru.complete {
		state = "finished"
	}
	return map[string]any{"project": map[string]any{"run": map[string]any{
		"projectId": "1", "id": ru.storageID, "name": key.name, "displayName": ru.display, "tags": append([]string{}, ru.tags...),
		"sweepName": nil, "state": state, "config": string(cfgJSON), "group": nilIfEmpty(ru.group), "jobType": nilIfEmpty(ru.jobType), "commit": nil,
		"readOnly": false, "createdAt": ru.created.UTC().Format("2006-01-02T15:04:05"), "heartbeatAt": ru.created.UTC().Format("2006-01-02T15:04:05"),
		"description": nil, "notes": ru.notesOrNil(), "systemMetrics": "{}", "summaryMetrics": summary,
		"historyLineCount": ru.lineCount(Primary, HistoryFile), "user": map[string]any{"name": s.opts.Username, "username": s.opts.Username},
		"historyKeys": map[string]any{"keys": map[string]any{}, "lastStep": 0},
	}}}
}

func (s *Server) runStoppedStatus(v vars) any {
	entity, project, name := s.entityOr(v.str("entityName")), projectOr(v.str("projectName")), v.str("runId")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.runs[runKey{entity, project, name}]; !ok {
		return map[string]any{"project": map[string]any{"run": nil}}
	}
	return map[string]any{"project": map[string]any{"run": map[string]any{"stopped": false}}}
}

// createRunFiles hands out upload URLs on this server for each file.
func (s *Server) createRunFiles(v vars) any {
	key := runKey{s.entityOr(v.str("entity")), projectOr(v.str("project")), v.str("run")}
	var names []string
	if fs, ok := v["files"].([]any); ok {
		for _, f := range fs {
			if n, ok := f.(string); ok {
				names = append(names, n)
			}
		}
	}
	base := s.URL()
	s.mu.Lock()
	defer s.mu.Unlock()
	ru, ok := s.runs[key]
	runID := ""
	if ok {
		runID = ru.storageID
		ru.created2 = append(ru.created2, names...)
	}
	files := make([]any, 0, len(names))
	for _, n := range names {
		files = append(files, map[string]any{
			"name": n,
			"uploadUrl": base + uploadPrefix + url.PathEscape(key.entity) + "/" + url.PathEscape(key.project) + "/" +
				url.PathEscape(key.name) + "/" + n,
		})
	}
	return map[string]any{"createRunFiles": map[string]any{
		"runID":         runID,
		"uploadHeaders": []any{},
		"files":         files,
	}}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
