package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/config/option"
	"github.com/bridge-dev/bridge/docgen"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/snapshot"
	"github.com/bridge-dev/bridge/tracker"
)

// A toy collector, all of it here as a collector's package holds it: its
// scope, its series, an option with its check, and its registration.
const toyScope metrics.Scope = "toy"

var (
	toyWidgets = &metrics.Desc{Name: "toy_widgets_count", Unit: metrics.UnitCount, Scope: toyScope,
		Help: "Widgets the toy collector counted."}
	toyStart = &option.Of[int]{Key: "toy-start", Usage: "widgets counted before the first sample",
		Valid: func(n int) (int, error) {
			if n < 0 {
				return n, errors.New("must not be negative")
			}
			return n, nil
		}}
	toyRegistration = metrics.Registration{
		Name: "toy", Scopes: []metrics.Scope{toyScope}, Series: []*metrics.Desc{toyWidgets},
		Options: []option.Option{toyStart},
		Build: func(env metrics.Env) (metrics.Collector, error) {
			return &toyCollector{n: toyStart.Get(env.Options)}, nil
		},
	}
)

type toyCollector struct{ n int }

func (c *toyCollector) Name() string { return "toy" }

func (c *toyCollector) Collect(_ context.Context, b *metrics.Batch) error {
	c.n++
	b.Add(toyWidgets, float64(c.n), "toy counter")
	return nil
}

// docs/architecture.md's recipe, followed: a collector is its package plus
// one registration, and nothing else changes. Here the registration is
// added to bridge's (as its one line in pipeline.Collectors would): its
// scope and option are taken by the flags, and its series is in `bridge
// sample`, in the spool, on /metrics and in the generated docs.
func TestRecipeAddACollector(t *testing.T) {
	regs := append(pipeline.Collectors(), toyRegistration)

	// `bridge sample --json`, its option set: two Collects, 41 + 2.
	var out, errb bytes.Buffer
	if code := sample(regs, []string{"--json", "--scopes", "toy", "--toy-start", "41", "--window", "0"}, &out, &errb); code != 0 {
		t.Fatalf("bridge sample: exit %d\n%s", code, errb.String())
	}
	var got snapshot.Output
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(got.Metrics, func(p snapshot.Point) bool { return p.Name == toyWidgets.Name }); i < 0 ||
		got.Metrics[i].Value != 43.0 || got.Metrics[i].Scope != "toy" || got.Metrics[i].Unit != "count" {
		t.Errorf("bridge sample: %+v, want toy_widgets_count = 43 of scope toy", got.Metrics)
	}
	if len(got.Collectors) != 1 || got.Collectors[0].Name != "toy" || !got.Collectors[0].Success {
		t.Errorf("bridge sample's collectors: %+v, want the toy alone (--scopes toy), ok", got.Collectors)
	}
	// What the collectors detected: the toy, which detects nothing, has no
	// entry, and no entry is null (the toy runs wrapped in the scope filter,
	// --scopes toy of all).
	for name, v := range got.Detected {
		if v == nil {
			t.Errorf("bridge sample --json: detected %s is null", name)
		}
	}
	if v, ok := got.Detected["toy"]; ok {
		t.Errorf("bridge sample --json: detected toy = %v, want no entry", v)
	}
	// The same beside bridge's node and process collectors, each wrapped
	// too, one a Detector, the other not: none is null.
	out.Reset()
	errb.Reset()
	if code := sample(regs, []string{"--json", "--window", "0", "--scopes", "toy,node,process"}, &out, &errb); code != 0 {
		t.Fatalf("bridge sample: exit %d\n%s", code, errb.String())
	}
	var all snapshot.Output
	if err := json.Unmarshal(out.Bytes(), &all); err != nil {
		t.Fatal(err)
	}
	for name, v := range all.Detected {
		if v == nil {
			t.Errorf("bridge sample --json, --scopes toy,node,process: detected %s is null", name)
		}
	}
	if _, ok := all.Detected["node"].(map[string]any); !ok {
		t.Errorf("bridge sample --json, --scopes toy,node,process: detected node = %v, want what it found", all.Detected["node"])
	}
	// Its option is checked as bridge's own are: a usage error naming it.
	errb.Reset()
	if code := sample(regs, []string{"--scopes", "toy", "--toy-start", "-1"}, io.Discard, &errb); code != exitUsage ||
		!strings.Contains(errb.String(), "--toy-start") {
		t.Errorf("--toy-start -1: exit %d, %s; want a usage error naming it", code, errb.String())
	}

	// A job's session: the spool and /metrics.
	spoolPath := filepath.Join(t.TempDir(), "spool.jsonl")
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	config.RegisterFlags(fs, pipeline.ChoicesOf(regs, pipeline.Trackers()))
	if err := config.Parse(fs, []string{"--scopes", "toy", "--trackers", "none", "--interval", "100ms", "--spool", spoolPath,
		"--metrics-addr", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(fs, pipeline.ChoicesOf(regs, pipeline.Trackers()))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	src, err := pipeline.BuildSourcesOf(regs, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	s := pipeline.Open(pipeline.Options{Settings: cfg, Log: log, Version: "test", Sources: src})
	s.Run()
	defer s.Finish(tracker.EndInfo{})
	waitfor.Cond(t, 30*time.Second, "the toy's series in the spool", func() bool {
		ss, _, _, err := spooltest.ReadFile(spoolPath)
		if err != nil || len(ss) == 0 {
			return false
		}
		_, ok := ss[len(ss)-1].Value(toyWidgets.Name)
		return ok
	})
	waitfor.Cond(t, 30*time.Second, "the toy's series on /metrics", func() bool {
		resp, err := http.Get("http://" + s.MetricsAddr() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "# HELP bridge_toy_widgets_count "+toyWidgets.Help) &&
			strings.Contains(string(b), "bridge_toy_widgets_count{")
	})

	// The docs: a table of its own in docs/metrics.md, from its descriptor
	// (it has no Docs of its own, nor a place in the page), and its option
	// in the README's flag table.
	files, err := docgen.Files("../..", regs, pipeline.ChoicesOf(regs, pipeline.Trackers()))
	if err != nil {
		t.Fatal(err)
	}
	if page := string(files[docgen.MetricsPage]); !strings.Contains(page, "### `toy`") ||
		!strings.Contains(page, "| `toy_widgets_count` | count | Widgets the toy collector counted. |") {
		t.Errorf("docs/metrics.md as generated has no row of the toy's series")
	}
	if readme := string(files[docgen.Readme]); !strings.Contains(readme, "| `--toy-start` | `BRIDGE_TOY_START` | `0` | widgets counted before the first sample |") {
		t.Errorf("README.md as generated has no row of --toy-start")
	}
}
