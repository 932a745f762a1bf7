package scrape

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/closetest"
	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
)

// Sampler.Close beside a scrape whose exporter does not answer: Close
// returns without waiting for the request, Failures beside it is safe, and
// the request ends when the exporter does.
func TestSamplerCloseWhileScrapeHangs(t *testing.T) {
	asked, release := make(chan struct{}, 8), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked <- struct{}{}
		<-release
		w.Write([]byte("up 1\n"))
	}))
	t.Cleanup(srv.Close)
	c := New(Options{URLs: []string{srv.URL + "/metrics"}, Timeout: time.Hour, Grace: time.Hour})
	counted := make(chan struct{})
	go func() {
		defer close(counted)
		for range 100 {
			c.Failures()
		}
	}()
	defer func() { <-counted }()
	closetest.CloseWhileStuck(t, c, "", func() {
		<-asked // the request had reached the exporter
		close(release)
		waitfor.Cond(t, time.Minute, "the scrape in flight ending", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return !c.targets[0].busy
		})
	})
}

// Close cancels a request in flight at once (the exporter sees it go) and
// starts none after; a request ended so is not the exporter's failure.
func TestCloseCancelsRequests(t *testing.T) {
	var asked atomic.Int32
	gone := make(chan struct{}, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		<-r.Context().Done() // never answers
		gone <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	var logs syncbuf.Buffer
	u := srv.URL + "/metrics"
	c := New(Options{URLs: []string{u}, Timeout: time.Hour, Grace: 10 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	collecttest.Collect(context.Background(), c)
	waitfor.Cond(t, time.Minute, "the request reaching the exporter", func() bool { return asked.Load() == 1 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, time.Minute, "the exporter seeing the request cancelled", waitfor.Closed(onFirst(gone)))
	waitfor.Cond(t, time.Minute, "the scrape in flight ending", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.targets[0].busy
	})
	if pts, err := collecttest.Collect(context.Background(), c); len(pts) != 0 || err != nil {
		t.Errorf("Collect after Close = %v, %v; want nothing", pts, err)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("%d requests, want 1: none after Close", n)
	}
	if f := c.Failures(); f[u] != 0 {
		t.Errorf("failures %v: a request Close cancelled is not the exporter's failure", f)
	}
	if strings.Contains(logs.String(), "cannot scrape") {
		t.Errorf("a request Close cancelled was logged as a failure:\n%s", logs.String())
	}
}

// onFirst is a channel closed once ch has given a value.
func onFirst(ch <-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	go func() { <-ch; close(out) }()
	return out
}

// A request outlives its sample: an answer that comes after the sample has
// gone, and its ctx with it, goes into the next sample.
func TestLateAnswerInNextSample(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Write([]byte("up 1\n"))
	}))
	t.Cleanup(srv.Close)
	c := New(Options{URLs: []string{srv.URL + "/metrics"}, Passthrough: true, Timeout: time.Hour, Grace: 10 * time.Millisecond})
	s := metrics.NewSampler([]metrics.Collector{c}, time.Minute, slog.New(slog.DiscardHandler))
	defer s.Close()
	if smp := s.Sample(context.Background()); len(smp.Points) != 0 {
		t.Fatalf("first sample %v, want nothing yet", smp.Points)
	}
	close(release) // the first sample, and its ctx, are over
	waitfor.Cond(t, time.Minute, "the late answer arriving", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.targets[0].have
	})
	if v, ok := s.Sample(context.Background()).Value("prom_up"); !ok || v != 1 {
		t.Errorf("next sample: prom_up = %v (%v), want the late answer, 1", v, ok)
	}
}
