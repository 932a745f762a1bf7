// Package wandbserver is a local W&B test server: the GraphQL operations and
// the file_stream endpoint that the wandb Python client (wandb-core) and
// bridge's W&B sink use, with per-writer file_stream offsets, HTTP basic auth
// and a record of every request.
//
// It is a test double, not a W&B server: it keeps everything in memory, knows
// only the operations listed in graphql.go (any other operation is answered
// with a GraphQL error and recorded in UnknownOperations, so a test notices
// when the client starts using something new) and models shared-mode writers
// the simple way: every writer (the X-WANDB-ASYNC-CLIENT-ID header, or none
// for the primary) has its own line numbers per file. How the real server
// merges writers is not public.
//
// Concurrency: every method is safe for concurrent use. Accessors return deep
// copies the caller owns. Stop and Restart keep the state, so a test can model
// an outage of the same server.
package wandbserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options configure a Server.
type Options struct {
	// APIKey is the only key the server accepts (HTTP basic auth, user
	// "api"). Empty accepts any non-empty key.
	APIKey string
	// Entity is the viewer's default entity, used when a client sends none.
	// Default "mock-entity".
	Entity string
	// Username is the viewer's user name. Default: Entity.
	Username string
	// Logger receives one debug line per request. Default: discard.
	Logger *slog.Logger
}

// Server is a running (or stopped) mock. The zero value is not usable: call
// New.
type Server struct {
	opts Options
	log  *slog.Logger

	lifeMu sync.Mutex // serialises Start/Stop/Restart
	addr   string     // host:port once started; kept across Stop for Restart
	srv    *http.Server
	done   chan struct{} // closed when srv's Serve returns

	mu      sync.Mutex
	runs    map[runKey]*run
	order   []runKey
	reqs    []Request
	unknown []string
	faults  []*fault
}

// New returns a stopped server.
func New(opts Options) *Server {
	if opts.Entity == "" {
		opts.Entity = "mock-entity"
	}
	if opts.Username == "" {
		opts.Username = opts.Entity
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{opts: opts, log: log, runs: map[runKey]*run{}}
}

// Start listens on addr ("127.0.0.1:0" picks a free port) and serves in the
// background. Use Restart to listen again on the same port after Stop.
func (s *Server) Start(addr string) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	return s.startLocked(addr)
}

func (s *Server) startLocked(addr string) error {
	if s.srv != nil {
		return fmt.Errorf("wandb mock: already serving on %s", s.addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("wandb mock: listen on %s: %w", addr, err)
	}
	s.addr = ln.Addr().String()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.done = make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("wandb mock: serve", "addr", ln.Addr().String(), "err", err)
		}
	}(s.srv, s.done)
	s.log.Info("wandb mock: serving", "url", "http://"+s.addr)
	return nil
}

// Stop closes the listener and every open connection at once, as a crashed
// server would; in-flight requests fail on the client side. State is kept.
func (s *Server) Stop() error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	return s.stopLocked()
}

func (s *Server) stopLocked() error {
	if s.srv == nil {
		return nil
	}
	err := s.srv.Close()
	<-s.done
	s.srv = nil
	if err != nil {
		return fmt.Errorf("wandb mock: stop %s: %w", s.addr, err)
	}
	return nil
}

// Restart starts a stopped server again on the port it had (stopping it
// first if it is running). State is kept.
func (s *Server) Restart() error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.addr == "" {
		return errors.New("wandb mock: restart before the first Start")
	}
	if err := s.stopLocked(); err != nil {
		return err
	}
	return s.startLocked(s.addr)
}

// Running reports whether the server is serving.
func (s *Server) Running() bool {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	return s.srv != nil
}

// URL is the base URL for WANDB_BASE_URL ("http://127.0.0.1:PORT"). It stays
// the same across Stop and Restart.
func (s *Server) URL() string {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	return "http://" + s.addr
}

// Entity is the viewer's default entity.
func (s *Server) Entity() string { return s.opts.Entity }

// APIKey is the key the server accepts ("" when it accepts any).
func (s *Server) APIKey() string { return s.opts.APIKey }

// StartTest starts a server on 127.0.0.1 with a free port for a test and
// stops it when the test ends.
func StartTest(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s := New(opts)
	if err := s.Start("127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return s
}

// Request is one recorded HTTP request.
type Request struct {
	Time      time.Time   `json:"time"`
	Method    string      `json:"method"`
	Path      string      `json:"path"`
	Header    http.Header `json:"header"`
	Body      string      `json:"body"`      // decoded (gunzipped); uploads are not kept here
	Operation string      `json:"operation"` // GraphQL operation name, "file_stream", "upload", "state"
	Writer    string      `json:"writer"`    // X-WANDB-ASYNC-CLIENT-ID on file_stream
	Status    int         `json:"status"`
}

// Requests returns every request received so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.reqs))
	for i, r := range s.reqs {
		r.Header = r.Header.Clone()
		out[i] = r
	}
	return out
}

// UnknownOperations lists GraphQL operations the mock does not implement
// that a client asked for (each answered with a GraphQL error).
func (s *Server) UnknownOperations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{}, s.unknown...)
}

// fault makes matching requests fail before they are handled.
type fault struct {
	match  func(*http.Request) bool
	status int
	header http.Header
	left   int
	after  bool // handle the request first: the response is lost, not the request
}

