package scrape

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unique"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bridge-dev/bridge/metrics"
)

// logBuffer is a slog logger whose output a test reads.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(&lockedWriter{w: &l.buf, mu: &l.mu}, nil))
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func server(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

func answer200(body []byte, encoding string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if encoding != "" {
			w.Header().Set("Content-Encoding", encoding)
		}
		w.Write(body)
	}
}

func gzipped(t *testing.T, body []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(body)
	zw.Close()
	return b.Bytes()
}

// seriesBody is n gauge series of one family, each with a label of
// labelBytes bytes (at least one).
func seriesBody(name string, n, labelBytes int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# TYPE %s gauge\n", name)
	pad := strings.Repeat("x", max(labelBytes, 1))
	for i := range n {
		fmt.Fprintf(&b, "%s{i=\"%d\",pad=\"%s\"} %d\n", name, i, pad, i)
	}
	return b.Bytes()
}

// Every bound on one answer, each answer just past it: the answer adds
// nothing, the failure is counted and names the bound, and a healthy
// exporter beside it still delivers.
func TestAnswerOverBoundDroppedWhole(t *testing.T) {
	// 16 MiB and more of comment lines: cheap to parse, so the bytes are
	// what the bound meets.
	comments := bytes.Repeat([]byte("# "+strings.Repeat("c", 1000)+"\n"), maxBodyBytes/1000+1)
	var emptyMembers []byte
	for one := gzipped(t, nil); len(emptyMembers) <= maxBodyBytes; {
		emptyMembers = append(emptyMembers, one...)
	}
	// A dcgm series keeps only gpu_N_mig_M_: its labels are read, not kept.
	var dcgmLabels bytes.Buffer
	junk := strings.Repeat("j", 1100)
	for g := range maxGPUs {
		for m := range maxMIGID {
			fmt.Fprintf(&dcgmLabels, "DCGM_FI_DEV_GPU_TEMP{gpu=\"%d\",GPU_I_ID=\"%d\",junk=\"%s\"} 40\n", g, m, junk)
		}
	}
	cases := []struct {
		name  string
		pass  bool
		h     http.HandlerFunc
		bound string
	}{
		{"body over maxBodyBytes", false, answer200(comments, ""), "on the wire"},
		{"gzip bomb", false, answer200(gzipped(t, comments), "gzip"), "after inflating"},
		{"gzip over maxBodyBytes on the wire", false, answer200(emptyMembers, "gzip"), "on the wire"},
		{"endless body", false, func(w http.ResponseWriter, r *http.Request) {
			line := []byte("# " + strings.Repeat("e", 1000) + "\n")
			for r.Context().Err() == nil {
				if _, err := w.Write(line); err != nil {
					return
				}
			}
		}, "on the wire"},
		{"line over maxLineBytes", true, answer200(seriesBody("big", 1, maxLineBytes), ""), "line longer"},
		{"more series kept than maxSeries", true, answer200(seriesBody("many", maxSeries+1, 1), ""), "series kept"},
		{"labels over maxLabelBytes", false, answer200(dcgmLabels.Bytes(), ""), "names and labels"},
	}
	healthy := serve(t, "testdata/dcgm.txt")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			bad := server(t, tc.h)
			c := newTest(Options{URLs: []string{bad, healthy}, Passthrough: tc.pass, Timeout: 10 * time.Minute, Log: logs.logger()})
			b := metrics.Batch{Explain: true}
			c.Collect(t.Context(), &b)
			pts := b.Points
			for i, p := range pts {
				if b.Sources[i] == bad {
					t.Fatalf("%s from the answer over a bound was kept", p.Name())
				}
			}
			if got := toMap(pts); got["gpu_0_utilization_percentage"] != 97 {
				t.Errorf("the healthy exporter's series are missing beside it: %v", got)
			}
			if f := c.Failures(); f[bad] != 1 || f[healthy] != 0 {
				t.Errorf("failures %v, want 1 for the answer over a bound only", f)
			}
			if out := logs.String(); !strings.Contains(out, "dropped whole") || !strings.Contains(out, tc.bound) {
				t.Errorf("log does not report the bound %q:\n%s", tc.bound, out)
			}
		})
	}
}

