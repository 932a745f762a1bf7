package scrape

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/config/option"
)

// load loads the configuration with the collector's options, as bridge
// does with its registration's.
func load(t *testing.T, args []string, env map[string]string) (option.Values, error) {
	t.Helper()
	ch := config.Choices{Scopes: []string{"node"}, Options: Registration.Options}
	for _, k := range append(config.Keys(ch), "CONFIG") {
		t.Setenv(config.EnvName(k), "")
		os.Unsetenv(config.EnvName(k))
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	config.RegisterFlags(fs, ch)
	if err := config.Parse(fs, args); err != nil {
		return nil, err
	}
	c, err := config.Load(fs, ch)
	return c.Options, err
}

func TestOptions(t *testing.T) {
	o, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(URLs.Get(o)) != 0 || Include.Get(o) != nil || Exclude.Get(o) != nil || Passthrough.Get(o) || Timeout.Get(o).String() != "2s" {
		t.Fatalf("defaults: %v", o)
	}
	o, err = load(t, []string{"--scrape=http://a:9400/metrics", "--scrape", "http://b:9100/metrics", "--scrape-include=^DCGM_", "--scrape-passthrough"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://a:9400/metrics", "http://b:9100/metrics"}; !reflect.DeepEqual(URLs.Get(o), want) {
		t.Errorf("repeated --scrape: %v, want %v", URLs.Get(o), want)
	}
	if in := Include.Get(o); in == nil || !in.MatchString("DCGM_FI_DEV_GPU_UTIL") || !Passthrough.Get(o) {
		t.Errorf("include %v passthrough %v", in, Passthrough.Get(o))
	}
	o, err = load(t, nil, map[string]string{"BRIDGE_SCRAPE": "http://a/m,http://b/m", "BRIDGE_SCRAPE_TIMEOUT": "5s"})
	if err != nil || len(URLs.Get(o)) != 2 || Timeout.Get(o).String() != "5s" {
		t.Errorf("from the environment: %v %v", o, err)
	}
}

func TestBadOptions(t *testing.T) {
	for _, tc := range []struct{ arg, mention string }{
		{"--scrape=localhost:9400/metrics", "--scrape"},
		{"--scrape=ftp://x/metrics", "--scrape"},
		{"--scrape-include=(", "--scrape-include"},
		{"--scrape-exclude=[z-a]", "--scrape-exclude"},
		{"--scrape-timeout=1ms", "--scrape-timeout"},
		{"--scrape-timeout=1h", "--scrape-timeout"},
		{"--scrape-passthrough=sometimes", "--scrape-passthrough"},
	} {
		_, err := load(t, []string{tc.arg}, nil)
		if !errors.Is(err, config.ErrUsage) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v, want a usage error naming %s", tc.arg, err, tc.mention)
		}
	}
}

// A --scrape URL that is refused never shows its password or token, from a
// flag, the environment or the file.
func TestBadURLNotShown(t *testing.T) {
	const pw, tok = "s3cretpw", "t0kval"
	yamlList := func(s string) string {
		var q []string
		for _, e := range strings.Split(s, ",") {
			q = append(q, strconv.Quote(e))
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	file := func(body string) string {
		p := filepath.Join(t.TempDir(), "bridge.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, bad := range []string{
		"ftp://user:" + pw + "@x/metrics?token=" + tok,
		"http://user:" + pw + "@x/metrics?token=" + tok + "\x01",
		"localhost:9400/metrics?token=" + tok,
		"http://user:" + pw + "@x/metrics?token=" + tok + ",ftp://y/?api_key=" + tok,
	} {
		for _, src := range []struct {
			args []string
			env  map[string]string
			name string
		}{
			{[]string{"--scrape=" + bad}, nil, "--scrape"},
			{nil, map[string]string{"BRIDGE_SCRAPE": bad}, "BRIDGE_SCRAPE"},
			{[]string{"--config=" + file("scrape: "+yamlList(bad)+"\n")}, nil, "scrape (in "},
		} {
			_, err := load(t, src.args, src.env)
			if !errors.Is(err, config.ErrUsage) || !strings.Contains(err.Error(), src.name) {
				t.Errorf("%q from %s: %v, want a usage error naming it", bad, src.name, err)
				continue
			}
			if msg := err.Error(); strings.Contains(msg, pw) || strings.Contains(msg, tok) {
				t.Errorf("%q from %s: the message shows a secret: %s", bad, src.name, msg)
			}
		}
	}
}
