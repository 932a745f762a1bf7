package wandbserver

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

const testKey = "testtesttesttesttesttesttesttesttesttest"

type client struct {
	t    *testing.T
	base string
	key  string
}

func (c client) do(method, path string, body any, header map[string]string) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("api:"+c.key)))
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (c client) gql(op, query string, vars map[string]any) map[string]any {
	c.t.Helper()
	st, b := c.do("POST", "/graphql", map[string]any{"query": query, "operationName": op, "variables": vars}, nil)
	if st != 200 {
		c.t.Fatalf("%s: status %d: %s", op, st, b)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		c.t.Fatalf("%s: %v: %s", op, err, b)
	}
	if out["errors"] != nil {
		c.t.Fatalf("%s: errors: %s", op, b)
	}
	data, _ := out["data"].(map[string]any)
	return data
}

func (c client) stream(entity, project, run, writer string, files map[string]any, extra map[string]any) int {
	c.t.Helper()
	body := map[string]any{"files": files}
	for k, v := range extra {
		body[k] = v
	}
	h := map[string]string{}
	if writer != "" {
		h["X-WANDB-ASYNC-CLIENT-ID"] = writer
		h["X-WANDB-USE-ASYNC-FILESTREAM"] = "true"
	}
	st, _ := c.do("POST", "/files/"+entity+"/"+project+"/"+run+"/file_stream", body, h)
	return st
}

func chunk(offset int, lines ...string) map[string]any {
	return map[string]any{"offset": offset, "content": lines}
}

func TestAuth(t *testing.T) {
	srv := StartTest(t, Options{APIKey: testKey})
	for _, tc := range []struct {
		name   string
		header string
		want   int
	}{
		{"right key", "Basic " + base64.StdEncoding.EncodeToString([]byte("api:"+testKey)), 200},
		{"wrong key", "Basic " + base64.StdEncoding.EncodeToString([]byte("api:nope")), 401},
		{"wrong user", "Basic " + base64.StdEncoding.EncodeToString([]byte("bob:"+testKey)), 401},
		{"no header", "", 401},
		{"bearer", "Bearer " + testKey, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{}
			if tc.header != "" {
				h["Authorization"] = tc.header
			}
			st, body := client{t: t, base: srv.URL()}.do("POST", "/graphql",
				map[string]any{"query": "query Viewer { viewer { entity } }"}, h)
			if st != tc.want {
				t.Fatalf("status %d, want %d: %s", st, tc.want, body)
			}
			if st == 401 && !strings.Contains(string(body), "PERMISSION_ERROR") {
				t.Errorf("401 body lacks the PERMISSION_ERROR code W&B sends: %s", body)
			}
		})
	}
}

func upsert(c client, project, name string) {
	c.t.Helper()
	c.gql("UpsertBucket", "mutation UpsertBucket($name: String, $project: String, $entity: String, $config: JSONString) { upsertBucket(input: {name: $name}) { bucket { id } inserted } }",
		map[string]any{"name": name, "project": project, "config": `{"_wandb":{"value":{"t":{"1":[1]}}}}`})
}

func TestFileStreamOffsetsPerWriter(t *testing.T) {
	srv := StartTest(t, Options{APIKey: testKey})
	c := client{t: t, base: srv.URL(), key: testKey}
	upsert(c, "p", "r1")
	e := srv.Entity()

	// Both writers start at offset 0 of the same file: kept apart.
	if st := c.stream(e, "p", "r1", "", map[string]any{EventsFile: chunk(0, `{"a":1}`, `{"a":2}`)}, nil); st != 200 {
		t.Fatalf("primary: %d", st)
	}
	if st := c.stream(e, "p", "r1", "w2", map[string]any{EventsFile: chunk(0, `{"b":1}`)}, nil); st != 200 {
		t.Fatalf("w2: %d", st)
	}
	// A resend of the same line, a changed line, and a gap.
	c.stream(e, "p", "r1", "w2", map[string]any{EventsFile: chunk(0, `{"b":1}`, `{"b":2}`)}, nil)
	c.stream(e, "p", "r1", "", map[string]any{EventsFile: chunk(1, `{"a":20}`)}, nil)
	c.stream(e, "p", "r1", "", map[string]any{EventsFile: chunk(5, `{"a":6}`)}, nil)
	c.stream(e, "p", "r1", "w2", nil, nil) // heartbeat

	r, ok := srv.Run(e, "p", "r1")
	if !ok {
		t.Fatal("run not found")
	}
	prim := r.File(Primary, EventsFile)
	if got := strings.Join(prim.Contents(), " "); got != `{"a":1} {"a":20} {"a":6}` {
		t.Errorf("primary lines %s", got)
	}
	if prim.Overwrites != 1 || prim.Gaps != 1 || prim.Resent != 0 || prim.Contiguous() {
		t.Errorf("primary stats %+v", prim)
	}
	w2 := r.File("w2", EventsFile)
	if got := strings.Join(w2.Contents(), " "); got != `{"b":1} {"b":2}` {
		t.Errorf("w2 lines %s", got)
	}
	if w2.Overwrites != 0 || w2.Resent != 1 || w2.Gaps != 0 || !w2.Contiguous() {
		t.Errorf("w2 stats %+v", w2)
	}
	if ws := srv.Writers(e, "p", "r1"); len(ws) != 2 || ws[0] != Primary || ws[1] != "w2" {
		t.Errorf("writers %q", ws)
	}
	if w, _ := r.Writer("w2"); w.Heartbeats != 1 || w.Requests != 3 {
		t.Errorf("w2 requests %d heartbeats %d", w.Requests, w.Heartbeats)
	}
}

