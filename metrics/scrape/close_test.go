package scrape

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/internal/waitfor"
	"github.com/bridge-dev/bridge/metrics/internal/closetest"
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