// FailNext makes the next n requests for which match returns true fail with
// status and the given response headers (e.g. Retry-After), without touching
// the state. Faults are checked in the order they were added.
func (s *Server) FailNext(n int, status int, header http.Header, match func(*http.Request) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{match: match, status: status, header: header.Clone(), left: n})
}

// FailAfterHandling is FailNext for a lost response: the next n matching
// requests are handled (the state changes) and then answered with status,
// as when a proxy or the network fails on the way back.
func (s *Server) FailAfterHandling(n int, status int, match func(*http.Request) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{match: match, status: status, left: n, after: true})
}

// IsFileStream matches file_stream requests, for FailNext.
func IsFileStream(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/file_stream") }

// maxBody caps a request body; wandb-core caps file_stream near 10 MiB.
const maxBody = 64 << 20

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	entry := Request{
		Time:   time.Now(),
		Method: r.Method,
		Path:   r.URL.Path,
		Header: r.Header.Clone(),
		Writer: r.Header.Get("X-WANDB-ASYNC-CLIENT-ID"),
	}
	defer func() {
		entry.Status = rec.status
		s.mu.Lock()
		s.reqs = append(s.reqs, entry)
		s.mu.Unlock()
		s.log.Debug("wandb mock: request", "method", r.Method, "path", r.URL.Path,
			"operation", entry.Operation, "status", rec.status)
	}()

	// The debug endpoints are open: they are the test's view, not the API.
	if strings.HasPrefix(r.URL.Path, "/_mock/") {
		entry.Operation = "state"
		s.serveDebug(rec, r)
		return
	}
	f := s.takeFault(r)
	if f != nil && f.after {
		s.handle(httptest.NewRecorder(), r, &entry)
		writeJSON(rec, f.status, map[string]any{"error": fmt.Sprintf("injected failure %d after handling", f.status)})
		return
	}
	if f != nil {
		for k, v := range f.header {
			rec.Header()[k] = v
		}
		writeJSON(rec, f.status, map[string]any{"error": fmt.Sprintf("injected failure %d", f.status)})
		return
	}
	s.handle(rec, r, &entry)
}

// handle serves the API: the open endpoints, then the authenticated ones.
func (s *Server) handle(rec http.ResponseWriter, r *http.Request, entry *Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/sdk/otel/"):
		// wandb-core probes this OpenTelemetry proxy without credentials
		// and turns its analytics off on 404, as for a server without it
		// (core/internal/analytics/opentelemetryproxy.go).
		entry.Operation = "otel"
		writeJSON(rec, http.StatusNotFound, map[string]any{"error": "not found: " + r.URL.Path})
		return
	case strings.HasPrefix(r.URL.Path, uploadPrefix) && r.Method == http.MethodPut:
		// Upload URLs are pre-signed on the real service: no credentials.
		entry.Operation = "upload"
		s.serveUpload(rec, r)
		return
	}
	if !s.authorized(r) {
		rec.Header().Set("WWW-Authenticate", `Basic realm="W&B"`)
		writeJSON(rec, http.StatusUnauthorized, map[string]any{
			"errors": []any{map[string]any{
				"message":    "user is not logged in",
				"extensions": map[string]any{"code": "PERMISSION_ERROR"},
			}},
		})
		return
	}

	switch {
	case r.URL.Path == "/graphql" && r.Method == http.MethodPost:
		body, err := readBody(r)
		entry.Body = string(body)
		if err != nil {
			writeJSON(rec, http.StatusBadRequest, map[string]any{"error": err.Error()})
			return
		}
		entry.Operation = s.serveGraphQL(rec, r, body)
	case strings.HasPrefix(r.URL.Path, "/files/") && strings.HasSuffix(r.URL.Path, "/file_stream") && r.Method == http.MethodPost:
		entry.Operation = "file_stream"
		body, err := readBody(r)
		entry.Body = string(body)
		if err != nil {
			writeJSON(rec, http.StatusBadRequest, map[string]any{"error": err.Error()})
			return
		}
		s.serveFileStream(rec, r, body)
	default:
		writeJSON(rec, http.StatusNotFound, map[string]any{"error": "not found: " + r.Method + " " + r.URL.Path})
	}
}

func (s *Server) takeFault(r *http.Request) *fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.faults {
		if f.left > 0 && f.match(r) {
			f.left--
			return f
		}
	}
	return nil
}

// authorized checks HTTP basic auth "api:<key>", as W&B's API does.
func (s *Server) authorized(r *http.Request) bool {
	const prefix = "Basic "
	h := r.Header.Get("Authorization")
	if !strings.HasPrefix(h, prefix) {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(h[len(prefix):])
	if err != nil {
		return false
	}
	user, key, ok := strings.Cut(string(raw), ":")
	if !ok || user != "api" || key == "" {
		return false
	}
	return s.opts.APIKey == "" || key == s.opts.APIKey
}

func readBody(r *http.Request) ([]byte, error) {
	var rd io.Reader = http.MaxBytesReader(nil, r.Body, maxBody)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := newGzipReader(rd)
		if err != nil {
			return nil, fmt.Errorf("read gzip body of %s: %w", r.URL.Path, err)
		}
		defer func() { _ = zr.Close() }()
		rd = zr
	}
	b, err := io.ReadAll(rd)
	if err != nil {
		return b, fmt.Errorf("read body of %s: %w", r.URL.Path, err)
	}
	return b, nil
}

type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Wait polls cond every few milliseconds until it holds or ctx ends; tests
// use it to wait for a client's asynchronous uploads.
func Wait(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
