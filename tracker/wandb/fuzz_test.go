package wandb

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

// fuzzAnswer answers GraphQL and file_stream requests with the fuzzer's
// bodies.
type fuzzAnswer struct {
	mu              sync.Mutex
	code            int
	graphql, events []byte
}

func (a *fuzzAnswer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body) //nolint:errcheck // read to the end: the connection is reused
	a.mu.Lock()
	code, body := a.code, a.graphql
	if strings.HasSuffix(r.URL.Path, "/file_stream") {
		body = a.events
	}
	a.mu.Unlock()
	w.WriteHeader(code)
	w.Write(body) //nolint:errcheck
}

// FuzzResponse feeds any GraphQL answer (Viewer, RunResumeStatus) and any
// file_stream answer to the sink's real request path. Whatever the server
// says, the sink must not panic, and a Send counts as delivered only when
// the file_stream answer was a 2xx JSON object.
func FuzzResponse(f *testing.F) {
	ans := &fuzzAnswer{}
	srv := httptest.NewServer(ans)
	defer srv.Close()
	base, err := New(Config{BaseURL: srv.URL, APIKey: testKey, Project: "p", Label: "l", Timeout: time.Second}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, code int, graphql, events []byte) {
		if code < 200 || code > 599 { // 1xx are informational: a 200 follows
			code = 200
		}
		ans.mu.Lock()
		ans.code, ans.graphql, ans.events = code, graphql, events
		ans.mu.Unlock()
		// A fresh sink state on the shared client (one transport for all
		// inputs).
		s := &Sink{cfg: base.cfg, log: base.log, client: base.client, clientID: base.clientID, maxBytes: base.maxBytes, lastSeq: -1}
		ctx := context.Background()
		if _, err := s.Start(ctx, tracker.StartInfo{}); err != nil && s.Run().ID == "" {
			t.Fatalf("Start lost the run id: %v", err)
		}
		acked, err := s.Send(ctx, []metrics.Sample{{Seq: 1, Time: time.Now(), Points: []metrics.Point{metrics.Named("x", 1)}}})
		if err == nil && (acked != 1 || code/100 != 2 || tracker.CheckJSONObject(events, "") != nil) {
			t.Fatalf("Send = %d, nil on %d %q", acked, code, events)
		}
		_ = s.Finish(ctx, tracker.EndInfo{})
	})
}
