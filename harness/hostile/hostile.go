// Package hostile serves Prometheus text-format answers meant to harm a
// scraper: the exporters of bench/scrape-memory.sh (through
// bench/hostileexporter) and of the end-to-end tests that run bridge in a
// memory cgroup beside them.
package hostile

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Modes are the exporters Handler knows, each described.
var Modes = map[string]string{
	"series":  "1e6 short series, a 21 MB body",
	"gzip":    "an 8.7 MB gzip body that inflates to about 8.5 GB",
	"label":   "series with 10 MiB label values",
	"endless": "an endless body, as fast as it goes",
	"drip":    "a line every 100 ms, never ending",
	"maxkept": "just within bridge's bounds: 1,990 series, 247-character keys",
	"churn":   "1,990 series whose label values change at every answer",
	"small":   "100 ordinary series (a baseline)",
}

// Handler is the exporter of one mode (see Modes). Its fixed bodies are
// built once, here.
func Handler(mode string) (http.Handler, error) {
	switch mode {
	case "series":
		return fixed(lines("short", 1_000_000), ""), nil
	case "small":
		return fixed(lines("small", 100), ""), nil
	case "gzip":
		return fixed(bomb(8_700_000), "gzip"), nil
	case "label":
		var b bytes.Buffer
		b.WriteString("# TYPE big gauge\n")
		v := strings.Repeat("x", 10<<20)
		for i := range 4 {
			fmt.Fprintf(&b, "big{i=\"%d\",l=\"%s\"} 1\n", i, v)
		}
		return fixed(b.Bytes(), ""), nil
	case "maxkept":
		var b bytes.Buffer
		b.WriteString("# TYPE maxkept gauge\n")
		v := strings.Repeat("v", 220) // prom_maxkept__i_0000000__l_vvv...: 247 characters
		for i := range 1_990 {
			fmt.Fprintf(&b, "maxkept{i=\"%07d\",l=\"%s\"} 1\n", i, v)
		}
		return fixed(b.Bytes(), ""), nil
	case "churn":
		var answer atomic.Int64
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			n := answer.Add(1)
			var b bytes.Buffer
			b.WriteString("# TYPE churn gauge\n")
			for i := range 1_990 {
				fmt.Fprintf(&b, "churn{answer=\"%d\",i=\"%d\"} 1\n", n, i)
			}
			w.Write(b.Bytes())
		}), nil
	case "endless":
		chunk := lines("endless", 10_000)[len("# TYPE endless gauge\n"):]
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("# TYPE endless gauge\n"))
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}), nil
	case "drip":
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f, _ := w.(http.Flusher)
			for i := 0; r.Context().Err() == nil; i++ {
				if _, err := fmt.Fprintf(w, "drip{i=\"%d\"} 1\n", i); err != nil {
					return
				}
				if f != nil {
					f.Flush()
				}
				select {
				case <-r.Context().Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}), nil
	}
	return nil, fmt.Errorf("unknown hostile exporter %q", mode)
}

// lines is n distinct short series of one gauge.
func lines(name string, n int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# TYPE %s gauge\n", name)
	for i := range n {
		fmt.Fprintf(&b, "%s{i=\"%07d\"} 1\n", name, i)
	}
	return b.Bytes()
}

// bomb is about size bytes of gzip: one member holding 1 MiB of one short
// series line, repeated (readers inflate concatenated members as one
// stream, Go's transparent decoding included).
func bomb(size int) []byte {
	var member bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	zw.Write(bytes.Repeat([]byte("bomb 1\n"), (1<<20)/7))
	zw.Close()
	var b bytes.Buffer
	for b.Len() < size {
		b.Write(member.Bytes())
	}
	return b.Bytes()
}

// fixed answers every request with body, labelled with encoding when set
// (whatever the request accepts: a hostile server does not ask).
func fixed(body []byte, encoding string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		if encoding != "" {
			w.Header().Set("Content-Encoding", encoding)
		}
		w.Write(body)
	})
}
