package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
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

// The toy tracker: a package's worth of tracker, posting each sample as a
// JSON object of its points to the URL in its own variable, TOY_URL.
type toySink struct{ url string }

func (s *toySink) Name() string { return "toy" }

func (s *toySink) Start(context.Context, tracker.StartInfo) ([]string, error) {
	return []string{"TOY_RUN_ID=toy-run"}, nil
}

func (s *toySink) Run() tracker.RunInfo { return tracker.RunInfo{ID: "toy-run"} }

func (s *toySink) Send(ctx context.Context, samples []metrics.Sample) (int, error) {
	for i, smp := range samples {
		points := map[string]float64{}
		for _, p := range smp.Points {
			points[p.Name()] = p.Value
		}
		body, _ := json.Marshal(map[string]any{"step": smp.Seq, "points": points})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
		if err != nil {
			return i, tracker.Permanent(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return i, err
		}
		resp.Body.Close()
	}
	return len(samples), nil
}

func (s *toySink) Finish(context.Context, tracker.EndInfo) error { return nil }

// docs/architecture.md's recipes, followed: a toy collector and a toy
// tracker, each in one registration, are asked for by --scopes and
// --trackers; the collector's series is spooled, exposed on /metrics and
// sent in the tracker's request, with nothing else changed. (The collector's
// recipe in full, `bridge sample` and the docs too: cmd/bridge's
// TestRecipeAddACollector.)
func TestRecipeAddACollectorAndATracker(t *testing.T) {
	regs := append(Collectors(), metrics.Registration{Name: "toy", Scopes: []metrics.Scope{"toy"}, Series: []*metrics.Desc{toyWidgets},
		Build: func(metrics.Env) (metrics.Collector, error) { return &toyCollector{}, nil }})
	ts := append(Trackers(), tracker.Registration{Name: "toy", RunIDEnv: "TOY_RUN_ID",
		Configured: func(getenv func(string) string) bool { return getenv("TOY_URL") != "" },
		Build:      func(b tracker.Build) (tracker.Sink, error) { return &toySink{url: b.Getenv("TOY_URL")}, nil }})
	bodies := make(chan string, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case bodies <- string(b):
		default:
		}
	}))
	t.Cleanup(srv.Close)
	t.Setenv("TOY_URL", srv.URL)

	spoolPath := filepath.Join(t.TempDir(), "spool.jsonl")
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	config.RegisterFlags(fs, ChoicesOf(regs, ts))
	args := []string{"--scopes", "toy", "--trackers", "toy", "--interval", "100ms", "--spool", spoolPath,
		"--metrics-addr", "127.0.0.1:0"}
	if err := config.Parse(fs, args); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(fs, ChoicesOf(regs, ts))
	if err != nil {
		t.Fatalf("--scopes toy --trackers toy: %v", err)
	}
	src, err := BuildSourcesOf(regs, cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if len(src.Collectors) != 1 || src.Collectors[0].Name() != "toy" {
		t.Fatalf("collectors %v, want the toy alone (--scopes toy)", src.Collectors)
	}
	sinks, off := ts.BuildSinks(cfg, Overrides{}, nil, quiet())
	if off != nil || len(sinks) != 1 || sinks[0].Name() != "toy" {
		t.Fatalf("sinks %v, off %v: want the toy alone (--trackers toy)", sinks, off)
	}
	// Under "auto" its registration's Configured turns it on (TOY_URL).
	for _, k := range []string{"MLFLOW_TRACKING_URI", "WANDB_API_KEY", "WANDB_PROJECT"} {
		t.Setenv(k, "")
	}
	auto := cfg
	auto.Trackers = []string{"auto"}
	if on, off := ts.BuildSinks(auto, Overrides{}, nil, quiet()); off != nil || len(on) != 1 || on[0].Name() != "toy" {
		t.Errorf("--trackers auto with TOY_URL set: sinks %v, off %v; want the toy", on, off)
	}
	started := StartSinksWith(context.Background(), sinks, tracker.StartInfo{}, StartPolicy{Timeout: cfg.StartTimeout}, quiet())
	s := Open(Options{Settings: cfg, Log: quiet(), Version: "test", Sources: src, Started: started})
	s.Run()
	defer s.Finish(tracker.EndInfo{})

	waitfor.Cond(t, deadline, "the toy's series in the toy tracker's request", func() bool {
		for {
			select {
			case b := <-bodies:
				if strings.Contains(b, `"toy_widgets_count":`) {
					return true
				}
			default:
				return false
			}
		}
	})

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
