package pipeline

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
)

func TestTrackersRegistration(t *testing.T) {
	seen := map[string]bool{}
	for _, tr := range Trackers() {
		if tr.Name == "" || tr.RunIDEnv == "" || tr.Build == nil || tr.Configured == nil || seen[tr.Name] || tr.Name == "auto" || tr.Name == "none" {
			t.Errorf("registration %+v: want a unique name (not auto or none), a run variable, Configured and a Build", tr)
		}
		seen[tr.Name] = true
		if got, ok := Trackers().Registered(tr.Name); !ok || got.Name != tr.Name {
			t.Errorf("Trackers().Registered(%q) = %+v, %v", tr.Name, got, ok)
		}
	}
}

// A tracker's variables are not bridge's: whatever they hold, BuildSinks
// never fails. A value that keeps a tracker from working turns that tracker
// off (one TrackerOff, naming the variable and what to do; no URI shown
// with its password) and leaves the others on.
func TestBuildSinksFromEnvironment(t *testing.T) {
	for _, k := range []string{"MLFLOW_TRACKING_URI", "WANDB_API_KEY", "WANDB_PROJECT", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_RUN_ID",
		"MLFLOW_RUN_ID", "MLFLOW_TRACKING_INSECURE_TLS", "MLFLOW_TRACKING_SERVER_CERT_PATH", "NETRC"} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", t.TempDir()) // no ~/.netrc
	key := strings.Repeat("k", 40)
	tests := []struct {
		name     string
		trackers []string
		env      map[string]string
		on       string // sink names
		off      string // the tracker off, "" for none
		why      []string
	}{
		{"none", []string{"none"}, map[string]string{"MLFLOW_TRACKING_URI": "http://127.0.0.1:1"}, "", "", nil},
		{"auto, nothing configured", []string{"auto"}, nil, "", "", nil},
		{"auto, mlflow over HTTP", []string{"auto"}, map[string]string{"MLFLOW_TRACKING_URI": "http://127.0.0.1:1"}, "mlflow", "", nil},
		{"auto, mlflow on a file store", []string{"auto"}, map[string]string{"MLFLOW_TRACKING_URI": "file:///tmp/mlruns"}, "", "mlflow",
			[]string{"MLFLOW_TRACKING_URI", "mlflow server --backend-store-uri"}},
		{"auto, http without a host", []string{"auto"}, map[string]string{"MLFLOW_TRACKING_URI": "http://u:hunter22@"}, "", "mlflow",
			[]string{"MLFLOW_TRACKING_URI", "with a host"}},
		{"auto, https without a host", []string{"auto"}, map[string]string{"MLFLOW_TRACKING_URI": "https:///x"}, "", "mlflow", []string{"MLFLOW_TRACKING_URI"}},
		{"explicit mlflow, not configured", []string{"mlflow"}, nil, "", "mlflow", []string{"MLFLOW_TRACKING_URI is not set"}},
		{"mlflow run id it refuses", []string{"auto"}, map[string]string{"MLFLOW_TRACKING_URI": "http://127.0.0.1:1", "MLFLOW_RUN_ID": "a/b"}, "", "mlflow",
			[]string{"MLFLOW_RUN_ID", "unset it"}},
		{"mlflow TLS both ways", []string{"auto"}, map[string]string{"MLFLOW_TRACKING_URI": "https://127.0.0.1:1", "MLFLOW_TRACKING_INSECURE_TLS": "true",
			"MLFLOW_TRACKING_SERVER_CERT_PATH": "/ca.pem"}, "", "mlflow", []string{"MLFLOW_TRACKING_INSECURE_TLS", "unset one"}},
		{"mlflow CA bundle missing", []string{"auto"}, map[string]string{"MLFLOW_TRACKING_URI": "https://127.0.0.1:1",
			"MLFLOW_TRACKING_SERVER_CERT_PATH": "/nonexistent/ca.pem"}, "", "mlflow", []string{"MLFLOW_TRACKING_SERVER_CERT_PATH"}},
		{"explicit wandb without key", []string{"wandb"}, map[string]string{"WANDB_PROJECT": "p"}, "", "wandb", []string{"WANDB_API_KEY"}},
		{"auto, wandb project without key", []string{"auto"}, map[string]string{"WANDB_PROJECT": "p"}, "", "wandb", []string{"WANDB_API_KEY"}},
		{"auto, wandb offline", []string{"auto"}, map[string]string{"WANDB_PROJECT": "p", "WANDB_MODE": "offline", "WANDB_RUN_ID": "r1"}, "", "wandb",
			[]string{"WANDB_MODE=offline"}},
		{"auto, wandb disabled", []string{"auto"}, map[string]string{"WANDB_PROJECT": "p", "WANDB_MODE": "disabled"}, "", "wandb",
			[]string{"WANDB_MODE=disabled"}},
		{"wandb mode it refuses", []string{"auto"}, map[string]string{"WANDB_API_KEY": key, "WANDB_MODE": "sometimes"}, "", "wandb", []string{"WANDB_MODE"}},
		{"wandb base URL", []string{"auto"}, map[string]string{"WANDB_API_KEY": key, "WANDB_BASE_URL": "api.wandb.ai"}, "", "wandb", []string{"WANDB_BASE_URL"}},
		{"wandb run id it refuses", []string{"auto"}, map[string]string{"WANDB_API_KEY": key, "WANDB_RUN_ID": "a:b"}, "", "wandb", []string{"WANDB_RUN_ID"}},
		{"wandb netrc unreadable", []string{"auto"}, map[string]string{"WANDB_PROJECT": "p", "NETRC": "/dev/zero"}, "", "wandb", []string{"/dev/zero"}},
		{"one off, the other on", []string{"mlflow", "wandb"}, map[string]string{"MLFLOW_TRACKING_URI": "http://", "WANDB_API_KEY": key}, "wandb", "mlflow",
			[]string{"MLFLOW_TRACKING_URI"}},
		{"both", []string{"auto"}, map[string]string{"MLFLOW_TRACKING_URI": "http://127.0.0.1:1", "WANDB_API_KEY": key, "WANDB_PROJECT": "p"}, "mlflow,wandb", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			sinks, off := Trackers().BuildSinks(config.Config{Trackers: tt.trackers}, Overrides{}, nil, quiet())
			var got []string
			for _, s := range sinks {
				got = append(got, s.Name())
			}
			if g := strings.Join(got, ","); g != tt.on {
				t.Errorf("sinks %q, want %q", g, tt.on)
			}
			if tt.off == "" {
				if off != nil {
					t.Errorf("off %+v, want none", off)
				}
				return
			}
			if len(off) != 1 || off[0].Tracker != tt.off {
				t.Fatalf("off %+v, want %s alone", off, tt.off)
			}
			for _, w := range tt.why {
				if !strings.Contains(off[0].Why, w) {
					t.Errorf("why %q does not say %q", off[0].Why, w)
				}
			}
			if strings.Contains(off[0].Why, "hunter22") {
				t.Errorf("why %q shows the password", off[0].Why)
			}
		})
	}
}

