package pipeline

import (
	"errors"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/config"
)

func TestTrackersRegistration(t *testing.T) {
	seen := map[string]bool{}
	for _, tr := range Trackers {
		if tr.Name == "" || tr.RunIDEnv == "" || tr.Build == nil || tr.Configured == nil || seen[tr.Name] || tr.Name == "auto" || tr.Name == "none" {
			t.Errorf("registration %+v: want a unique name (not auto or none), a run variable, Configured and a Build", tr)
		}
		seen[tr.Name] = true
		if got, ok := Registered(tr.Name); !ok || got.Name != tr.Name {
			t.Errorf("Registered(%q) = %+v, %v", tr.Name, got, ok)
		}
	}
}

// A tracker's malformed variable is a usage error naming it, through its
// registration's CheckEnv; a store bridge cannot post to is a choice, not
// an error, and no URI is shown with its password.
func TestCheckTrackerEnv(t *testing.T) {
	for _, tc := range []struct{ name, val string }{
		{"MLFLOW_TRACKING_URI", "http://"},
		{"MLFLOW_TRACKING_URI", "https:///x"},
		{"MLFLOW_SYSTEM_METRICS_NODE_ID", "a/b"},
	} {
		err := CheckTrackerEnv(func(k string) string { return map[string]string{tc.name: tc.val}[k] })
		if !errors.Is(err, config.ErrUsage) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s=%q: err = %v, want a usage error naming the variable", tc.name, tc.val, err)
		}
	}
	for _, ok := range []string{"", "sqlite:///mlflow.db", "http://mlflow:5000"} {
		if err := CheckTrackerEnv(func(k string) string { return map[string]string{"MLFLOW_TRACKING_URI": ok}[k] }); err != nil {
			t.Errorf("MLFLOW_TRACKING_URI=%q: %v", ok, err)
		}
	}
	err := CheckTrackerEnv(func(k string) string { return map[string]string{"MLFLOW_TRACKING_URI": "http://u:hunter22@"}[k] })
	if err == nil || strings.Contains(err.Error(), "hunter22") {
		t.Errorf("err = %v: want an error without the password", err)
	}
}

func TestBuildSinksFromEnvironment(t *testing.T) {
	for _, k := range []string{"MLFLOW_TRACKING_URI", "WANDB_API_KEY", "WANDB_PROJECT", "WANDB_MODE", "HOME"} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", t.TempDir()) // no ~/.netrc
	tests := []struct {
		name     string
		trackers []string
		env      map[string]string
		want     string // sink names, or the error's text
	}{
		{"none", []string{"none"}, map[string]string{"MLFLOW_TRACKING_URI": "http://127.0.0.1:1"}, ""},
		{"auto, nothing configured", []string{"auto"}, nil, ""},
		{"auto, mlflow over HTTP", []string{"auto"}, map[string]string{"MLFLOW_TRACKING_URI": "http://127.0.0.1:1"}, "mlflow"},
		{"auto, mlflow on a file store", []string{"auto"}, map[string]string{"MLFLOW_TRACKING_URI": "file:///tmp/mlruns"}, ""},
		{"explicit mlflow, not configured", []string{"mlflow"}, nil, "error: --trackers=mlflow needs MLFLOW_TRACKING_URI"},
		{"explicit wandb without key", []string{"wandb"}, map[string]string{"WANDB_PROJECT": "p"}, "error: --trackers=wandb needs an API key"},
		{"auto, wandb project without key", []string{"auto"}, map[string]string{"WANDB_PROJECT": "p"}, ""},
		{"both", []string{"auto"}, map[string]string{"MLFLOW_TRACKING_URI": "http://127.0.0.1:1", "WANDB_API_KEY": strings.Repeat("k", 40), "WANDB_PROJECT": "p"}, "mlflow,wandb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			sinks, err := BuildSinks(config.Config{Trackers: tt.trackers}, Overrides{}, nil, quiet())
			var got []string
			for _, s := range sinks {
				got = append(got, s.Name())
			}
			g := strings.Join(got, ",")
			if err != nil {
				g = "error: " + err.Error()
			}
			if !strings.HasPrefix(g, tt.want) || (tt.want == "" && g != "") {
				t.Errorf("got %q, want %q", g, tt.want)
			}
		})
	}
}
