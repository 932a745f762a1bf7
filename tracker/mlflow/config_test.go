package mlflow

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func envFunc(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeCredentials(t *testing.T, content string) string {
	t.Helper()
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".mlflow"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".mlflow", "credentials"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return home
}

func TestConfigFromEnvNotHTTP(t *testing.T) {
	for _, uri := range []string{"", "sqlite:///mlflow.db", "file:///tmp/mlruns", "./mlruns", "/abs/mlruns", "databricks", "http://", "https://:80",
		"ftp://user:hunter2@host/x", "postgresql://u:hunter2@db/mlflow", "http://u:hunter2@"} {
		t.Run(uri, func(t *testing.T) {
			cfg, _, err := ConfigFromEnv(envFunc(map[string]string{EnvTrackingURI: uri, EnvRunID: "abc"}), t.TempDir())
			if !errors.Is(err, ErrNotHTTP) {
				t.Fatalf("err = %v, want ErrNotHTTP", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "mlflow server") || !strings.Contains(msg, EnvTrackingURI) {
				t.Errorf("message %q should say bridge needs `mlflow server` and name %s", msg, EnvTrackingURI)
			}
			// What to do: a store a server can serve is named in the
			// command that serves it.
			if strings.Contains(uri, "sqlite") && !strings.Contains(msg, "mlflow server --backend-store-uri sqlite:///mlflow.db") {
				t.Errorf("message %q does not say how to serve %s", msg, uri)
			}
			if strings.Contains(msg, "hunter2") {
				t.Errorf("message leaks the password: %q", msg)
			}
			if cfg.RunID != "abc" {
				t.Errorf("RunID = %q: the rest of the config should still be read", cfg.RunID)
			}
		})
	}
}

func TestConfigFromEnv(t *testing.T) {
	const uri = "http://127.0.0.1:5000"
	tests := []struct {
		name  string
		env   map[string]string
		creds string // ~/.mlflow/credentials, "" for none
		want  Config
	}{
		{
			name: "uri only, trailing slash removed",
			env:  map[string]string{EnvTrackingURI: uri + "/"},
			want: Config{TrackingURI: uri, Timeout: DefaultTimeout},
		},
		{
			name: "https with path prefix",
			env:  map[string]string{EnvTrackingURI: "https://mlflow.example.com/tracking/"},
			want: Config{TrackingURI: "https://mlflow.example.com/tracking", Timeout: DefaultTimeout},
		},
		{
			name: "everything from the environment",
			env: map[string]string{
				EnvTrackingURI: uri, EnvToken: "tok", EnvUsername: "u", EnvPassword: "p",
				EnvInsecureTLS: "True", EnvClientCertPath: "/c.pem", EnvRunID: " r1 ",
				EnvExperimentName: "exp", EnvExperimentID: "7", EnvRequestTimeout: "30",
			},
			want: Config{
				TrackingURI: uri, Token: "tok", Username: "u", Password: "p", InsecureTLS: true,
				ClientCertPath: "/c.pem", RunID: "r1", ExperimentName: "exp", ExperimentID: "7", Timeout: 30 * time.Second,
			},
		},
		{
			name: "insecure 0",
			env:  map[string]string{EnvTrackingURI: uri, EnvInsecureTLS: "0"},
			want: Config{TrackingURI: uri, Timeout: DefaultTimeout},
		},
		{
			name:  "credentials file",
			env:   map[string]string{EnvTrackingURI: uri},
			creds: "[default]\nmlflow_tracking_username = other\n\n[mlflow]\n# comment\nMLFLOW_TRACKING_USERNAME = fileuser\nmlflow_tracking_password: filepass\n",
			want:  Config{TrackingURI: uri, Username: "fileuser", Password: "filepass", Timeout: DefaultTimeout},
		},
		{
			name:  "environment wins over the file, variable by variable",
			env:   map[string]string{EnvTrackingURI: uri, EnvUsername: "envuser"},
			creds: "[mlflow]\nmlflow_tracking_username=fileuser\nmlflow_tracking_password=filepass\n",
			want:  Config{TrackingURI: uri, Username: "envuser", Password: "filepass", Timeout: DefaultTimeout},
		},
		{
			name:  "file without an mlflow section",
			env:   map[string]string{EnvTrackingURI: uri, EnvToken: "tok"},
			creds: "[other]\nmlflow_tracking_username=x\n",
			want:  Config{TrackingURI: uri, Token: "tok", Timeout: DefaultTimeout},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			if tc.creds != "" {
				home = writeCredentials(t, tc.creds)
			}
			got, ignored, err := ConfigFromEnv(envFunc(tc.env), home)
			if err != nil || len(ignored) != 0 {
				t.Fatal(err, ignored)
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// MLflow's variables never stop the job: one the sink cannot post
// without is the error (the sink is off, the job runs), worded with what to
// do; one bridge can do without is left out, with one line naming it and
// what bridge uses instead.
func TestConfigFromEnvUnusable(t *testing.T) {
	const uri = "https://127.0.0.1:5000"
	tests := []struct {
		name    string
		env     map[string]string
		creds   string
		off     bool     // the sink cannot be used
		names   []string // what the message must name
		changed func(Config) bool
	}{
		{"insecure with CA bundle", map[string]string{EnvTrackingURI: uri, EnvInsecureTLS: "true", EnvServerCertPath: "/ca.pem"},
			"", true, []string{EnvInsecureTLS, EnvServerCertPath, "unset one"}, nil},
		{"token with a newline", map[string]string{EnvTrackingURI: uri, EnvToken: "tok\nen"}, "", true, []string{EnvToken, "control character"}, nil},
		{"bad boolean", map[string]string{EnvTrackingURI: uri, EnvInsecureTLS: "yes"}, "", false, []string{EnvInsecureTLS, `"yes"`, "verified"},
			func(c Config) bool { return !c.InsecureTLS }},
		{"bad timeout", map[string]string{EnvTrackingURI: uri, EnvRequestTimeout: "1.5"}, "", false, []string{EnvRequestTimeout, "2m0s"},
			func(c Config) bool { return c.Timeout == DefaultTimeout }},
		{"zero timeout", map[string]string{EnvTrackingURI: uri, EnvRequestTimeout: "0"}, "", false, []string{EnvRequestTimeout},
			func(c Config) bool { return c.Timeout == DefaultTimeout }},
		{"broken credentials file", map[string]string{EnvTrackingURI: uri, EnvToken: "t"}, "[mlflow\n", false, []string{"credentials", "line 1", "not used"},
			func(c Config) bool { return c.Token == "t" && c.Username == "" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			if tc.creds != "" {
				home = writeCredentials(t, tc.creds)
			}
			cfg, ignored, err := ConfigFromEnv(envFunc(tc.env), home)
			msg := strings.Join(ignored, "\n")
			switch {
			case tc.off && err == nil:
				t.Fatal("no error")
			case tc.off:
				msg = err.Error()
			case err != nil:
				t.Fatalf("error %v: bridge can do without this value", err)
			case len(ignored) != 1:
				t.Fatalf("%d lines about it, want 1: %q", len(ignored), ignored)
			}
			if errors.Is(err, ErrNotHTTP) {
				t.Fatalf("err %v wraps ErrNotHTTP for an http URI", err)
			}
			for _, n := range tc.names {
				if !strings.Contains(msg, n) {
					t.Errorf("%q does not name %s", msg, n)
				}
			}
			if tc.changed != nil && !tc.changed(cfg) {
				t.Errorf("config %+v: the value is not replaced as the line says", cfg)
			}
			if !tc.off {
				if _, err := New(cfg, nil); err != nil {
					t.Errorf("New refuses what ConfigFromEnv made usable: %v", err)
				}
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"not http", Config{TrackingURI: "sqlite:///x.db"}, "mlflow server"},
		{"slash in node id", Config{TrackingURI: "http://127.0.0.1:1", NodeID: "a/b"}, "node id"},
		{"node id ..", Config{TrackingURI: "http://127.0.0.1:1", NodeID: ".."}, "node id"},
		{"missing CA bundle", Config{TrackingURI: "https://127.0.0.1:1", ServerCertPath: "/nonexistent/ca.pem"}, "/nonexistent/ca.pem"},
		{"missing client cert", Config{TrackingURI: "https://127.0.0.1:1", ClientCertPath: "/nonexistent/c.pem"}, EnvClientCertPath},
		// Read in bounded time and memory (internal/kfile).
		{"CA bundle /dev/zero", Config{TrackingURI: "https://127.0.0.1:1", ServerCertPath: "/dev/zero"}, EnvServerCertPath + ": /dev/zero: not a regular file"},
		{"CA bundle FIFO", Config{TrackingURI: "https://127.0.0.1:1", ServerCertPath: fifo}, fifo + ": not a regular file"},
		{"client cert FIFO", Config{TrackingURI: "https://127.0.0.1:1", ClientCertPath: fifo}, EnvClientCertPath},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}
