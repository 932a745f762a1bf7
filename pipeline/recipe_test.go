package pipeline

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/internal/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/spool/spooltest"
	"github.com/bridge-dev/bridge/tracker"
)

// The toy collector: a package's worth of collector, with a scope of its
// own and one series.
var toyWidgets = &metrics.Desc{Name: "toy_widgets_count", Unit: metrics.UnitCount, Scope: "toy",
	Help: "Widgets the toy collector counted."}

type toyCollector struct{ n int }

func (c *toyCollector) Name() string { return "toy" }

func (c *toyCollector) Collect(_ context.Context, b *metrics.Batch) error {
	c.n++
	b.Add(toyWidgets, float64(c.n), "toy counter")
	return nil
}

// register adds a registration for the test's duration, as a new
// collector's one entry in Collectors does.
func register(t *testing.T, c Collector) {
	old := Collectors
	Collectors = append(slices.Clone(old), c)
	t.Cleanup(func() { Collectors = old })
}

// docs/architecture.md's recipe, followed: a toy collector in one
// registration is asked for by --scopes, sampled, spooled and exposed on
// /metrics, with nothing else changed.
func TestRecipeAddACollector(t *testing.T) {
	register(t, Collector{Name: "toy", Scopes: []metrics.Scope{"toy"}, Series: []*metrics.Desc{toyWidgets},
		Build: func(CollectorBuild) (metrics.Collector, error) { return &toyCollector{}, nil }})

	spoolPath := filepath.Join(t.TempDir(), "spool.jsonl")
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	config.RegisterFlags(fs, Choices())
	args := []string{"--scopes", "toy", "--trackers", "none", "--interval", "100ms", "--spool", spoolPath,
		"--metrics-addr", "127.0.0.1:0"}
	if err := config.Parse(fs, args); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(fs, Choices())
	if err != nil {
		t.Fatalf("--scopes toy: %v", err)
	}
	src, err := BuildSources(cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if len(src.Collectors) != 1 || src.Collectors[0].Name() != "toy" {
		t.Fatalf("collectors %v, want the toy alone (--scopes toy)", src.Collectors)
	}
	s := Open(Options{Settings: SettingsFrom(cfg), Log: quiet(), Version: "test", Sources: src,
		Started: StartSinksWith(context.Background(), nil, tracker.StartInfo{}, StartPolicy{Timeout: cfg.StartTimeout}, quiet())})
	s.Run()
	defer s.Finish(tracker.EndInfo{})

	waitfor.Cond(t, deadline, "the toy's series in the spool", func() bool {
		ss, _, _, err := spooltest.ReadFile(spoolPath)
		if err != nil || len(ss) == 0 {
			return false
		}
		_, ok := ss[len(ss)-1].Value("toy_widgets_count")
		return ok
	})
	waitfor.Cond(t, deadline, "the toy's series on /metrics", func() bool {
		resp, err := http.Get("http://" + s.prom.Addr() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "# HELP bridge_toy_widgets_count "+toyWidgets.Help) &&
			strings.Contains(string(b), "bridge_toy_widgets_count{")
	})
}
