package config

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestPrometheusOptions(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MetricsAddr != "" || c.Scrape != nil || c.ScrapePassthrough || c.ScrapeTimeout.String() != "2s" {
		t.Fatalf("defaults: addr %q scrape %v passthrough %v timeout %v", c.MetricsAddr, c.Scrape, c.ScrapePassthrough, c.ScrapeTimeout)
	}
	for in, want := range map[string]string{"9464": "127.0.0.1:9464", ":9464": ":9464", "0.0.0.0:9464": "0.0.0.0:9464", "[::1]:9": "[::1]:9"} {
		c, err := load(t, []string{"--metrics-addr=" + in}, nil)
		if err != nil || c.MetricsAddr != want {
			t.Errorf("--metrics-addr=%s: %q, %v; want %q", in, c.MetricsAddr, err, want)
		}
	}
	c, err = load(t, []string{"--scrape=http://a:9400/metrics", "--scrape", "http://b:9100/metrics", "--scrape-include=^DCGM_", "--scrape-passthrough"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://a:9400/metrics", "http://b:9100/metrics"}; !reflect.DeepEqual(c.Scrape, want) {
		t.Errorf("repeated --scrape: %v, want %v", c.Scrape, want)
	}
	if c.ScrapeInclude == nil || !c.ScrapeInclude.MatchString("DCGM_FI_DEV_GPU_UTIL") || !c.ScrapePassthrough {
		t.Errorf("include %v passthrough %v", c.ScrapeInclude, c.ScrapePassthrough)
	}
	c, err = load(t, nil, map[string]string{"BRIDGE_SCRAPE": "http://a/m,http://b/m", "BRIDGE_METRICS_ADDR": "9100"})
	if err != nil || len(c.Scrape) != 2 || c.MetricsAddr != "127.0.0.1:9100" {
		t.Errorf("from the environment: %v %q %v", c.Scrape, c.MetricsAddr, err)
	}
}

func TestPrometheusBadValues(t *testing.T) {
	for _, tc := range []struct{ arg, mention string }{
		{"--metrics-addr=70000", "--metrics-addr"},
		{"--metrics-addr=localhost", "--metrics-addr"},
		{"--metrics-addr=host:http", "--metrics-addr"},
		{"--scrape=localhost:9400/metrics", "--scrape"},
		{"--scrape=ftp://x/metrics", "--scrape"},
		{"--scrape-include=(", "--scrape-include"},
		{"--scrape-exclude=[z-a]", "--scrape-exclude"},
		{"--scrape-timeout=1ms", "--scrape-timeout"},
	} {
		_, err := load(t, []string{tc.arg}, nil)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v, want a usage error naming %s", tc.arg, err, tc.mention)
		}
	}
}

// A --scrape URL that is refused never shows its password or token, from a
// flag, the environment or the file.
func TestPrometheusBadURLNotShown(t *testing.T) {
	const pw, tok = "s3cretpw", "t0kval"
	yamlList := func(s string) string {
		var q []string
		for _, e := range strings.Split(s, ",") {
			q = append(q, strconv.Quote(e))
		}
		return "[" + strings.Join(q, ", ") + "]"
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
			{[]string{"--config=" + writeFile(t, "scrape: "+yamlList(bad)+"\n")}, nil, "scrape (in "},
		} {
			_, err := loadErr(t, src.args, src.env)
			if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), src.name) {
				t.Errorf("%q from %s: %v, want a usage error naming it", bad, src.name, err)
				continue
			}
			if msg := err.Error(); strings.Contains(msg, pw) || strings.Contains(msg, tok) {
				t.Errorf("%q from %s: the message shows a secret: %s", bad, src.name, msg)
			}
		}
	}
}