// W&B offline: the child gets the job's run id (the one given, else a
// generated one), the spool records it, and the spool is kept for the
// upload; disabled gives the child nothing; sync's refusal names
// WANDB_MODE, not what turns W&B on.
func TestWandbOfflineKeepsTheRun(t *testing.T) {
	t.Setenv("WANDB_PROJECT", "p")
	t.Setenv("WANDB_MODE", "offline")
	for _, given := range []string{"given01", ""} {
		t.Setenv("WANDB_RUN_ID", given)
		_, off := Trackers().BuildSinks(config.Config{Trackers: []string{"auto"}}, Overrides{}, nil, quiet())
		st := Started{}.WithOff(off)
		id := st.RunIDs()["wandb"]
		if id == "" || (given != "" && id != given) || !slices.Contains(st.Env, "WANDB_RUN_ID="+id) || !off[0].Later() {
			t.Errorf("WANDB_RUN_ID=%q: run %q, child env %v, later %v", given, id, st.Env, off[0].Later())
		}
		if msg := Trackers().NoTracker(off); !strings.Contains(msg, "WANDB_MODE=offline") || !strings.Contains(msg, "unset WANDB_MODE") {
			t.Errorf("no tracker: %q", msg)
		}
	}
	t.Setenv("WANDB_MODE", "disabled")
	_, off := Trackers().BuildSinks(config.Config{Trackers: []string{"auto"}}, Overrides{}, nil, quiet())
	if st := (Started{}).WithOff(off); len(st.Env) != 0 || len(st.RunIDs()) != 0 || off[0].Later() {
		t.Errorf("disabled: child env %v, runs %v, later %v", st.Env, st.RunIDs(), off[0].Later())
	}
}

