package mlflow

// Tests against a real `mlflow server` (harness/mlflowtest); they skip when
// BRIDGE_TEST_PYTHON is unset.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/authproxy"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

func TestMain(m *testing.M) { os.Exit(mlflowtest.Main(m)) }

var nameSeq atomic.Int64

// unique gives experiment names no other test or earlier run (the suite's
// server may be shared) has used.
func unique(t *testing.T) string {
	return fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano(), nameSeq.Add(1))
}

func serverSink(t *testing.T, url string, cfg Config) *Sink {
	t.Helper()
	cfg.TrackingURI = url
	s, err := New(cfg, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var systemNames = []string{
	"container_memory_working_set_megabytes",
	"container_cpu_utilization_percentage",
	"node_memory_usage_megabytes",
}

// systemSamples returns n samples, one second apart from start, of
// systemNames; values differ per sample and per metric.
func systemSamples(n int, start time.Time) []metrics.Sample {
	out := make([]metrics.Sample, n)
	for i := range out {
		out[i] = metrics.Sample{Seq: int64(i), Time: start.Add(time.Duration(i) * time.Second)}
		for j, name := range systemNames {
			out[i].Points = append(out[i].Points, metrics.Named(name, float64(100*j+i)))
		}
	}
	return out
}

// checkHistories asserts that every point of in is stored once under
// prefix+name, with the sample's step and millisecond time.
func checkHistories(t *testing.T, srv *mlflowtest.Server, runID, prefix string, in []metrics.Sample) {
	t.Helper()
	for _, name := range systemNames {
		h := srv.History(t, runID, prefix+name)
		slices.SortFunc(h, func(a, b mlflowtest.Metric) int { return int(a.Step - b.Step) })
		if len(h) != len(in) {
			t.Errorf("%s%s: %d points, want %d (one per sample)", prefix, name, len(h), len(in))
			continue
		}
		for i, m := range h {
			want, _ := in[i].Value(name)
			if m.Step != in[i].Seq || m.Timestamp != in[i].Time.UnixMilli() || m.Value != want {
				t.Errorf("%s%s point %d = step %d ts %d value %v; want %d %d %v",
					prefix, name, i, m.Step, m.Timestamp, m.Value, in[i].Seq, in[i].Time.UnixMilli(), want)
			}
		}
	}
}

func envValue(env []string, key string) (string, bool) {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v, true
		}
	}
	return "", false
}

