package pipeline

import (
	"context"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

// A long command line of multi-byte characters is cut between characters,
// wherever the limit falls: the tag and the run name stay valid UTF-8.
func TestJobStartInfoClipsWholeRunes(t *testing.T) {
	arg := strings.Repeat("données-日本語-", 60)
	for pad := range len("données-日本語-") {
		prog := "/opt/" + strings.Repeat("x", pad) + "trainé/" + arg
		info := JobStartInfo(context.Background(), config.Config{}, []string{prog, arg}, nil, map[string]string{}, slog.New(slog.DiscardHandler))
		cmd := info.Tags["bridge.command"]
		if len(cmd) > 500 || !utf8.ValidString(cmd) || !strings.HasSuffix(cmd, "...") {
			t.Errorf("bridge.command: %d bytes, valid UTF-8 %v: %q", len(cmd), utf8.ValidString(cmd), cmd)
		}
		if len(info.RunName) > 100 || !utf8.ValidString(info.RunName) || !strings.HasSuffix(info.RunName, "...") {
			t.Errorf("run name: %d bytes, valid UTF-8 %v: %q", len(info.RunName), utf8.ValidString(info.RunName), info.RunName)
		}
	}
}

// A run is named after the script the job runs, not its interpreter or
// launcher, whatever the script's name looks like; after the module of
// -m without one; else after the program and its first arguments.
func TestRunNameIsTheScript(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"python", "mytrain.py", "--lr", "0.1"}, "mytrain.py"},
		{[]string{"/usr/bin/python3.11", "-u", "nanogpt/train.py", "--wandb_project=myproj"}, "train.py"},
		{[]string{"torchrun", "--nproc_per_node", "8", "--rdzv-endpoint=h:29400", "train.py", "--config", "c.yaml"}, "train.py"},
		{[]string{"accelerate", "launch", "--config_file", "accelerate_config.yaml", "finetune.py"}, "finetune.py"},
		{[]string{"bash", "scripts/run_sft.sh"}, "run_sft.sh"},
		{[]string{"python", "-m", "trainer.main", "--seed", "42"}, "trainer.main"},
		{[]string{"python", "-m", "torch.distributed.run", "--nproc_per_node", "4", "run_clm.py"}, "run_clm.py"},
		{[]string{"./train", "--steps", "10"}, "train 10"},
		{[]string{"sh", "-c", "python x.py"}, "x.py"},
		{[]string{"bash", "-lc", "cd /work && source env.sh && exec python -u nanogpt/train.py --lr 0.1"}, "train.py"},
		{[]string{"sh", "-c", "echo run $MLFLOW_RUN_ID node $MLFLOW_SYSTEM_METRICS_NODE_ID; sleep 20"}, "sleep 20"},
		{[]string{"sh", "-c", "OMP_NUM_THREADS=4 ./train --steps 10 --token=s3cr3tvalue123"}, "train 10"},
		{[]string{"sh", "-c", "echo hi"}, "sh"},
		{[]string{"sh", "-c", "echo hi; exit 3"}, "sh"},
		{[]string{"bash", "-c", "python3 -c pass; exit $?"}, "python3"},
		{[]string{"sh", "-c", "sleep 1", "train.py", "--lr", "0.1"}, "train.py"},
		{[]string{"sh", "-c", "while [ ! -e go ]; do sleep 0.01; done"}, "sleep 0.01"},
		{[]string{"bash", "-c", "if true; then exec torchrun --nproc_per_node=8 train.py; fi"}, "train.py"},
		{[]string{"python", "train.py"}, "train.py"},
	} {
		info := JobStartInfo(context.Background(), config.Config{}, tc.argv, nil, map[string]string{}, slog.New(slog.DiscardHandler))
		if info.RunName != tc.want {
			t.Errorf("%q: run name %q, want %q", tc.argv, info.RunName, tc.want)
		}
	}
	if info := JobStartInfo(context.Background(), config.Config{RunName: "mine"}, []string{"python", "train.py"}, nil, map[string]string{}, slog.New(slog.DiscardHandler)); info.RunName != "mine" {
		t.Errorf("--run-name mine gave %q", info.RunName)
	}
}

// What the spool's start and end records keep gives back what the
// trackers were told: the start's name, time (to the millisecond),
// provenance and tags, without the record's own notes (which runs bridge
// created, where a tracker's run is); the end's exit, status, tags and
// figures, without the spool's notes.
func TestRecordedStartAndEnd(t *testing.T) {
	tags := map[string]string{"bridge.version": "1.0"}
	info := JobStartInfo(context.Background(), config.Config{RunName: "exp-7"}, []string{"python", "train.py"},
		[]string{"LOGNAME=ann"}, tags, slog.New(slog.DiscardHandler))
	tags[CreatedTag("mlflow")] = "true"
	tags["bridge.mlflow.experiment_id"] = "4"
	got := RecordedStart(Trackers(), tags, time.Unix(1, 0), "n0")
	if got.RunName != "exp-7" || got.Time.UnixMilli() != info.Time.UnixMilli() || got.Source != info.Source ||
		got.NodeID != "n0" || !maps.Equal(got.Tags, info.Tags) || info.Source.User != "ann" || info.Source.Name != "train.py" {
		t.Errorf("recorded start %+v\nfrom %+v", got, info)
	}

	d := &metrics.Desc{Name: "container_cpu_seconds", Unit: metrics.UnitSeconds}
	end := tracker.EndInfo{ExitCode: 137, Signal: 9, Time: time.UnixMilli(5000), Status: tracker.StatusFailed,
		Tags: map[string]string{"bridge.exit_code": "137", "bridge.exit_signal": "SIGKILL"}, Figures: []metrics.Point{metrics.At(d, 12)}}
	rec := EndRecord(end, map[string]string{"bridge.exit_code": "137", "bridge.exit_signal": "SIGKILL", EndRecordedTag("mlflow"): "r1"})
	back := RecordedEnd(&rec)
	if back.ExitCode != 137 || back.Signal != 9 || !back.Time.Equal(end.Time) || back.Status != tracker.StatusFailed ||
		!maps.Equal(back.Tags, end.Tags) || len(back.Figures) != 1 || back.Figures[0].Name() != d.Name || back.Figures[0].Value != 12 {
		t.Errorf("recorded end %+v\nfrom %+v", back, end)
	}
}
