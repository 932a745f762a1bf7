package scrape

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/bridge-dev/bridge/metrics"
)

// BenchmarkCollect is one sample of the scrape source: one dcgm-exporter
// page (two GPUs) fetched over loopback HTTP, parsed and mapped.
func BenchmarkCollect(b *testing.B) {
	body, err := os.ReadFile("testdata/dcgm.txt")
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(body)
	}))
	defer srv.Close()
	c := newTest(Options{URLs: []string{srv.URL + "/metrics"}})
	b.ReportAllocs()
	var pts metrics.Batch // reused, as the Sampler does
	for b.Loop() {
		pts.Reset()
		if err := c.Collect(context.Background(), &pts); err != nil || len(pts.Points) == 0 {
			b.Fatalf("Collect: %d points, %v", len(pts.Points), err)
		}
	}
}
