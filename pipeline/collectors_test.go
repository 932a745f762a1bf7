package pipeline

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/metrics"
)

func TestCollectorsRegistration(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Collectors() {
		if c.Name == "" || seen[c.Name] || c.Build == nil || len(c.Series) == 0 {
			t.Errorf("registration %+v: want a unique name, its series and a Build", c)
		}
		seen[c.Name] = true
		for _, d := range c.Series {
			if sc := string(d.Scope); !slices.Contains(ScopesOf(Collectors()), sc) {
				t.Errorf("%s: series %s has scope %q, which no collector serves (--scopes could not turn it off)", c.Name, d.Name, sc)
			}
		}
	}
	// bridge's scopes, in this order among them: a collector added with
	// a scope of its own adds one, and changes none of these.
	scopes, at := ScopesOf(Collectors()), -1
	for _, sc := range []string{"container", "node", "rootfs", "netns", "process", "gpu"} {
		i := slices.Index(scopes, sc)
		if i <= at {
			t.Errorf("scopes %s: want %s, after the ones before it", strings.Join(scopes, ","), sc)
		}
		at = i
	}
}

// --scopes and --trackers take exactly the registered names: config
// checks them against Choices, which come from the registrations.
func TestChoicesAreTheRegistrations(t *testing.T) {
	load := func(args ...string) (config.Config, error) {
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		config.RegisterFlags(fs, Choices())
		if err := config.Parse(fs, args); err != nil {
			return config.Config{}, err
		}
		return config.Load(fs, Choices())
	}
	cfg, err := load()
	if err != nil || !slices.Equal(cfg.Scopes, ScopesOf(Collectors())) {
		t.Fatalf("defaults: scopes %v, %v; want every registered scope %v", cfg.Scopes, err, ScopesOf(Collectors()))
	}
	for _, sc := range ScopesOf(Collectors()) {
		if cfg, err := load("--scopes", sc); err != nil || !slices.Equal(cfg.Scopes, []string{sc}) {
			t.Errorf("--scopes %s: %v, %v", sc, cfg.Scopes, err)
		}
	}
	for _, tr := range Trackers().TrackerNames() {
		if cfg, err := load("--trackers", tr); err != nil || !slices.Equal(cfg.Trackers, []string{tr}) {
			t.Errorf("--trackers %s: %v, %v", tr, cfg.Trackers, err)
		}
	}
	for _, bad := range [][]string{{"--scopes", "toy"}, {"--trackers", "toy"}} {
		if _, err := load(bad...); err == nil {
			t.Errorf("%v accepted: not a registered name", bad)
		}
	}
}

// Every point a collector adds is one of the series its registration
// declares (docs/metrics.md is checked against those), on this machine's
// real /proc, cgroups and root filesystem, with a child to follow.
func TestCollectorsAddOnlyDeclaredSeries(t *testing.T) {
	cfg := config.Config{Scopes: ScopesOf(Collectors()), ProcRoot: "/proc", CgroupRoot: "/sys/fs/cgroup", Rootfs: "/", CollectTimeout: deadline}
	src, err := BuildSources(cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	src.SetChild(os.Getpid(), 0)
	points := 0
	for _, c := range src.Collectors {
		reg := registration(t, c.Name())
		for range 2 { // the second has the rates
			pts, err := collecttest.Collect(context.Background(), c)
			if err != nil {
				t.Logf("%s: %v", c.Name(), err)
			}
			for _, p := range pts {
				points++
				d := p.Desc
				if d.Of != nil {
					d = d.Of
				}
				if !slices.Contains(reg.Series, d) {
					t.Errorf("%s added %s, which its registration does not declare", c.Name(), p.Name())
				}
			}
		}
		if cl, ok := c.(metrics.Closer); ok {
			cl.Close()
		}
	}
	if points < 20 {
		t.Fatalf("%d points from %d collectors: too few to check", points, len(src.Collectors))
	}
}

func registration(t *testing.T, name string) metrics.Registration {
	t.Helper()
	for _, c := range Collectors() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("collector %s has no registration", name)
	return metrics.Registration{}
}