// An exporter that always answers over a bound is reported once a run,
// not once a scrape, and counted every time.
func TestOverBoundReportedOnce(t *testing.T) {
	var logs logBuffer
	u := server(t, answer200(seriesBody("many", maxSeries+1, 1), ""))
	c := newTest(Options{URLs: []string{u}, Passthrough: true, Log: logs.logger()})
	for range 3 {
		if got := points(t, c); len(got) != 0 {
			t.Fatalf("an answer over a bound gave %d points", len(got))
		}
	}
	if f := c.Failures(); f[u] != 3 {
		t.Errorf("failures %v, want 3", f)
	}
	if n := strings.Count(logs.String(), "dropped whole"); n != 1 {
		t.Errorf("reported %d times, want once:\n%s", n, logs.String())
	}
	// Within the bounds it is used again.
	ok := server(t, answer200(seriesBody("many", maxSeries, 1), ""))
	if got := points(t, newTest(Options{URLs: []string{ok}, Passthrough: true})); len(got) != maxSeries {
		t.Errorf("an answer at maxSeries gave %d points, want %d", len(got), maxSeries)
	}
}

// bridge asks for gzip itself and inflates it (counting): a gzip answer
// maps as the plain one does; an encoding it did not ask for is a failure.
func TestGzipAnswer(t *testing.T) {
	body, err := os.ReadFile("testdata/dcgm.txt")
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Value
	u := server(t, func(w http.ResponseWriter, r *http.Request) {
		asked.Store(r.Header.Get("Accept-Encoding"))
		answer200(gzipped(t, body), "gzip")(w, r)
	})
	got := points(t, newTest(Options{URLs: []string{u}}))
	if want := points(t, newTest(Options{URLs: []string{serve(t, "testdata/dcgm.txt")}})); !mapsEqual(got, want) {
		t.Errorf("gzip answer mapped to %v, plain to %v", got, want)
	}
	if a := asked.Load(); a != "gzip" {
		t.Errorf("Accept-Encoding %q, want gzip", a)
	}
	var logs logBuffer
	br := server(t, answer200(body, "br"))
	c := newTest(Options{URLs: []string{br}, Log: logs.logger()})
	if got := points(t, c); len(got) != 0 || c.Failures()[br] != 1 || !strings.Contains(logs.String(), "unsupported Content-Encoding") {
		t.Errorf("a br answer: points %v, failures %v, log:\n%s", got, c.Failures(), logs.String())
	}
}

// The answer is parsed a chunk at a time: whatever the chunk boundaries
// cut (a family, a histogram, a family without # TYPE), the points are
// those of the whole answer parsed at once.
func TestStreamedParseMatchesWholeParse(t *testing.T) {
	var b bytes.Buffer
	for f := range 40 {
		switch f % 4 {
		case 0:
			fmt.Fprintf(&b, "# HELP h%d a histogram\n# TYPE h%d histogram\n", f, f)
			for i := range 30 {
				fmt.Fprintf(&b, "h%d_bucket{i=\"%d\",le=\"1\"} 1\nh%d_bucket{i=\"%d\",le=\"+Inf\"} 2\nh%d_sum{i=\"%d\"} 3\nh%d_count{i=\"%d\"} 2\n", f, i, f, i, f, i, f, i)
			}
		case 1:
			for i := range 40 { // no # TYPE: untyped
				fmt.Fprintf(&b, "u%d{i=\"%d\"} %d.5\n", f, i, i)
			}
		case 2:
			fmt.Fprintf(&b, "# TYPE s%d summary\n", f)
			for i := range 30 {
				fmt.Fprintf(&b, "s%d{i=\"%d\",quantile=\"0.5\"} 1\ns%d_sum{i=\"%d\"} 3\ns%d_count{i=\"%d\"} 2\n", f, i, f, i, f, i)
			}
		default:
			fmt.Fprintf(&b, "# HELP g%d a gauge\n# TYPE g%d counter\n", f, f)
			for i := range 40 {
				fmt.Fprintf(&b, "g%d{i=\"%d\",pad=\"%s\"} %d\n", f, i, strings.Repeat("p", i*5), i)
			}
		}
	}
	body := b.Bytes()
	if len(body) < 4*chunkBytes {
		t.Fatalf("body of %d bytes spans too few chunks", len(body))
	}
	c := newTest(Options{URLs: []string{server(t, answer200(body, ""))}, Passthrough: true})
	got := points(t, c)

	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	whole := &answer{c: c, t: &target{}, seen: map[unique.Handle[string]]*metrics.Desc{}}
	if err := whole.add(fams); err != nil {
		t.Fatal(err)
	}
	want := toMap(whole.points)
	if len(want) != 20*40 || !mapsEqual(got, want) {
		t.Errorf("streamed: %d points, whole: %d points (want %d); they differ: %v", len(got), len(want), 20*40, diff(got, want))
	}
}

