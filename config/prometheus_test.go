package config

import (
	"errors"
	"strings"
	"testing"
)

func TestPrometheusOptions(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MetricsAddr != "" {
		t.Fatalf("defaults: addr %q", c.MetricsAddr)
	}
	for in, want := range map[string]string{"9464": "127.0.0.1:9464", ":9464": ":9464", "0.0.0.0:9464": "0.0.0.0:9464", "[::1]:9": "[::1]:9"} {
		c, err := load(t, []string{"--metrics-addr=" + in}, nil)
		if err != nil || c.MetricsAddr != want {
			t.Errorf("--metrics-addr=%s: %q, %v; want %q", in, c.MetricsAddr, err, want)
		}
	}
	c, err = load(t, nil, map[string]string{"BRIDGE_METRICS_ADDR": "9100"})
	if err != nil || c.MetricsAddr != "127.0.0.1:9100" {
		t.Errorf("from the environment: %q %v", c.MetricsAddr, err)
	}
}

func TestPrometheusBadValues(t *testing.T) {
	for _, tc := range []struct{ arg, mention string }{
		{"--metrics-addr=70000", "--metrics-addr"},
		{"--metrics-addr=localhost", "--metrics-addr"},
		{"--metrics-addr=host:http", "--metrics-addr"},
	} {
		_, err := load(t, []string{tc.arg}, nil)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v, want a usage error naming %s", tc.arg, err, tc.mention)
		}
	}
}
