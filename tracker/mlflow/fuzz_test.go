package mlflow

import (
	"context"
	"errors"
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

// fuzzAnswer is what the fuzz server answers every request with.
type fuzzAnswer struct {
	mu         sync.Mutex
	code       int
	body       []byte
	retryAfter string
}

func (a *fuzzAnswer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body) //nolint:errcheck // read to the end: the connection is reused
	a.mu.Lock()
	code, body, ra := a.code, a.body, a.retryAfter
	a.mu.Unlock()
	if ra != "" {
		w.Header().Set("Retry-After", ra)
	}
	w.WriteHeader(code)
	w.Write(body) //nolint:errcheck
}

// FuzzResponse feeds any answer (status, body, Retry-After) to the sink's
// real request path: Start (runs/create), Send (runs/log-batch) and Finish
// (runs/get, runs/update). Whatever the server says, the sink must not
// panic, an accepted run id must be valid for the child's environment, and
// a Send counts as delivered only on a 2xx JSON object.
func FuzzResponse(f *testing.F) {
	ans := &fuzzAnswer{}
	srv := httptest.NewServer(ans)
	defer srv.Close()
	// One client for all inputs: a transport per input would leave
	// thousands of connections open and stall the fuzzer.
	base, err := New(Config{TrackingURI: srv.URL, Timeout: time.Second}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, code int, body []byte, retryAfter string) {
		if code < 200 || code > 599 { // 1xx are informational: the server sends a 200 after them
			code = 200
		}
		if strings.ContainsAny(retryAfter, "\r\n\x00") {
			retryAfter = ""
		}
		ans.mu.Lock()
		ans.code, ans.body, ans.retryAfter = code, body, retryAfter
		ans.mu.Unlock()
		// A fresh sink state on the shared client.
		s := &Sink{cfg: base.cfg, log: base.log, client: base.client, url: base.url, prefix: base.prefix,
			maxMetrics: base.maxMetrics, maxBody: base.maxBody, keyOK: map[string]bool{}}
		ctx := context.Background()
		env, err := s.Start(ctx, tracker.StartInfo{RunName: "fuzz"})
		if err != nil {
			return
		}
		if verr := tracker.ValidEnv(env); verr != nil {
			t.Fatalf("Start accepted %q: %v", body, verr)
		}
		if verr := tracker.ValidID("run id", s.Run().ID); verr != nil {
			t.Fatalf("Start accepted run id from %q: %v", body, verr)
		}
		acked, err := s.Send(ctx, []metrics.Sample{{Seq: 1, Time: time.Now(), Points: []metrics.Point{metrics.Named("x", 1)}}})
		if err == nil && (acked != 1 || tracker.CheckJSONObject(body, "") != nil || code/100 != 2) {
			t.Fatalf("Send = %d, nil on %d %q", acked, code, body)
		}
		var ra *tracker.RetryAfterError
		if errors.As(err, &ra) && ra.After < 0 {
			t.Fatalf("negative Retry-After %v from %q", ra.After, retryAfter)
		}
		_ = s.Finish(ctx, tracker.EndInfo{ExitCode: 1, Time: time.Now()})
	})
}
