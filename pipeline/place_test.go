package pipeline

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
	"github.com/bridge-dev/bridge/tracker/wandb"
)

// placedLateSink is a tracker that was down when the job started and whose
// run's place is known only once it answers (as MLflow's experiment id).
type placedLateSink struct{ lateSink }

func (p *placedLateSink) Run() tracker.RunInfo {
	ri := p.lateSink.Run()
	ri.Place = map[string]string{"t.place": "configured"}
	if ri.ID != "" {
		ri.Place["t.place"] = "resolved"
	}
	return ri
}

// Where each run is (tracker.RunInfo.Place) is in the spool for `bridge sync`:
// in the start record for a tracker that started in time, and in the run
// record for one that started late, with what it resolved then.
func TestSpoolRecordsPlace(t *testing.T) {
	late := &placedLateSink{}
	st := StartSinksWith(context.Background(), []tracker.Sink{late}, tracker.StartInfo{},
		StartPolicy{Timeout: 100 * time.Millisecond, Background: true}, quiet())
	set := settings(t)
	tags := map[string]string{"k": "v"}
	s := Open(Options{Settings: set, Log: quiet(), Collectors: []metrics.Collector{&counter{}}, Started: st, StartTags: tags})
	if _, ok := tags["t.place"]; ok {
		t.Error("the caller's start tags were changed")
	}
	s.Run()
	late.up.Store(true)
	late.accept.Store(true)
	waitfor.Cond(t, deadline, "the late run", func() bool { return s.sinks[0].run() != "" })
	s.Stop(nil)
	s.Finish(tracker.EndInfo{Time: time.Now()})
	_, _, attempts, err := spooltest.ReadFile(set.Spool)
	if err != nil || len(attempts) != 1 {
		t.Fatalf("attempts %+v, %v", attempts, err)
	}
	if got := attempts[0].Start.Info; got["t.place"] != "resolved" || got["k"] != "v" || attempts[0].Start.Runs["late"] != "late-run" {
		t.Errorf("start record (with its run record) %+v: want the late run and its resolved place", attempts[0].Start)
	}
}

// bridge sync takes the experiment the spool recorded over the variables
// where it runs: the id when recorded (an experiment may be renamed), else
// the name; a variable naming another one is warned about. Without a
// record, the variables decide.
func TestBuildMLflowRecordedExperiment(t *testing.T) {
	t.Setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
	t.Setenv("MLFLOW_EXPERIMENT_ID", "")
	t.Setenv("MLFLOW_EXPERIMENT_NAME", "where-sync-runs")
	for _, tc := range []struct {
		name     string
		recorded map[string]string
		want     map[string]string
		warns    bool
	}{
		{"id and name", map[string]string{mlflow.TagExperimentID: "7", mlflow.TagExperimentName: "job-exp"}, map[string]string{mlflow.TagExperimentID: "7"}, true},
		{"name only", map[string]string{mlflow.TagExperimentName: "job-exp"}, map[string]string{mlflow.TagExperimentName: "job-exp"}, true},
		{"the same name", map[string]string{mlflow.TagExperimentName: "where-sync-runs"}, map[string]string{mlflow.TagExperimentName: "where-sync-runs"}, false},
		{"nothing recorded", nil, map[string]string{mlflow.TagExperimentName: "where-sync-runs"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			sinks, err := Trackers().BuildSinks(config.Config{Trackers: []string{"mlflow"}}, Overrides{Recorded: tc.recorded}, nil, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil || len(sinks) != 1 {
				t.Fatalf("sinks %v, %v", sinks, err)
			}
			if got := sinks[0].Run().Place; !maps.Equal(got, tc.want) {
				t.Errorf("place %v, want %v", got, tc.want)
			}
			if warned := strings.Contains(logs.String(), "the spool's is used"); warned != tc.warns {
				t.Errorf("warned %v, want %v:\n%s", warned, tc.warns, logs.String())
			}
		})
	}
}

// W&B labels a node's series with its host name when there is no node id:
// for a spool `bridge sync` uploads, the host its bridge recorded, not
// sync's; a node id (the spool's, which sync passes on) wins.
func TestBuildWandbRecordedHost(t *testing.T) {
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: strings.Repeat("k", 40)})
	t.Setenv("HOME", t.TempDir())
	for k, v := range map[string]string{"WANDB_BASE_URL": srv.URL(), "WANDB_API_KEY": srv.APIKey(), "WANDB_PROJECT": "p",
		"WANDB_ENTITY": "", "WANDB_MODE": "", "WANDB_RUN_ID": "", "NETRC": ""} {
		t.Setenv(k, v)
	}
	host, _ := os.Hostname()
	recorded := map[string]string{"bridge.version": "test", "bridge.hostname": "trainer-7"}
	for _, tc := range []struct {
		name     string
		node     string
		recorded map[string]string
		want     string
	}{
		{"recorded host", "", recorded, "trainer-7"},
		{"node id", "n3", recorded, "n3"},
		{"not recorded by bridge", "", map[string]string{"bridge.hostname": "trainer-7"}, host},
		{"nothing recorded", "", nil, host},
	} {
		sinks, off := Trackers().BuildSinks(config.Config{Trackers: []string{"wandb"}, NodeID: tc.node}, Overrides{Recorded: tc.recorded}, nil, quiet())
		if len(sinks) != 1 || off != nil {
			t.Fatalf("%s: sinks %v, off %v", tc.name, sinks, off)
		}
		if _, err := sinks[0].Start(context.Background(), tracker.StartInfo{NodeID: tc.node}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s := sinks[0]
		if js, ok := s.(*jobrun.Sink); ok {
			s = js.Sink // the run's notes: the run's ticks are jobrun's
		}
		if got := s.(*wandb.Sink).Label(); got != tc.want {
			t.Errorf("%s: label %q, want %q", tc.name, got, tc.want)
		}
	}
}