func TestFileStreamUnknownRunAndFinish(t *testing.T) {
	srv := StartTest(t, Options{})
	c := client{t: t, base: srv.URL(), key: testKey}
	if st := c.stream("x", "p", "nope", "", map[string]any{EventsFile: chunk(0, "{}")}, nil); st != 404 {
		t.Errorf("unknown run: status %d, want 404", st)
	}
	upsert(c, "p", "r2")
	c.stream(srv.Entity(), "p", "r2", "", nil, map[string]any{"complete": true, "exitcode": 3})
	r, _ := srv.Run(srv.Entity(), "p", "r2")
	if !r.Complete || r.ExitCode == nil || *r.ExitCode != 3 || r.FinishedBy == nil || *r.FinishedBy != Primary {
		t.Errorf("finish state %+v", r)
	}
}

func TestRunResumeStatus(t *testing.T) {
	srv := StartTest(t, Options{})
	c := client{t: t, base: srv.URL(), key: testKey}
	q := "query RunResumeStatus($project: String, $entity: String, $name: String!) { model { bucket { id } } }"

	if d := c.gql("RunResumeStatus", q, map[string]any{"project": "p", "name": "r"}); d["model"] != nil {
		t.Errorf("unknown project: model %v, want null", d["model"])
	}
	upsert(c, "p", "other")
	d := c.gql("RunResumeStatus", q, map[string]any{"project": "p", "name": "r"})
	if m, _ := d["model"].(map[string]any); m == nil || m["bucket"] != nil {
		t.Errorf("unknown run: %v, want a model with a null bucket", d)
	}
	upsert(c, "p", "r")
	c.stream(srv.Entity(), "p", "r", "", map[string]any{HistoryFile: chunk(0, `{"_step":0}`, `{"_step":1}`)}, nil)
	c.stream(srv.Entity(), "p", "r", "w", map[string]any{EventsFile: chunk(0, `{"x":1}`)}, nil)
	d = c.gql("RunResumeStatus", q, map[string]any{"project": "p", "name": "r"})
	b := d["model"].(map[string]any)["bucket"].(map[string]any)
	if b["historyLineCount"] != 2.0 || b["eventsLineCount"] != 0.0 {
		t.Errorf("line counts are the primary writer's: %v", b)
	}
	if b["wandbConfig"] != `{"t":{"1":[1]}}` {
		t.Errorf("wandbConfig %v", b["wandbConfig"])
	}
	if b["historyTail"] != `["{\"_step\":0}","{\"_step\":1}"]` {
		t.Errorf("historyTail %v", b["historyTail"])
	}
}

func TestCreateRunFilesAndUpload(t *testing.T) {
	srv := StartTest(t, Options{APIKey: testKey})
	c := client{t: t, base: srv.URL(), key: testKey}
	upsert(c, "p", "r")
	d := c.gql("CreateRunFiles", "mutation CreateRunFiles { createRunFiles { files { name uploadUrl } } }",
		map[string]any{"entity": srv.Entity(), "project": "p", "run": "r", "files": []string{"config.yaml"}})
	files := d["createRunFiles"].(map[string]any)["files"].([]any)
	u := files[0].(map[string]any)["uploadUrl"].(string)
	if !strings.HasPrefix(u, srv.URL()) {
		t.Fatalf("upload URL %q is not on the server", u)
	}
	// Upload URLs are pre-signed: no credentials.
	st, _ := client{t: t, base: ""}.do("PUT", u, "lr: 1", nil)
	if st != 200 {
		t.Fatalf("upload status %d", st)
	}
	if b, ok := srv.Upload(srv.Entity(), "p", "r", "config.yaml"); !ok || string(b) != `"lr: 1"` {
		t.Errorf("upload body %q", b)
	}
}