// What attach, a restarted attempt and the node's keys need of a tracker
// comes from its registration alone: a toy tracker's run variable, node
// variable, Resume and AttachRunHint are honoured with nothing else added.
func TestRegistrationDrivesRuns(t *testing.T) {
	ts := append(Trackers(), tracker.Registration{Name: "toy", RunIDEnv: "TOY_RUN_ID", NodeIDEnv: "TOY_NODE", Resume: true, AttachRunHint: "toy.run_id()",
		Configured: func(func(string) string) bool { return false }, Build: func(tracker.Build) (tracker.Sink, error) { return &toySink{}, nil }})
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	lost := spool.Record{Attempt: 2, Runs: map[string]string{"toy": "r1"}, Info: map[string]string{CreatedTag("toy"): "true"}}
	if ov := ts.ResumeRuns(lost, false, env(), quiet()); ov.RunIDs["toy"] != "r1" || !ov.Owned["toy"] {
		t.Errorf("resume: %+v, want the lost attempt's run r1, owned", ov)
	}
	if ov := ts.ResumeRuns(lost, false, env("TOY_RUN_ID", "r9"), quiet()); ov.RunIDs["toy"] != "" {
		t.Errorf("resume with TOY_RUN_ID set: %+v, want the variable's run (no override)", ov)
	}
	if ov := ts.ResumeRuns(lost, true, env(), quiet()); ov.RunIDs["toy"] != "" {
		t.Errorf("resume in a multi-node job: %+v, want none (the job's run is elected)", ov)
	}
	if ov := ts.AttachRuns("", env("TOY_RUN_ID", "r2")); ov.RunIDs["toy"] != "r2" || !ov.Follow {
		t.Errorf("attach: %+v, want TOY_RUN_ID's run, followed", ov)
	}
	if ov := ts.AttachRuns("x", env("TOY_RUN_ID", "r2")); ov.RunIDs["toy"] != "x" || !ov.Follow {
		t.Errorf("attach --run-id x: %+v, want x, followed", ov)
	}
	sinks := []tracker.Sink{&toySink{}}
	if err := ts.MissingRun(sinks, ts.AttachRuns("", env())); err == nil || !strings.Contains(err.Error(), "TOY_RUN_ID") || !strings.Contains(err.Error(), "toy.run_id()") {
		t.Errorf("attach without a run: %v, want an error naming TOY_RUN_ID and the hint", err)
	}
	if err := ts.MissingRun(sinks, ts.AttachRuns("", env("TOY_RUN_ID", "r2"))); err != nil {
		t.Errorf("attach with TOY_RUN_ID: %v", err)
	}
	if got := ts.NodeID("", env("TOY_NODE", "n4")); got != "n4" {
		t.Errorf("node id from TOY_NODE: %q", got)
	}
	if got := ts.NodeID("n1", env("TOY_NODE", "n4")); got != "n1" {
		t.Errorf("--node-id n1 with TOY_NODE set: %q, want n1", got)
	}
	if !strings.Contains(ts.RunIDVars(), "TOY_RUN_ID") {
		t.Errorf("attach's --run-id help %q does not name TOY_RUN_ID", ts.RunIDVars())
	}
}

// A tracker's node variable (MLflow's MLFLOW_SYSTEM_METRICS_NODE_ID) is
// another tool's: a value that is not one key segment is cleaned into one,
// with one warning naming the variable and its value, never refused; the
// tracker's Build gets the node id, and --node-id wins over the variable.
func TestTrackerNodeIDFromItsVariable(t *testing.T) {
	var built []string
	ts := TrackerList{{Name: "toy", RunIDEnv: "TOY_RUN_ID", NodeIDEnv: "TOY_NODE", Configured: func(func(string) string) bool { return true },
		Build: func(b tracker.Build) (tracker.Sink, error) { built = append(built, b.NodeID); return &toySink{}, nil }}}
	for _, tc := range []struct {
		name, env, flag string
		want            func(string) bool
		warns           []string // what the one warning names; none without
	}{
		{"a key segment", "node-3", "", func(id string) bool { return id == "node-3" }, nil},
		{"a slash and a space", "gpu box/1", "", func(id string) bool { return strings.HasPrefix(id, "gpu_box_1--") }, []string{"TOY_NODE", `gpu box/1`, "gpu_box_1--"}},
		{"over 100", strings.Repeat("n", 101), "", func(id string) bool { return len(id) == 100 }, []string{"TOY_NODE"}},
		{"--node-id wins", "gpu box/1", "n1", func(id string) bool { return id == "n1" }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TOY_NODE", tc.env)
			built = nil
			var logs bytes.Buffer
			sinks, off := ts.BuildSinks(config.Config{Trackers: []string{"auto"}, NodeID: tc.flag}, Overrides{}, nil, slog.New(slog.NewTextHandler(&logs, nil)))
			if len(sinks) != 1 || off != nil || len(built) != 1 || !tc.want(built[0]) {
				t.Fatalf("sinks %v, off %v, node ids %q", sinks, off, built)
			}
			warnings := strings.Count(logs.String(), "level=WARN")
			if (warnings == 1) != (tc.warns != nil) || warnings > 1 {
				t.Errorf("%d warnings, want %d:\n%s", warnings, len(tc.warns), logs.String())
			}
			for _, w := range tc.warns {
				if !strings.Contains(logs.String(), w) {
					t.Errorf("warning does not name %s:\n%s", w, logs.String())
				}
			}
		})
	}
	// MLflow's sink takes the cleaned id: its series nest under it.
	t.Setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
	t.Setenv("MLFLOW_RUN_ID", "")
	t.Setenv(mlflow.EnvNodeID, "gpu box/1")
	sinks, off := Trackers().BuildSinks(config.Config{Trackers: []string{"mlflow"}}, Overrides{}, nil, quiet())
	if len(sinks) != 1 || off != nil {
		t.Fatalf("sinks %v, off %v: MLflow refuses the cleaned node id", sinks, off)
	}
	if key := sinks[0].(*jobrun.Sink).Sink.(*mlflow.Sink).Key("cpu"); !strings.HasPrefix(key, "system/gpu_box_1--") {
		t.Errorf("key %q, want it under the cleaned node id", key)
	}
}
