package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/forensics"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/redact"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/supervisor"
	"github.com/bridge-dev/bridge/tracker"
)

// runSupervise is `bridge [flags] -- CMD [ARGS...]`.
func runSupervise(args []string, stdout, stderr io.Writer) int {
	fs, cfg, code := parse("bridge", args, stdout, stderr, nil)
	if fs == nil {
		return code
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "bridge: no command given: usage is bridge [flags] -- CMD [ARGS...] (see bridge --help)")
		return exitUsage
	}
	log := newLogger(stderr, cfg.LogLevel)
	// From here on a signal is bridge's to handle: before the child starts,
	// a terminating one ends the start (an election, a slow tracker) at
	// once, and the child is never started.
	startCtx, cancelStart := context.WithCancel(context.Background())
	defer cancelStart()
	early := supervisor.WatchEarly(cancelStart)
	defer early.Stop()

	// A command that cannot run is reported before any run is created.
	if _, err := exec.LookPath(argv[0]); err != nil {
		fmt.Fprintf(stderr, "bridge: cannot run %q: %v\n", argv[0], err)
		return startFailureCode(err)
	}
	// A multi-node job: the key its bridges share, this node, and whether
	// this bridge is the node's lead (docs/multinode.md).
	job := pipeline.DetectJob(cfg, argv, os.Getenv)
	job.TakeNode("", log)
	defer job.Release()
	job.Apply(&cfg)
	set := pipeline.SettingsFrom(cfg)
	set.Task = job.SpoolTask() // the job's other bridges on this node have spools of their own
	// An explicit spool is opened once, before the trackers start: what an
	// earlier attempt left there decides the run and goes into its tags. One
	// that cannot be opened (read-only, another bridge writing it) leaves the
	// samples in memory for the trackers: the job runs, sampled, either way.
	var sp *spool.Spool
	var lost *forensics.Lost
	var ov pipeline.Overrides
	if cfg.Spool != "" {
		sp, _ = pipeline.OpenSpool(cfg.Spool, pipeline.ForJob, set, log)
		if !sp.InMemory() {
			lost, ov = previousAttempt(sp, job.Multi(), log)
			job.CountAttempts(sp.Attempts())
		}
	}
	logJob(job, log)
	sinks, off := pipeline.BuildSinks(cfg, ov, job, log)
	src, err := pipeline.BuildSources(cfg, log)
	if err != nil {
		return usageError(stderr, err)
	}
	// Only the command line as redact shows it is recorded (tags, run name,
	// spool).
	shown := redact.New(os.Environ()).Argv(argv)
	tags := src.StartTags(cfg, version)
	tags["bridge.command"] = truncate(strings.Join(shown, " "), 500)
	for k, v := range job.Tags() {
		tags[k] = v
	}
	var lostRows []summary.Row
	if lost != nil {
		// Reported from the start: this attempt may not survive either.
		for k, v := range lost.Tags() {
			tags[k] = v
		}
		lostRows = lost.Rows()
	}
	info := tracker.StartInfo{Command: shown, RunName: runName(cfg, shown), NodeID: cfg.NodeID, Tags: tags}
	started := pipeline.StartSinksWith(startCtx, sinks, info, pipeline.StartPolicy{Timeout: cfg.StartTimeout, Background: true}, log)
	if sig := early.Stop(); sig != 0 {
		return neverStarted(sig, started, cfg.FlushTimeout, early.C, stderr, log)
	}
	env := started.Env
	if job.Multi() {
		for _, r := range started.Runs {
			if r.Late != nil && r.Sink.Name() == "mlflow" {
				log.Warn("the job's run was not found within --start-timeout: the child starts without MLFLOW_RUN_ID; bridge keeps looking in the background and sends the spooled samples there. If it never finds it, `bridge sync SPOOL` joins them to the job's run later (the spool records the key)",
					"key", job.Key)
			}
		}
	}
	for _, r := range started.Runs {
		if r.Created {
			tags[pipeline.CreatedTag(r.Sink.Name())] = "true" // for a restarted bridge: see previousAttempt
		}
	}

	sess := pipeline.Open(pipeline.Options{Settings: set, Log: log, Version: version,
		Sources: src, Spool: sp, Started: started, Off: off, StartTags: tags})
	// Leftover processes of the child's group get their SIGTERM grace inside
	// the flush timeout, which counts from the child's exit.
	grace := min(2*time.Second, max(cfg.FlushTimeout, time.Millisecond))
	child, err := supervisor.Start(supervisor.Options{Argv: argv, Env: mergeEnv(os.Environ(), env), Log: log, KillAfter: cfg.KillAfter, Grace: grace,
		Signals: early.C})
	if err != nil {
		code := startFailureCode(err)
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		sess.Stop(nil)
		sess.Finish(tracker.EndInfo{ExitCode: code, Time: time.Now(), Tags: map[string]string{"bridge.exit_code": strconv.Itoa(code), "bridge.error": err.Error()}})
		return code
	}
	// Signals after the child has exited cut the final flush short instead
	// of killing bridge (which would lose the child's exit status).
	defer child.Release()
	src.SetChild(child.PID(), os.Getpid()) // bridge adopts orphans: the child subreaper (or PID 1)
	// Only bridge itself, after the child has forked: the value is inherited,
	// and the training process must stay the OOM killer's choice.
	if err := forensics.SetOOMScoreAdj("/proc", os.Getpid(), forensics.OOMScoreAdjMin); err != nil {
		// Most containers lack CAP_SYS_RESOURCE: normal, so one short line
		// at debug rather than the errno chain at every start.
		why := "needs CAP_SYS_RESOURCE"
		if !errors.Is(err, forensics.ErrOOMScorePermission) {
			why = err.Error()
		}
		log.Debug("bridge's oom_score_adj is not lowered: a group OOM kill may take bridge too", "why", why)
	} else {
		log.Debug("bridge set its oom_score_adj to -1000")
	}
	sess.Run()

	// Signals while the child runs were forwarded by the supervisor; one
	// after it has exited cuts the final flush short.
	exit := child.Wait()
	// The whole end of the run, counted from the child's exit, fits in
	// --flush-timeout.
	sess.EndBy(exit.Time.Add(cfg.FlushTimeout))
	abort := make(chan struct{})
	stopReaping := make(chan struct{})
	go func() {
		select {
		case sig := <-child.Late():
			log.Warn("signal during the final flush: bridge exits now; "+sess.Unsent(), "signal", sig)
			close(abort)
		case <-stopReaping:
		}
	}()

	go supervisor.ReapOrphans(stopReaping)
	sess.Stop(abort)
	end := endInfo(exit)
	ev := forensics.FromRun(forensics.Run{Exit: exit, Acc: sess.Acc(), Xids: src.XidEvents(), CgroupVersion: src.CgroupVersion()})
	verdict := forensics.Classify(ev)
	for k, v := range verdict.Tags(ev) {
		end.Tags[k] = v
	}
	end.Status = verdict.Status(ev)
	if job.Multi() {
		// For the job's report: when by which clock, and the node's figures
		// (the report then never reads this node's series).
		end.Tags[report.TagEndedClock] = forensics.ClockSource("/sys")
		end.Tags[report.TagFigures] = report.FiguresTag(sess.Acc())
	}
	sess.Finish(end)
	close(stopReaping)

	rows := append([]summary.Row{{What: "exit status", Value: describeExit(exit)}}, verdict.Rows(ev)...)
	sess.Report(stderr, "bridge: end of run", append(rows, lostRows...)...)
	return exit.Code
}