func TestUnknownOperationIsAnError(t *testing.T) {
	srv := StartTest(t, Options{})
	c := client{t: t, base: srv.URL(), key: testKey}
	st, body := c.do("POST", "/graphql", map[string]any{"query": "query Frobnicate { frob }"}, nil)
	if st != 200 || !strings.Contains(string(body), "not implemented") {
		t.Errorf("status %d body %s", st, body)
	}
	if got := srv.UnknownOperations(); len(got) != 1 || got[0] != "Frobnicate" {
		t.Errorf("unknown operations %q", got)
	}
}

func TestRestartKeepsStateAndPort(t *testing.T) {
	srv := StartTest(t, Options{})
	c := client{t: t, base: srv.URL(), key: testKey}
	upsert(c, "p", "r")
	url := srv.URL()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Post(url+"/graphql", "application/json", strings.NewReader("{}")); err == nil {
		t.Fatal("request to a stopped server succeeded")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if srv.URL() != url {
		t.Errorf("URL changed from %s to %s", url, srv.URL())
	}
	if st := c.stream(srv.Entity(), "p", "r", "", map[string]any{EventsFile: chunk(0, "{}")}, nil); st != 200 {
		t.Errorf("after restart: status %d", st)
	}
	if len(srv.Runs()) != 1 {
		t.Errorf("runs after restart: %d", len(srv.Runs()))
	}
}

func TestFailNext(t *testing.T) {
	srv := StartTest(t, Options{})
	c := client{t: t, base: srv.URL(), key: testKey}
	upsert(c, "p", "r")
	srv.FailNext(1, 429, http.Header{"Retry-After": {"7"}}, IsFileStream)
	req, _ := http.NewRequest("POST", srv.URL()+"/files/"+srv.Entity()+"/p/r/file_stream", strings.NewReader("{}"))
	req.SetBasicAuth("api", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" {
		t.Errorf("injected: %d %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if st := c.stream(srv.Entity(), "p", "r", "", nil, nil); st != 200 {
		t.Errorf("after the fault: %d", st)
	}
}

func TestDebugState(t *testing.T) {
	srv := StartTest(t, Options{APIKey: testKey})
	c := client{t: t, base: srv.URL(), key: testKey}
	upsert(c, "p", "r")
	c.stream(srv.Entity(), "p", "r", "w", map[string]any{EventsFile: chunk(0, `{"x":1}`)}, nil)
	st, body := client{t: t, base: srv.URL()}.do("GET", "/_mock/state", nil, nil)
	if st != 200 {
		t.Fatalf("status %d", st)
	}
	var state struct {
		Runs []Run `json:"runs"`
	}
	if err := json.Unmarshal(body, &state); err != nil {
		t.Fatal(err)
	}
	if len(state.Runs) != 1 || state.Runs[0].File("w", EventsFile).Contents()[0] != `{"x":1}` {
		t.Errorf("state %s", body)
	}
	st, body = client{t: t, base: srv.URL()}.do("GET", "/_mock/requests", nil, nil)
	var reqs []Request
	if err := json.Unmarshal(body, &reqs); st != 200 || err != nil || len(reqs) < 2 || reqs[0].Operation != "UpsertBucket" || reqs[1].Writer != "w" {
		t.Errorf("requests %d %v %s", st, err, body)
	}
}

func TestOperationName(t *testing.T) {
	for _, tc := range []struct {
		q    gqlRequest
		want string
	}{
		{gqlRequest{OperationName: "Viewer", Query: "query X { a }"}, "Viewer"},
		{gqlRequest{Query: "\n  query RunResumeStatus($a: String) { model }"}, "RunResumeStatus"},
		{gqlRequest{Query: "# comment\nmutation UpsertBucket { upsertBucket }"}, "UpsertBucket"},
		{gqlRequest{Query: "{ viewer { id } }"}, ""},
	} {
		if got := operationName(tc.q); got != tc.want {
			t.Errorf("operationName(%q) = %q, want %q", tc.q.Query, got, tc.want)
		}
	}
}