func TestServerCreatesRun(t *testing.T) {
	srv := mlflowtest.Shared(t)
	ctx := context.Background()
	expName := unique(t)
	s := serverSink(t, srv.URL, Config{ExperimentName: expName})
	env, err := s.Start(ctx, tracker.StartInfo{
		Command: []string{"python", "train.py"}, RunName: "train-run",
		Tags: map[string]string{"bridge.version": "test", "bridge.cgroup.version": "1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := envValue(env, EnvRunID); id == "" || id != s.Run().ID {
		t.Fatalf("env %v, want %s=%s", env, EnvRunID, s.Run().ID)
	}
	if v, _ := envValue(env, EnvExperimentID); v != srv.ExperimentID(t, expName) {
		t.Errorf("env %v, want %s of experiment %q", env, EnvExperimentID, expName)
	}
	if !s.Run().Created {
		t.Error("Created() = false for a run bridge created")
	}
	run := srv.GetRun(t, s.Run().ID)
	if run.Info.Status != StatusRunning || run.Info.RunName != "train-run" || run.Info.ExperimentID != srv.ExperimentID(t, expName) {
		t.Errorf("run info %+v", run.Info)
	}
	if run.Info.StartTime <= 0 {
		t.Errorf("start_time %d not set", run.Info.StartTime)
	}
	for k, v := range map[string]string{"bridge.version": "test", "bridge.cgroup.version": "1", "mlflow.source.name": "python train.py"} {
		if run.Tags[k] != v {
			t.Errorf("tag %s = %q, want %q", k, run.Tags[k], v)
		}
	}

	in := systemSamples(4, time.Now().Add(-time.Minute).Truncate(time.Millisecond))
	if acked, err := s.Send(ctx, in); err != nil || acked != len(in) {
		t.Fatalf("Send = %d, %v", acked, err)
	}
	checkHistories(t, srv, s.Run().ID, "system/", in)

	end := time.Now()
	if err := s.Finish(ctx, tracker.EndInfo{ExitCode: 0, Time: end, Tags: map[string]string{"bridge.exit_code": "0"}}); err != nil {
		t.Fatal(err)
	}
	run = srv.GetRun(t, s.Run().ID)
	if run.Info.Status != StatusFinished || run.Info.EndTime != end.UnixMilli() || run.Tags["bridge.exit_code"] != "0" {
		t.Errorf("after Finish: %+v, exit tag %q", run.Info, run.Tags["bridge.exit_code"])
	}
}

func TestServerDefaultExperiment(t *testing.T) {
	srv := mlflowtest.Shared(t)
	s := serverSink(t, srv.URL, Config{})
	env, err := s.Start(context.Background(), tracker.StartInfo{RunName: "default-exp"})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := envValue(env, EnvExperimentID); v != DefaultExperimentID {
		t.Errorf("env %v, want %s=%s so the child's start_run() agrees", env, EnvExperimentID, DefaultExperimentID)
	}
	if got := srv.GetRun(t, s.Run().ID).Info.ExperimentID; got != DefaultExperimentID {
		t.Errorf("experiment %s, want %s", got, DefaultExperimentID)
	}
}

func TestServerExperimentErrors(t *testing.T) {
	srv := mlflowtest.Shared(t)
	deleted := unique(t)
	srv.DeleteExperiment(t, srv.CreateExperiment(t, deleted))
	other := unique(t)
	otherID := srv.CreateExperiment(t, other)

	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"deleted experiment", Config{ExperimentName: deleted}, []string{"deleted", deleted}},
		{"name and id disagree", Config{ExperimentName: other, ExperimentID: otherID + "0"}, []string{EnvExperimentID, EnvExperimentName, otherID}},
		{"missing experiment id", Config{ExperimentID: "987654321"}, []string{"987654321"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := serverSink(t, srv.URL, tc.cfg)
			_, err := s.Start(context.Background(), tracker.StartInfo{})
			if !errors.Is(err, tracker.ErrPermanent) {
				t.Fatalf("err = %v, want a permanent error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestServerRunIDGiven(t *testing.T) {
	srv := mlflowtest.Shared(t)
	ctx := context.Background()
	runID := srv.CreateRun(t, srv.CreateExperiment(t, unique(t)), "users-run")

	s := serverSink(t, srv.URL, Config{RunID: runID})
	env, err := s.Start(ctx, tracker.StartInfo{Tags: map[string]string{"bridge.node_id": "n0"}})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := envValue(env, EnvRunID); v != runID || s.Run().Created || s.Run().ID != runID {
		t.Fatalf("env %v created %v run %s; want the given run, not created", env, s.Run().Created, s.Run().ID)
	}
	if _, ok := envValue(env, EnvExperimentID); ok {
		t.Errorf("env %v exports %s for a given run", env, EnvExperimentID)
	}
	// The child waits only for the run's check: the start tags go with the
	// first Send.
	if v, ok := srv.GetRun(t, runID).Tags["bridge.node_id"]; ok {
		t.Errorf("start tags recorded by Start (bridge.node_id=%q): the child waited for a second request", v)
	}
	in := systemSamples(3, time.Now().Truncate(time.Millisecond))
	if acked, err := s.Send(ctx, in); err != nil || acked != 3 {
		t.Fatalf("Send = %d, %v", acked, err)
	}
	checkHistories(t, srv, runID, "system/", in)
	if got := srv.GetRun(t, runID).Tags["bridge.node_id"]; got != "n0" {
		t.Errorf("after the first Send bridge.node_id = %q, want n0", got)
	}
	// Not bridge's run: Finish records tags and leaves the status alone.
	if err := s.Finish(ctx, tracker.EndInfo{ExitCode: 1, Tags: map[string]string{"bridge.exit_code": "1"}}); err != nil {
		t.Fatal(err)
	}
	run := srv.GetRun(t, runID)
	if run.Info.Status != StatusRunning || run.Tags["bridge.exit_code"] != "1" || run.Tags["bridge.node_id"] != "n0" {
		t.Errorf("run %+v tags %v; want RUNNING with the bridge tags", run.Info, run.Tags)
	}
}

// A job that ends before its first sample is sent still gets its start tags.
func TestServerRunIDGivenStartTagsAtFinish(t *testing.T) {
	srv := mlflowtest.Shared(t)
	ctx := context.Background()
	runID := srv.CreateRun(t, srv.CreateExperiment(t, unique(t)), "users-run")
	s := serverSink(t, srv.URL, Config{RunID: runID})
	if _, err := s.Start(ctx, tracker.StartInfo{Tags: map[string]string{"bridge.version": "v1"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, tracker.EndInfo{Tags: map[string]string{"bridge.exit_code": "0"}}); err != nil {
		t.Fatal(err)
	}
	if tags := srv.GetRun(t, runID).Tags; tags["bridge.version"] != "v1" || tags["bridge.exit_code"] != "0" {
		t.Errorf("tags %v; want the start and the end tags", tags)
	}
}

func TestServerRunIDBad(t *testing.T) {
	srv := mlflowtest.Shared(t)
	deleted := srv.CreateRun(t, DefaultExperimentID, "to-delete")
	srv.DeleteRun(t, deleted)
	for name, id := range map[string]string{"missing": "0123456789abcdef0123456789abcdef", "deleted": deleted} {
		t.Run(name, func(t *testing.T) {
			s := serverSink(t, srv.URL, Config{RunID: id})
			env, err := s.Start(context.Background(), tracker.StartInfo{})
			if !errors.Is(err, tracker.ErrPermanent) {
				t.Fatalf("err = %v, want a permanent error", err)
			}
			if !strings.Contains(err.Error(), EnvRunID+"="+id) {
				t.Errorf("message %q does not name %s=%s", err, EnvRunID, id)
			}
			if v, _ := envValue(env, EnvRunID); v != id {
				t.Errorf("env %v: the given run id should still be passed on", env)
			}
		})
	}
}

// TestServerPythonChild is the heart of the design: the child's own
// mlflow.start_run() resumes the run bridge created, so its metrics and
// bridge's system/* metrics land in one run.
func TestServerPythonChild(t *testing.T) {
	srv := mlflowtest.Shared(t)
	py := mlflowtest.Python(t)
	ctx := context.Background()
	for _, cfg := range []Config{{}, {ExperimentName: unique(t)}} {
		t.Run(fmt.Sprintf("experiment=%q", cfg.ExperimentName), func(t *testing.T) {
			s := serverSink(t, srv.URL, cfg)
			env, err := s.Start(ctx, tracker.StartInfo{RunName: "child"})
			if err != nil {
				t.Fatal(err)
			}
			in := systemSamples(3, time.Now().Add(-time.Minute).Truncate(time.Millisecond))
			if acked, err := s.Send(ctx, in); err != nil || acked != 3 {
				t.Fatalf("Send = %d, %v", acked, err)
			}

			cmd := exec.Command(py, "-c", `import mlflow
run = mlflow.start_run()
mlflow.log_metric("loss", 0.5)
print(run.info.run_id)
mlflow.end_run()`)
			cmd.Env = append(childEnv(), env...)
			cmd.Env = append(cmd.Env, EnvTrackingURI+"="+srv.URL)
			if cfg.ExperimentName != "" {
				cmd.Env = append(cmd.Env, EnvExperimentName+"="+cfg.ExperimentName)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("python child: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), s.Run().ID) {
				t.Errorf("child used another run: printed %q, want %s", out, s.Run().ID)
			}
			loss := srv.History(t, s.Run().ID, "loss")
			if len(loss) != 1 || loss[0].Value != 0.5 {
				t.Errorf("child's loss history %+v, want one point 0.5", loss)
			}
			checkHistories(t, srv, s.Run().ID, "system/", in)
			// The child ended the run: Finish leaves its status.
			before := srv.GetRun(t, s.Run().ID)
			if before.Info.Status != StatusFinished {
				t.Fatalf("child's end_run left status %s", before.Info.Status)
			}
			if err := s.Finish(ctx, tracker.EndInfo{ExitCode: 3, Time: time.Now().Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			after := srv.GetRun(t, s.Run().ID)
			if after.Info.Status != StatusFinished || after.Info.EndTime != before.Info.EndTime {
				t.Errorf("Finish changed a child-ended run: %+v -> %+v", before.Info, after.Info)
			}
		})
	}
}

// childEnv is the test's environment without MLflow client variables.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MLFLOW_") {
			env = append(env, kv)
		}
	}
	return env
}

func TestServerNodeID(t *testing.T) {
	srv := mlflowtest.Shared(t)
	ctx := context.Background()
	for _, tc := range []struct{ cfgNode, infoNode, want string }{
		{"worker-0", "", "worker-0"},
		{"", "worker-1", "worker-1"},
		{"from-env", "from-flag", "from-flag"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			s := serverSink(t, srv.URL, Config{NodeID: tc.cfgNode})
			if _, err := s.Start(ctx, tracker.StartInfo{NodeID: tc.infoNode}); err != nil {
				t.Fatal(err)
			}
			in := systemSamples(2, time.Now().Truncate(time.Millisecond))
			if _, err := s.Send(ctx, in); err != nil {
				t.Fatal(err)
			}
			prefix := "system/" + tc.want + "/"
			var want []string
			for _, n := range systemNames {
				want = append(want, prefix+n)
			}
			slices.Sort(want)
			if got := srv.MetricKeys(t, s.Run().ID, "system/"); !slices.Equal(got, want) {
				t.Errorf("keys %v, want %v", got, want)
			}
			checkHistories(t, srv, s.Run().ID, prefix, in)
		})
	}
}

func TestServerBatchingAndResend(t *testing.T) {
	srv := mlflowtest.Shared(t)
	ctx := context.Background()
	s := serverSink(t, srv.URL, Config{})
	if _, err := s.Start(ctx, tracker.StartInfo{RunName: "batching"}); err != nil {
		t.Fatal(err)
	}
	// 50 samples of 50 points: 2500 metrics, three requests of <= 1000.
	const nSamples, nPoints = 50, 50
	start := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	in := make([]metrics.Sample, nSamples)
	for i := range in {
		in[i] = metrics.Sample{Seq: int64(i), Time: start.Add(time.Duration(i) * time.Second)}
		for j := range nPoints {
			in[i].Points = append(in[i].Points, metrics.Named(fmt.Sprintf("container_test_%02d_count", j), float64(i*j)))
		}
	}
	for round := range 2 { // the second round is a resend: nothing may double
		if acked, err := s.Send(ctx, in); err != nil || acked != nSamples {
			t.Fatalf("round %d: Send = %d, %v", round, acked, err)
		}
	}
	// A resend of an overlapping window, as the forwarder does after a
	// failure half-way.
	if acked, err := s.Send(ctx, in[10:30]); err != nil || acked != 20 {
		t.Fatalf("overlap: Send = %d, %v", acked, err)
	}
	keys := srv.MetricKeys(t, s.Run().ID, "system/")
	if len(keys) != nPoints {
		t.Fatalf("%d keys, want %d", len(keys), nPoints)
	}
	total := 0
	for _, k := range keys {
		h := srv.History(t, s.Run().ID, k)
		total += len(h)
		steps := map[int64]int{}
		for _, m := range h {
			steps[m.Step]++
		}
		if len(h) != nSamples || len(steps) != nSamples {
			t.Errorf("%s: %d points over %d steps, want %d each once", k, len(h), len(steps), nSamples)
		}
	}
	if total != nSamples*nPoints {
		t.Errorf("%d points stored, want %d", total, nSamples*nPoints)
	}
}

func TestServerSpecialValues(t *testing.T) {
	srv := mlflowtest.Shared(t)
	ctx := context.Background()
	s := serverSink(t, srv.URL, Config{})
	if _, err := s.Start(ctx, tracker.StartInfo{}); err != nil {
		t.Fatal(err)
	}
	in := []metrics.Sample{{Time: time.Now(), Points: []metrics.Point{
		metrics.Named("node_nan", math.NaN()), metrics.Named("node_inf", math.Inf(1)), metrics.Named("node_neginf", math.Inf(-1)),
	}}}
	if _, err := s.Send(ctx, in); err != nil {
		t.Fatal(err)
	}
	if h := srv.History(t, s.Run().ID, "system/node_nan"); len(h) != 1 || !math.IsNaN(h[0].Value) {
		t.Errorf("NaN stored as %+v", h)
	}
	// The SQL store clamps infinities to the largest float64.
	if h := srv.History(t, s.Run().ID, "system/node_inf"); len(h) != 1 || h[0].Value < 1e308 {
		t.Errorf("+Inf stored as %+v", h)
	}
	if h := srv.History(t, s.Run().ID, "system/node_neginf"); len(h) != 1 || h[0].Value > -1e308 {
		t.Errorf("-Inf stored as %+v", h)
	}
}

func TestServerFinishStatus(t *testing.T) {
	srv := mlflowtest.Shared(t)
	ctx := context.Background()
	tests := []struct {
		name       string
		end        tracker.EndInfo
		childEnded string // status the "child" set before Finish, "" if none
		want       string
	}{
		{"exit 0", tracker.EndInfo{ExitCode: 0}, "", StatusFinished},
		{"exit 2", tracker.EndInfo{ExitCode: 2}, "", StatusFailed},
		{"SIGKILL", tracker.EndInfo{ExitCode: 137, Signal: 9}, "", StatusKilled},
		{"child ended it FAILED, bridge exit 0", tracker.EndInfo{ExitCode: 0}, StatusFailed, StatusFailed},
		{"child ended it FINISHED, bridge killed", tracker.EndInfo{ExitCode: 143, Signal: 15}, StatusFinished, StatusFinished},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := serverSink(t, srv.URL, Config{})
			if _, err := s.Start(ctx, tracker.StartInfo{}); err != nil {
				t.Fatal(err)
			}
			if tc.childEnded != "" {
				srv.SetStatus(t, s.Run().ID, tc.childEnded)
			}
			tc.end.Tags = map[string]string{"bridge.exit_code": strconv.Itoa(tc.end.ExitCode)}
			if err := s.Finish(ctx, tc.end); err != nil {
				t.Fatal(err)
			}
			run := srv.GetRun(t, s.Run().ID)
			if run.Info.Status != tc.want {
				t.Errorf("status %s, want %s", run.Info.Status, tc.want)
			}
			if run.Info.EndTime <= 0 {
				t.Errorf("end_time %d not set", run.Info.EndTime)
			}
			if got := run.Tags["bridge.exit_code"]; got != strconv.Itoa(tc.end.ExitCode) {
				t.Errorf("bridge.exit_code tag %q, want %d", got, tc.end.ExitCode)
			}
		})
	}
}

func TestServerWrongToken(t *testing.T) {
	srv := mlflowtest.Shared(t)
	proxy := authproxy.Start(t, srv.URL, "right-token")
	ctx := context.Background()

	bad := serverSink(t, proxy.URL, Config{Token: "wrong-token"})
	_, err := bad.Start(ctx, tracker.StartInfo{})
	if !errors.Is(err, tracker.ErrPermanent) {
		t.Fatalf("err = %v, want a permanent error", err)
	}
	msg := err.Error()
	for _, want := range []string{"MLflow rejected the credentials (401 UNAUTHENTICATED)", proxy.URL, EnvToken} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not contain %q", msg, want)
		}
	}
	if strings.Contains(msg, "wrong-token") {
		t.Errorf("message leaks the token: %q", msg)
	}
	// Later calls fail the same way, once each: no retry inside the sink.
	bad.runID = srv.CreateRun(t, DefaultExperimentID, "behind-proxy")
	rejected := proxy.Rejected()
	if _, err := bad.Send(ctx, systemSamples(1, time.Now())); !errors.Is(err, tracker.ErrPermanent) {
		t.Errorf("Send err = %v, want permanent", err)
	}
	if n := proxy.Rejected() - rejected; n != 1 {
		t.Errorf("Send made %d requests, want 1", n)
	}

	good := serverSink(t, proxy.URL, Config{Token: "right-token"})
	if _, err := good.Start(ctx, tracker.StartInfo{}); err != nil {
		t.Fatalf("with the right token: %v", err)
	}
	if _, err := good.Send(ctx, systemSamples(2, time.Now().Truncate(time.Millisecond))); err != nil {
		t.Fatalf("with the right token: %v", err)
	}
}

// Follow (bridge attach): once the run's owner ends it, the samples taken
// up to its end are sent, those after it are left out and acknowledged,
// Send says the run ended (tracker.ErrRunEnded), and nothing more is
// written into the run: no tags at Finish, its status and end as the
// owner set them.
func TestServerFollowStopsAtTheRunsEnd(t *testing.T) {
	srv := mlflowtest.Shared(t)
	ctx := context.Background()
	runID := srv.CreateRun(t, srv.CreateExperiment(t, unique(t)), "notebook")
	s := serverSink(t, srv.URL, Config{RunID: runID, Follow: true})
	if _, err := s.Start(ctx, tracker.StartInfo{Tags: map[string]string{"bridge.version": "v1"}}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	in := systemSamples(5, t0)
	if acked, err := s.Send(ctx, in[:2]); acked != 2 || err != nil {
		t.Fatalf("Send while RUNNING = %d, %v", acked, err)
	}
	end := t0.Add(2500 * time.Millisecond) // after sample 2, before sample 3
	srv.EndRun(t, runID, StatusFinished, end)
	acked, err := s.Send(ctx, in[2:])
	if acked != 3 || !errors.Is(err, tracker.ErrRunEnded) {
		t.Fatalf("Send after the end = %d, %v; want 3 acknowledged and ErrRunEnded", acked, err)
	}
	if !strings.Contains(err.Error(), "bridge left out the 2 samples taken after that") {
		t.Errorf("the error does not count what was left out: %v", err)
	}
	checkHistories(t, srv, runID, "system/", in[:3])
	if acked, err := s.Send(ctx, systemSamples(1, t0.Add(time.Hour))); acked != 1 || !errors.Is(err, tracker.ErrRunEnded) {
		t.Errorf("a later Send = %d, %v; want it acknowledged and left out", acked, err)
	}
	if err := s.Finish(ctx, tracker.EndInfo{Tags: map[string]string{"bridge.attach_end": "signal"}}); err != nil {
		t.Fatal(err)
	}
	run := srv.GetRun(t, runID)
	if _, ok := run.Tags["bridge.attach_end"]; ok || run.Info.Status != StatusFinished || run.Info.EndTime != end.UnixMilli() {
		t.Errorf("after Finish: status %s end %d tags %v; want the owner's FINISHED at %d and no end tags",
			run.Info.Status, run.Info.EndTime, run.Tags, end.UnixMilli())
	}
	if run.Tags["bridge.version"] != "v1" {
		t.Errorf("the start tags, sent before the end, are missing: %v", run.Tags)
	}

	// Ended before anything was sent: not even the start tags are written.
	late := srv.CreateRun(t, srv.CreateExperiment(t, unique(t)), "ended-first")
	s = serverSink(t, srv.URL, Config{RunID: late, Follow: true})
	if _, err := s.Start(ctx, tracker.StartInfo{Tags: map[string]string{"bridge.version": "v1"}}); err != nil {
		t.Fatal(err)
	}
	srv.EndRun(t, late, StatusFailed, t0.Add(-time.Second))
	if acked, err := s.Send(ctx, in); acked != len(in) || !errors.Is(err, tracker.ErrRunEnded) {
		t.Fatalf("Send = %d, %v", acked, err)
	}
	if err := s.Finish(ctx, tracker.EndInfo{Tags: map[string]string{"bridge.attach_end": "x"}}); err != nil {
		t.Fatal(err)
	}
	if r := srv.GetRun(t, late); len(r.Latest) != 0 || r.Tags["bridge.version"] != "" || r.Tags["bridge.attach_end"] != "" {
		t.Errorf("a run ended before bridge wrote anything got metrics %v, tags %v", r.Latest, r.Tags)
	}
}

// A run that holds this node's series already (an earlier attempt): Start
// reads where they end, from runs/get's latest metrics, as MLflow's own
// monitor does; another node's series, nested deeper, do not count.
func TestServerNextStep(t *testing.T) {
	srv := mlflowtest.Shared(t)
	ctx := context.Background()
	runID := srv.CreateRun(t, srv.CreateExperiment(t, unique(t)), "restarted")
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	earlier := serverSink(t, srv.URL, Config{RunID: runID, NodeID: "n1"})
	if _, err := earlier.Start(ctx, tracker.StartInfo{}); err != nil {
		t.Fatal(err)
	}
	in := systemSamples(8, t0) // steps 0..7 under system/n1/
	if acked, err := earlier.Send(ctx, in); acked != 8 || err != nil {
		t.Fatalf("Send = %d, %v", acked, err)
	}
	for _, tc := range []struct {
		node string
		want int64
	}{{"n1", 8}, {"n2", 0}, {"", 0}} {
		s := serverSink(t, srv.URL, Config{RunID: runID, NodeID: tc.node})
		if _, err := s.Start(ctx, tracker.StartInfo{}); err != nil {
			t.Fatal(err)
		}
		if got := s.Run().NextStep; got != tc.want {
			t.Errorf("node %q: NextStep = %d, want %d", tc.node, got, tc.want)
		}
	}
}

// A steady series reaches a real MLflow server as the ends of its flat
// stretches: the first sample, the last of the old value and the first of
// the new one at a change, and the last sample (sent by Finish); the run's
// latest value is the last one. Every other series has every sample.
func TestServerSteadySeries(t *testing.T) {
	srv := mlflowtest.Shared(t)
	ctx := context.Background()
	s := serverSink(t, srv.URL, Config{})
	if _, err := s.Start(ctx, tracker.StartInfo{RunName: "steady"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	in := make([]metrics.Sample, 30)
	for i := range in {
		limit := 512.0
		if i >= 10 {
			limit = 1024
		}
		in[i] = metrics.Sample{Seq: int64(i), Time: start.Add(time.Duration(i) * time.Second),
			Points: []metrics.Point{metrics.At(steadyA, limit), metrics.At(plain, float64(i))}}
	}
	for i := 0; i < len(in); i += 3 {
		if acked, err := s.Send(ctx, in[i:i+3]); err != nil || acked != 3 {
			t.Fatalf("Send of samples %d-%d = %d, %v", i, i+2, acked, err)
		}
	}
	if err := s.Finish(ctx, tracker.EndInfo{}); err != nil {
		t.Fatal(err)
	}
	h := srv.History(t, s.Run().ID, "system/"+steadyA.Name)
	slices.SortFunc(h, func(a, b mlflowtest.Metric) int { return int(a.Step - b.Step) })
	var got []string
	for _, m := range h {
		got = append(got, fmt.Sprintf("%d:%g", m.Step, m.Value))
		if m.Timestamp != in[m.Step].Time.UnixMilli() {
			t.Errorf("step %d stored at %d, the sample's time is %d", m.Step, m.Timestamp, in[m.Step].Time.UnixMilli())
		}
	}
	if want := "[0:512 9:512 10:1024 29:1024]"; fmt.Sprint(got) != want {
		t.Errorf("%s: stored %v, want %s", steadyA.Name, got, want)
	}
	if n := len(srv.History(t, s.Run().ID, "system/"+plain.Name)); n != len(in) {
		t.Errorf("%s: %d points, want %d", plain.Name, n, len(in))
	}
	if l := srv.GetRun(t, s.Run().ID).Latest["system/"+steadyA.Name]; l.Value != 1024 || l.Step != 29 {
		t.Errorf("latest %s = %v at step %d, want 1024 at 29", steadyA.Name, l.Value, l.Step)
	}
}