// neverStarted ends a start cut short by a terminating signal: the command
// never ran, and one line says so. A run a tracker had already found or
// created records that end (a run bridge created is not left RUNNING),
// within the flush timeout; a second signal cuts that short.
func neverStarted(sig syscall.Signal, started pipeline.Started, flush time.Duration, again <-chan os.Signal, stderr io.Writer, log *slog.Logger) int {
	code := 128 + int(sig)
	why := fmt.Sprintf("%s arrived while bridge was starting its trackers, before the command started: the command never ran", unixSignalName(sig))
	fmt.Fprintf(stderr, "bridge: %s; exit status %d\n", why, code)
	ctx, cancel := context.WithTimeout(context.Background(), flush)
	defer cancel()
	go func() {
		select {
		case <-again:
			cancel()
		case <-ctx.Done():
		}
	}()
	end := tracker.EndInfo{ExitCode: code, Signal: int(sig), Time: time.Now(),
		Tags: map[string]string{"bridge.exit_code": strconv.Itoa(code), "bridge.error": why}}
	for _, r := range started.Runs {
		if r.RunID == "" {
			continue
		}
		if err := r.Sink.Finish(ctx, end); err != nil {
			log.Warn("cannot record on the tracker that the command never ran", "tracker", r.Sink.Name(), "run", r.RunID, "err", err)
		}
	}
	return code
}

