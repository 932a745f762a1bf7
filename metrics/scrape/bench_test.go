package scrape

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
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
	for b.Loop() {
		pts, err := c.Collect(context.Background())
		if err != nil || len(pts) == 0 {
			b.Fatalf("Collect: %d points, %v", len(pts), err)
		}
	}
}
