// Package authproxy is a small authenticating reverse proxy for tests: it
// stands in front of an `mlflow server` (which has no token auth of its own),
// passes requests that carry the expected Bearer token and answers all others
// 401 in MLflow's error JSON, as an auth-enabled tracking server does.
package authproxy

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
)

// Proxy checks the Authorization header, then forwards to Target.
// It is safe for concurrent use.
type Proxy struct {
	token string
	rp    *httputil.ReverseProxy

	passed   atomic.Int64
	rejected atomic.Int64
}

// New returns a proxy to target that requires "Authorization: Bearer token".
func New(target *url.URL, token string) *Proxy {
	return &Proxy{
		token: token,
		rp: &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
			// SetURL also rewrites Host, which MLflow's host check
			// (allowed hosts) then sees as its own.
			r.SetURL(target)
		}},
	}
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	want := "Bearer " + p.token
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(want)) != 1 {
		p.rejected.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("WWW-Authenticate", `Bearer realm="mlflow"`)
		w.WriteHeader(http.StatusUnauthorized)
		// The shape of mlflow/exceptions.py errors; never echoes the token.
		json.NewEncoder(w).Encode(map[string]string{
			"error_code": "UNAUTHENTICATED",
			"message":    "You are not authenticated. Please provide a valid token.",
		})
		return
	}
	p.passed.Add(1)
	p.rp.ServeHTTP(w, r)
}

// Passed is the number of requests forwarded.
func (p *Proxy) Passed() int64 { return p.passed.Load() }

// Rejected is the number of requests answered 401.
func (p *Proxy) Rejected() int64 { return p.rejected.Load() }

// Server is a running proxy on 127.0.0.1.
type Server struct {
	*Proxy
	URL string // http://127.0.0.1:PORT
}

// Start runs a proxy to targetURL on 127.0.0.1, closed when the test ends.
func Start(t testing.TB, targetURL, token string) *Server {
	t.Helper()
	target, err := url.Parse(targetURL)
	if err != nil || target.Host == "" {
		t.Fatalf("authproxy target %q: want an http URL (%v)", targetURL, err)
	}
	p := New(target, token)
	ts := httptest.NewServer(p)
	t.Cleanup(ts.Close)
	return &Server{Proxy: p, URL: ts.URL}
}
