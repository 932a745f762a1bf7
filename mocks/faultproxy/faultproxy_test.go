package faultproxy

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The proxy forwards what no fault matches, applies each fault the number of
// times scheduled, and counts requests.
func TestProxy(t *testing.T) {
	var applied atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		applied.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"run":{"info":{"run_id":"abc","experiment_id":"0"}}}`) //nolint:errcheck
	}))
	defer backend.Close()
	p, err := Start(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (int, string, http.Header, error) {
		resp, err := c.Post(p.URL()+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			return 0, "", nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header, err
	}

	p.Schedule(
		Fault{Path: "runs/log-batch", Kind: Status, Code: 429, RetryAfter: "0", Times: 2},
		Fault{Path: "runs/create", Kind: RewriteRunID, RunID: "x\x00y", Times: 1},
		Fault{Path: "page", Kind: Answer, Body: "<html>login</html>", Times: 1},
		Fault{Path: "reset", Kind: AppliedThenReset, Times: 1},
		Fault{Path: "get-history", Kind: EndlessPages, Times: 2},
	)
	for i := range 2 {
		if code, _, h, err := get("/api/2.0/mlflow/runs/log-batch"); err != nil || code != 429 || h.Get("Retry-After") != "0" {
			t.Errorf("try %d: %d %v %v", i, code, h, err)
		}
	}
	if code, body, _, err := get("/api/2.0/mlflow/runs/log-batch"); err != nil || code != 200 || !strings.Contains(body, `"abc"`) {
		t.Errorf("after the fault's times: %d %q %v", code, body, err)
	}
	if _, body, _, err := get("/api/2.0/mlflow/runs/create"); err != nil || !strings.Contains(body, `"x\u0000y"`) {
		t.Errorf("rewritten run id: %q %v", body, err)
	}
	if code, body, h, err := get("/page"); err != nil || code != 200 || body != "<html>login</html>" || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Errorf("answer: %d %q %v", code, body, err)
	}
	// Each answer the server gave gets a token never given before.
	var tokens []string
	for range 2 {
		_, body, _, err := get("/api/2.0/mlflow/metrics/get-history")
		var page struct {
			Run  map[string]any `json:"run"`
			Next string         `json:"next_page_token"`
		}
		if err != nil || json.Unmarshal([]byte(body), &page) != nil || page.Run == nil || page.Next == "" {
			t.Fatalf("endless pages: %q %v", body, err)
		}
		tokens = append(tokens, page.Next)
	}
	if tokens[0] == tokens[1] {
		t.Errorf("endless pages gave the token %q twice", tokens[0])
	}
	before := applied.Load()
	if _, _, _, err := get("/reset"); err == nil {
		t.Error("applied-then-reset answered")
	}
	if applied.Load() != before+1 {
		t.Error("applied-then-reset did not reach the server")
	}
	if n := p.Count("runs/log-batch"); n != 3 {
		t.Errorf("Count = %d, want 3", n)
	}

	if err := p.Down(); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := get("/x"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("while down: %v, want connection refused", err)
	}
	if err := p.Up(); err != nil {
		t.Fatal(err)
	}
	if code, _, _, err := get("/x"); err != nil || code != 200 {
		t.Errorf("after Up: %d %v", code, err)
	}
}

// An endless body never ends: a client with a cap stops reading.
func TestEndless(t *testing.T) {
	backend := httptest.NewServer(http.NotFoundHandler())
	defer backend.Close()
	p, err := Start(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Schedule(Fault{Kind: Endless})
	resp, err := http.Get(p.URL() + "/anything")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 8<<20))
	if err != nil || n != 8<<20 {
		t.Errorf("read %d bytes, %v; want the 8 MiB cap reached", n, err)
	}
}

// SlowAnswer: the server has the request at once; its answer reaches the
// client no sooner than Delay after that.
func TestSlowAnswer(t *testing.T) {
	applied := make(chan time.Time, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		applied <- time.Now()
		io.WriteString(w, `{"ok":true}`) //nolint:errcheck
	}))
	defer backend.Close()
	p, err := Start(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const delay = 300 * time.Millisecond
	p.Schedule(Fault{Path: "runs/create", Kind: SlowAnswer, Delay: delay, Times: 1})
	resp, err := http.Post(p.URL()+"/api/2.0/mlflow/runs/create", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	answered := time.Now()
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	at := <-applied
	if resp.StatusCode != 200 || string(b) != `{"ok":true}` {
		t.Errorf("answer %d %q", resp.StatusCode, b)
	}
	if answered.Sub(at) < delay {
		t.Errorf("answered %v after the server applied it, want at least %v", answered.Sub(at), delay)
	}
}

// BodyContains picks requests by their body; Reset never forwards; Share applies a fault to
// about its share of the requests it matches, the same ones for the same
// seed, and leaves the others to the next fault or the server.
func TestProxyBodyAndShare(t *testing.T) {
	var applied atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		applied.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{}`) //nolint:errcheck
	}))
	defer backend.Close()
	p, err := Start(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := &http.Client{Timeout: 5 * time.Second}
	post := func(body string) int {
		resp, err := c.Post(p.URL()+"/api/2.0/mlflow/runs/log-batch", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
		return resp.StatusCode
	}

	p.Schedule(Fault{Path: "runs/log-batch", BodyContains: "report_summary", Kind: Status, Code: 503, Times: 1},
		Fault{Path: "runs/log-batch", BodyContains: "reset-me", Kind: Reset, Times: 1})
	if _, err := c.Post(p.URL()+"/api/2.0/mlflow/runs/log-batch", "application/json", strings.NewReader("reset-me")); err == nil {
		t.Error("Reset: the request got an answer")
	}
	if n := applied.Load(); n != 0 {
		t.Errorf("Reset: the server saw %d requests, want none", n)
	}
	if code := post(`{"tags":[{"key":"a"}]}`); code != 200 {
		t.Errorf("a body without the string: %d, want it forwarded", code)
	}
	if code := post(`{"tags":[{"key":"bridge.job.report_summary"}]}`); code != 503 {
		t.Errorf("the body with it: %d, want the fault", code)
	}
	if code := post(`{"tags":[{"key":"bridge.job.report_summary"}]}`); code != 200 {
		t.Errorf("after the fault's one time: %d, want it forwarded", code)
	}

	draw := func(seed uint64) []int {
		p.Clear()
		p.Seed(seed)
		p.Schedule(Fault{Kind: Status, Code: 503, Share: 0.2}, Fault{Kind: Status, Code: 502, Share: 0.5})
		codes := make([]int, 400)
		for i := range codes {
			codes[i] = post("{}")
		}
		return codes
	}
	a, b := draw(7), draw(7)
	n := map[int]int{}
	for i := range a {
		n[a[i]]++
		if a[i] != b[i] {
			t.Fatalf("request %d: %d, then %d with the same seed", i, a[i], b[i])
		}
	}
	// 20% get 503; half of the rest (40%) 502; 40% go through. Loose
	// bounds: 400 draws of a fixed seed, not a statistical test.
	if n[503] < 40 || n[503] > 120 || n[502] < 110 || n[502] > 210 || n[200] < 110 || n[200] > 210 {
		t.Errorf("answers %v of 400, want about 80 503s, 160 502s, 160 200s", n)
	}
}