// No label an exporter sends can inflate the key space: the gpu label is
// a GPU index below maxGPUs, GPU_I_ID a MIG id below maxMIGID (a slice's
// series never counts as its GPU's), and no key is longer than
// maxKeyLength, whatever the name or labels.
func TestExporterCannotInflateKeys(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n")
	for _, gpu := range []string{"0", "31", "32", "1000000", "-1", "1e3", "0x1", " 1", "", "99999999999999999999999"} {
		fmt.Fprintf(&b, "DCGM_FI_DEV_GPU_TEMP{gpu=%q} 40\n", gpu)
	}
	b.WriteString("# TYPE DCGM_FI_DEV_FB_USED gauge\n")
	for _, mig := range []string{"7", "31", "32", "1000000", "x", "-1"} {
		fmt.Fprintf(&b, "DCGM_FI_DEV_FB_USED{gpu=\"1\",GPU_I_ID=%q} 1\n", mig)
	}
	long := "DCGM_FI_PROF_" + strings.Repeat("A", 300)
	fmt.Fprintf(&b, "# TYPE %s gauge\n%s{gpu=\"0\"} 0.5\n", long, long)
	fmt.Fprintf(&b, "# TYPE app gauge\napp{l=%q} 1\napp{l=\"short\"} 2\n", strings.Repeat("v", 300))
	var logs logBuffer
	got := points(t, newTest(Options{URLs: []string{server(t, answer200(b.Bytes(), ""))}, Passthrough: true, Log: logs.logger()}))
	want := map[string]float64{
		"gpu_0_temperature_celsius": 40, "gpu_31_temperature_celsius": 40,
		"gpu_1_mig_7_memory_used_megabytes": 1 * (1 << 20) / 1e6, "gpu_1_mig_31_memory_used_megabytes": 1 * (1 << 20) / 1e6,
		"prom_app__l_short": 2,
	}
	if !mapsEqual(got, want) {
		t.Errorf("keys %v, want only %v: %v", got, want, diff(got, want))
	}
	if n := strings.Count(logs.String(), "longer than MLflow takes"); n != 1 {
		t.Errorf("keys over maxKeyLength reported %d times, want once:\n%s", n, logs.String())
	}
}

// An exporter whose label values change at every answer adds at most
// maxKeys keys over the run; the keys it had already added still come
// through, and it is reported once.
func TestKeySpaceBoundedOverRun(t *testing.T) {
	var n atomic.Int64
	u := server(t, func(w http.ResponseWriter, _ *http.Request) {
		k := n.Add(1)
		var b bytes.Buffer
		b.WriteString("# TYPE churn gauge\nstable 1\n")
		for i := range maxSeries - 1 {
			fmt.Fprintf(&b, "churn{answer=\"%d\",i=\"%d\"} 1\n", k, i)
		}
		w.Write(b.Bytes())
	})
	var logs logBuffer
	c := newTest(Options{URLs: []string{u}, Passthrough: true, Log: logs.logger()})
	all := map[string]bool{}
	answers := maxKeys/(maxSeries-1) + 3
	for i := range answers {
		got := points(t, c)
		if got["prom_stable"] != 1 {
			t.Fatalf("answer %d: a key added before is missing", i+1)
		}
		for k := range got {
			all[k] = true
		}
	}
	if len(all) != maxKeys {
		t.Errorf("%d distinct keys over %d answers, want maxKeys (%d)", len(all), answers, maxKeys)
	}
	if n := strings.Count(logs.String(), "new keys left out"); n != 1 {
		t.Errorf("reported %d times, want once:\n%s", n, logs.String())
	}
}