func endInfo(exit supervisor.Exit) tracker.EndInfo {
	tags := map[string]string{"bridge.exit_code": strconv.Itoa(exit.Code)}
	if exit.Signal != 0 {
		tags["bridge.exit_signal"] = unixSignalName(exit.Signal)
	}
	if exit.KilledAfter > 0 {
		tags["bridge.killed_after"] = exit.KilledAfter.String()
	}
	return tracker.EndInfo{ExitCode: exit.Code, Signal: int(exit.Signal), Time: exit.Time, Tags: tags}
}

func describeExit(exit supervisor.Exit) string {
	if exit.Signal == 0 {
		return strconv.Itoa(exit.Code)
	}
	if exit.KilledAfter > 0 {
		return fmt.Sprintf("%d (killed by SIGKILL, sent by bridge: still running %s (--kill-after) after a forwarded signal)", exit.Code, exit.KilledAfter)
	}
	how := ""
	for _, f := range exit.Forwarded {
		if f.Signal == exit.Signal {
			how = ", forwarded by bridge"
			break
		}
	}
	return fmt.Sprintf("%d (killed by %s%s)", exit.Code, unixSignalName(exit.Signal), how)
}

func unixSignalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
		syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
		syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2", syscall.SIGPIPE: "SIGPIPE",
		syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM", syscall.SIGXCPU: "SIGXCPU", syscall.SIGWINCH: "SIGWINCH",
	}
	if n, ok := names[s]; ok {
		return n
	}
	return "signal " + strconv.Itoa(int(s))
}

// startFailureCode follows the shell: 127 when the command is not found,
// 126 when it cannot be executed.
func startFailureCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return exitNoCmd
	}
	return 126
}

// runName is --run-name, or the base names of the program and its first
// shown arguments (shown: the command line as redact shows it).
func runName(cfg config.Config, shown []string) string {
	if cfg.RunName != "" {
		return cfg.RunName
	}
	parts := []string{filepath.Base(shown[0])}
	for _, a := range shown[1:] {
		if strings.HasPrefix(a, "-") || redact.Hidden(a) || strings.Contains(a, redact.Mask) {
			continue
		}
		parts = append(parts, filepath.Base(a))
		if len(parts) == 3 {
			break
		}
	}
	return truncate(strings.Join(parts, " "), 100)
}

// mergeEnv adds or replaces variables of add in base.
func mergeEnv(base, add []string) []string {
	out := append([]string(nil), base...)
	for _, kv := range add {
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// previousAttempt finds an earlier attempt on sp that stopped without a
// clean shutdown (a group OOM kill took bridge too, a node failure). Where
// that attempt wrote to a run bridge can resume (MLflow's), this attempt
// writes into that run again instead of creating a new one, unless the
// tracker's run variable (MLFLOW_RUN_ID) says otherwise.
func previousAttempt(sp *spool.Spool, multi bool, log *slog.Logger) (*forensics.Lost, pipeline.Overrides) {
	ov := pipeline.Overrides{RunIDs: map[string]string{}, Owned: map[string]bool{}}
	lost, ok := forensics.LostBefore(sp.Attempts(), time.Now())
	if !ok {
		return nil, ov
	}
	log.Warn("the previous attempt of this job stopped without a clean shutdown", "what", lost.Sentence)
	for _, t := range pipeline.Trackers {
		id := lost.Record.Runs[t.Name]
		// A multi-node job's run is found by its key again (the election
		// joins the elected run), which also records this node's end.
		if !t.Resume || id == "" || os.Getenv(t.RunIDEnv) != "" || multi {
			continue
		}
		ov.RunIDs[t.Name], ov.Owned[t.Name] = id, lost.Record.Info[pipeline.CreatedTag(t.Name)] == "true"
		log.Info("writing into the run of that attempt again", "tracker", t.Name, "run", id, "attempt", lost.Attempt)
	}
	return lost, ov
}

// logJob says which job this bridge belongs to, and what it saw and did not
// use.
func logJob(job *pipeline.Job, log *slog.Logger) {
	if job.Multi() {
		log.Info("multi-node job: one run for every node's bridge", "key", job.Key, "key_from", job.KeyFrom,
			"node", job.NodeID, "node_from", job.NodeFrom, "nodes", job.Nodes, "attempt", job.Attempt, "task", job.Task)
	}
	for _, n := range job.Notes {
		log.Info("job detection", "note", n)
	}
	for _, w := range job.Warnings {
		log.Warn(w)
	}
}
