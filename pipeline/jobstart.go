package pipeline

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/internal/printable"
	"github.com/bridge-dev/bridge/redact"
	"github.com/bridge-dev/bridge/tracker"
)

// What a job's trackers are told at its start, and what the child gets
// from them.

// JobStartInfo is what the trackers are told of a job's command at its
// start: the command line as redact shows it (the only form bridge
// records: tags, run name, spool), the run's name (runName) and the node,
// with tags, to which the command line is added.
func JobStartInfo(cfg config.Config, argv, environ []string, tags map[string]string) tracker.StartInfo {
	shown := redact.New(environ).Argv(argv)
	tags["bridge.command"] = printable.Clip(strings.Join(shown, " "), 500)
	return tracker.StartInfo{Command: shown, RunName: runName(cfg.RunName, shown), NodeID: cfg.NodeID, Tags: tags}
}

// scriptExts are the extensions of the scripts a job runs: the first
// argument with one names the run (runName).
var scriptExts = map[string]bool{".py": true, ".sh": true, ".bash": true, ".ipynb": true, ".r": true, ".jl": true,
	".js": true, ".ts": true, ".rb": true, ".pl": true, ".lua": true}

// runName is --run-name (flag), else what the job is known by, from the
// command line as redact shows it (shown): the base name of its first
// script (python mytrain.py, torchrun ... nanogpt/train.py: train.py),
// else the module of -m (python -m trainer.main), else the base names of
// the program and its first shown arguments.
func runName(flag string, shown []string) string {
	if flag != "" {
		return flag
	}
	var args []string // the shown arguments that are not options
	module := ""
	for i, a := range shown[1:] {
		if strings.HasPrefix(a, "-") || redact.Hidden(a) || strings.Contains(a, redact.Mask) {
			continue
		}
		if scriptExts[strings.ToLower(filepath.Ext(a))] {
			return printable.Clip(filepath.Base(a), 100)
		}
		if module == "" && shown[i] == "-m" {
			module = a
		}
		args = append(args, a)
	}
	if module != "" {
		return printable.Clip(module, 100)
	}
	parts := []string{filepath.Base(shown[0])}
	for _, a := range args[:min(len(args), 2)] {
		parts = append(parts, filepath.Base(a))
	}
	return printable.Clip(strings.Join(parts, " "), 100)
}

// ChildEnv is base with the variables the trackers give the child (Env)
// added, or in place of base's.
func (st Started) ChildEnv(base []string) []string {
	out := append([]string(nil), base...)
	for _, kv := range st.Env {
		k, _, _ := strings.Cut(kv, "=")
		replaced := false
		for i, o := range out {
			if ok, _, _ := strings.Cut(o, "="); ok == k {
				out[i], replaced = kv, true
			}
		}
		if !replaced {
			out = append(out, kv)
		}
	}
	return out
}

// MarkCreated records in tags (the spool's start record) which runs bridge
// created, so that a restarted bridge may resume them (ResumeRuns).
func (st Started) MarkCreated(tags map[string]string) {
	for _, r := range st.Runs {
		if r.Created {
			tags[CreatedTag(r.Sink.Name())] = "true"
		}
	}
}

// SayLate warns, for a multi-node job, of each tracker whose job's run was
// not found before the child starts: the child goes without the tracker's
// run variable.
func (st Started) SayLate(ts TrackerList, job *Job, log *slog.Logger) {
	if job == nil || !job.Multi() {
		return
	}
	for _, r := range st.Runs {
		if t, _ := ts.Registered(r.Sink.Name()); r.Late != nil {
			log.Warn("the job's run was not found within --start-timeout: the child starts without "+t.RunIDEnv+"; bridge keeps looking in the background and sends the spooled samples there. If it never finds it, `bridge sync SPOOL` joins them to the job's run later (the spool records the key)",
				"key", job.Key)
		}
	}
}

// End records end on every run a tracker found or created, within ctx: a
// start cut short (the command never ran) leaves no run bridge created
// RUNNING.
func (st Started) End(ctx context.Context, end tracker.EndInfo, log *slog.Logger) {
	for _, r := range st.Runs {
		if r.RunID == "" {
			continue
		}
		if err := r.Sink.Finish(ctx, end); err != nil {
			log.Warn("cannot record on the tracker that the command never ran", "tracker", r.Sink.Name(), "run", r.RunID, "err", err)
		}
	}
}
