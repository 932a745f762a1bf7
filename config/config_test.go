package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func load(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	for _, k := range Keys() {
		t.Setenv(EnvName(k), "")
		os.Unsetenv(EnvName(k))
	}
	t.Setenv("BRIDGE_CONFIG", "")
	os.Unsetenv("BRIDGE_CONFIG")
	for k, v := range env {
		t.Setenv(k, v)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return Load(fs)
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bridge.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Interval != 10*time.Second {
		t.Errorf("interval = %v, want 10s (MLflow's default)", c.Interval)
	}
	if !reflect.DeepEqual(c.Scopes, AllScopes) {
		t.Errorf("scopes = %v, want all %v", c.Scopes, AllScopes)
	}
	if c.LogLevel != "info" || c.NoContainer || c.NodeID != "" || !reflect.DeepEqual(c.Trackers, []string{"auto"}) {
		t.Errorf("unexpected defaults: %+v", c)
	}
}

// Precedence: flag > env > file > default, checked key by key.
func TestPrecedence(t *testing.T) {
	file := writeFile(t, "interval: 30s\nnode-id: from-file\nlog-level: warn\nscopes: [node, container]\n")
	c, err := load(t, []string{"--interval=5s", "--config", file}, map[string]string{
		"BRIDGE_INTERVAL": "7s", "BRIDGE_NODE_ID": "from-env",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Interval != 5*time.Second {
		t.Errorf("interval = %v, want the flag's 5s", c.Interval)
	}
	if c.NodeID != "from-env" {
		t.Errorf("node id = %q, want the env's", c.NodeID)
	}
	if c.LogLevel != "warn" {
		t.Errorf("log level = %q, want the file's warn", c.LogLevel)
	}
	if !reflect.DeepEqual(c.Scopes, []string{"node", "container"}) {
		t.Errorf("scopes = %v, want the file's list", c.Scopes)
	}
	if c.ConfigFile != file {
		t.Errorf("config file = %q", c.ConfigFile)
	}
}

func TestConfigFromEnvVariable(t *testing.T) {
	file := writeFile(t, "no-container: true\n")
	c, err := load(t, nil, map[string]string{"BRIDGE_CONFIG": file})
	if err != nil {
		t.Fatal(err)
	}
	if !c.NoContainer {
		t.Error("BRIDGE_CONFIG file not read")
	}
}

// Each bad value is a usage error naming where it came from and the value.
func TestBadValues(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		env   map[string]string
		file  string
		wants []string
	}{
		{"negative interval flag", []string{"--interval=-5s"}, nil, "", []string{"--interval", `"-5s"`}},
		{"interval env not a duration", nil, map[string]string{"BRIDGE_INTERVAL": "ten"}, "", []string{"BRIDGE_INTERVAL", `"ten"`, "duration"}},
		{"unknown scope", []string{"--scopes=node,gpuz"}, nil, "", []string{"--scopes", "gpuz", "known"}},
		{"unknown scope in env", nil, map[string]string{"BRIDGE_SCOPES": "cpu"}, "", []string{"BRIDGE_SCOPES", "cpu"}},
		{"bad log level", []string{"--log-level=loud"}, nil, "", []string{"--log-level", "loud"}},
		{"bad bool env", nil, map[string]string{"BRIDGE_NO_CONTAINER": "maybe"}, "", []string{"BRIDGE_NO_CONTAINER", "maybe"}},
		{"unknown file key", nil, nil, "intervall: 5s\n", []string{"unknown key", "intervall", "bridge.yaml"}},
		{"bad value in file", nil, nil, "interval: -1s\n", []string{"interval (in ", "bridge.yaml", `"-1s"`}},
		{"node id with slash", []string{"--node-id=a/b"}, nil, "", []string{"--node-id", "a/b"}},
		{"auto with mlflow", []string{"--trackers=auto,mlflow"}, nil, "", []string{"--trackers"}},
		{"proc root missing", nil, map[string]string{"BRIDGE_PROC_ROOT": "/nonexistent/proc"}, "", []string{"BRIDGE_PROC_ROOT", "/nonexistent/proc", "not a directory"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append(args, "--config", writeFile(t, tc.file))
			}
			_, err := load(t, args, tc.env)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrUsage) {
				t.Errorf("error does not wrap ErrUsage: %v", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestUnreadableConfigFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := load(t, nil, map[string]string{"BRIDGE_CONFIG": missing})
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "BRIDGE_CONFIG") || !strings.Contains(err.Error(), missing) {
		t.Fatalf("err = %v, want a usage error naming BRIDGE_CONFIG and the path", err)
	}
}
