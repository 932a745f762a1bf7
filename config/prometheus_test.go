package config

import (
	"errors"
	"reflect"
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
