// Package browser checks what a user sees: the MLflow UI, served by a real
// `mlflow server`, shows bridge's container_ and node_ series as charts on
// the run's System metrics tab. Headless Chromium (Debian's `chromium`) is
// driven by playwright-core (npm ci in this directory); the test skips
// when either, node or BRIDGE_TEST_PYTHON is missing.
//
// BRIDGE_UPDATE_SCREENSHOT=1 copies the screenshot to
// docs/mlflow-system-metrics.png.
package browser

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/internal/mlflowtest"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
)

const chromiumPath = "/usr/bin/chromium"

func TestMain(m *testing.M) { os.Exit(mlflowtest.Main(m)) }

// series are what the chart check expects, with plausible values for a pod
// with a 4 GB limit on a 64 GB node.
var series = []struct {
	name  string
	value func(step int) float64
}{
	{"container_memory_working_set_megabytes", func(i int) float64 { return 1200 + 230*float64(i) }},
	{"container_memory_limit_megabytes", func(int) float64 { return 4294.967296 }},
	{"container_cpu_utilization_percentage", func(i int) float64 { return []float64{35, 80, 160, 190, 175, 120}[i] }},
	{"node_memory_usage_megabytes", func(i int) float64 { return 41000 + 900*float64(i) }},
}

func TestSystemMetricsTab(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the browser test drives Chromium with playwright-core")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("%s not found: install Debian's chromium (apt-get install -y chromium) to run the browser test", chromiumPath)
	}
	if _, err := os.Stat("node_modules/playwright-core"); err != nil {
		t.Skip("e2e/browser/node_modules is missing: run `npm ci` in e2e/browser to run the browser test")
	}
	srv := mlflowtest.Shared(t)
	ctx := context.Background()

	// One experiment for every run of this test; the sink reuses it.
	const expName = "bridge-e2e-browser"
	sink, err := mlflow.New(mlflow.Config{TrackingURI: srv.URL, ExperimentName: expName},
		slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Start(ctx, tracker.StartInfo{Command: []string{"python", "train.py"}, RunName: "train.py"}); err != nil {
		t.Fatal(err)
	}
	// Steps 0..5, 10 s apart up to now: the UI draws a line only from step 1
	// on, against wall-clock time.
	const steps = 6
	start := time.Now().Add(-steps * 10 * time.Second)
	var samples []metrics.Sample
	for i := range steps {
		s := metrics.Sample{Seq: int64(i), Time: start.Add(time.Duration(i) * 10 * time.Second)}
		for _, sr := range series {
			s.Points = append(s.Points, metrics.Point{Name: sr.name, Value: sr.value(i)})
		}
		samples = append(samples, s)
	}
	if acked, err := sink.Send(ctx, samples); err != nil || acked != steps {
		t.Fatalf("Send = %d, %v", acked, err)
	}
	if err := sink.Finish(ctx, tracker.EndInfo{Time: time.Now()}); err != nil {
		t.Fatal(err)
	}

	var names []string
	for _, sr := range series {
		names = append(names, sr.name)
	}
	// go test -artifacts keeps the screenshots (and a .failed.png) for a look.
	out := filepath.Join(t.ArtifactDir(), "system-metrics.png")
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, node, "shot.mjs",
		"--url", srv.URL, "--experiment", sink.ExperimentID(), "--run", sink.RunID(),
		"--expect", strings.Join(names, ","), "--out", out, "--chromium", chromiumPath)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		t.Fatalf("node shot.mjs: %v\n%s", err, output.String())
	}
	t.Log(strings.TrimSpace(output.String()))

	png, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("%s is not a PNG", out)
	}
	if os.Getenv("BRIDGE_UPDATE_SCREENSHOT") == "1" {
		dst := filepath.Join("..", "..", "docs", "mlflow-system-metrics.png")
		if err := os.WriteFile(dst, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("updated %s", dst)
	}
}