// A redirect within the URL's origin is followed (at most maxRedirects
// times); one to another host is not, and that host gets no request.
func TestRedirects(t *testing.T) {
	body, _ := os.ReadFile("testdata/dcgm.txt")
	var otherHits atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		otherHits.Add(1)
		w.Write(body)
	}))
	t.Cleanup(other.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/metrics", http.StatusMovedPermanently)
		case "/other-host":
			http.Redirect(w, r, other.URL+"/metrics", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		default:
			w.Write(body)
		}
	}))
	t.Cleanup(srv.Close)

	if got := points(t, newTest(Options{URLs: []string{srv.URL + "/moved"}})); got["gpu_0_utilization_percentage"] != 97 {
		t.Errorf("same-origin redirect not followed: %v", got)
	}
	for _, path := range []string{"/other-host", "/loop"} {
		var logs logBuffer
		u := srv.URL + path
		c := newTest(Options{URLs: []string{u}, Log: logs.logger()})
		if got := points(t, c); len(got) != 0 || c.Failures()[u] != 1 || !strings.Contains(logs.String(), errRedirect.Error()) {
			t.Errorf("%s: points %v, failures %v, log:\n%s", path, got, c.Failures(), logs.String())
		}
	}
	if n := otherHits.Load(); n != 0 {
		t.Errorf("the other host got %d requests through a redirect", n)
	}
}

// A URL's password and token never appear where bridge shows a URL: the
// warnings of every failure, the failure counts (/metrics' url label), the
// points' source (`bridge sample`) and Detect.
func TestURLSecretsNeverShown(t *testing.T) {
	const pw, tok = "s3cretpw", "t0kval"
	withSecrets := func(u string) string {
		return strings.Replace(u, "http://", "http://user:"+pw+"@", 1) + "?token=" + tok
	}
	body, _ := os.ReadFile("testdata/dcgm.txt")
	other := server(t, answer200(body, ""))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/status":
			http.Error(w, "no", http.StatusInternalServerError)
		case "/other-host":
			http.Redirect(w, r, withSecrets(strings.TrimSuffix(other, "/metrics")+"/x"), http.StatusFound)
		case "/big":
			w.Write(seriesBody("many", maxSeries+1, 1))
		default:
			w.Write(body)
		}
	}))
	t.Cleanup(srv.Close)
	refused := httptest.NewServer(http.NotFoundHandler())
	refused.Close()
	urls := []string{
		withSecrets(srv.URL + "/metrics"), withSecrets(srv.URL + "/status"), withSecrets(srv.URL + "/other-host"),
		withSecrets(srv.URL + "/big"), withSecrets(refused.URL + "/metrics"),
	}
	var logs logBuffer
	c := newTest(Options{URLs: urls, Passthrough: true, Log: logs.logger()})
	b := metrics.Batch{Explain: true}
	c.Collect(t.Context(), &b)
	pts := b.Points
	var shown strings.Builder
	fmt.Fprintln(&shown, logs.String(), c.Failures(), c.Detect(t.Context()))
	for _, src := range b.Sources {
		fmt.Fprintln(&shown, src)
	}
	out := shown.String()
	if strings.Contains(out, pw) || strings.Contains(out, tok) {
		t.Fatalf("a secret is shown:\n%s", out)
	}
	if len(pts) == 0 || !strings.Contains(out, "user:***@") || !strings.Contains(out, "token=***") {
		t.Errorf("the URLs are not shown redacted (%d points):\n%s", len(pts), out)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 4 {
		t.Errorf("%d warnings, want one per failing URL (4):\n%s", n, logs.String())
	}
}

func toMap(pts []metrics.Point) map[string]float64 {
	out := make(map[string]float64, len(pts))
	for _, p := range pts {
		out[p.Name()] = p.Value
	}
	return out
}

func mapsEqual(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// diff lists the keys whose values differ, at most 10.
func diff(a, b map[string]float64) []string {
	var out []string
	for k := range a {
		if v, ok := b[k]; !ok || v != a[k] {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out[:min(len(out), 10)]
}
