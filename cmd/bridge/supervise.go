package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/bridge-dev/bridge/forensics"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/supervisor"
	"github.com/bridge-dev/bridge/tracker"
)

// runSupervise is `bridge [flags] -- CMD [ARGS...]`.
func runSupervise(args []string, stdout, stderr io.Writer) (status int) {
	// From here on a signal is bridge's to handle: before the child starts,
	// a terminating one ends the start (a spool on a disk that does not
	// answer, an election, a slow tracker) at once, and the child is never
	// started.
	startCtx, cancelStart := context.WithCancel(context.Background())
	defer cancelStart()
	early := supervisor.WatchEarly(cancelStart)
	defer early.Stop()
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
	if startCtx.Err() != nil {
		return neverStarted(early.Stop(), "reading its settings", pipeline.Started{}, cfg.FlushTimeout, early.C, stderr, log)
	}

	// A command that cannot run is reported before any run is created.
	if _, err := exec.LookPath(argv[0]); err != nil {
		fmt.Fprintf(stderr, "bridge: cannot run %q: %v\n", argv[0], err)
		return supervisor.StartFailureCode(err)
	}
	// A multi-node job: the key its bridges share, this node, and whether
	// this bridge is the node's lead (docs/multinode.md).
	job := pipeline.DetectJob(cfg, argv, os.Getenv)
	job.TakeNode("", log)
	defer job.Release()
	job.Apply(&cfg)
	// An explicit spool is opened once, before the trackers start: what an
	// earlier attempt left there decides the run and goes into its tags. One
	// that cannot be opened (read-only, another bridge writing it) leaves the
	// samples in memory for the trackers: the job runs, sampled, either way.
	var sp *spool.Spool
	var lost *forensics.Lost
	var ov pipeline.Overrides
	if cfg.Spool != "" {
		if err := pipeline.CheckSpool(startCtx, cfg.Spool); err != nil {
			return usageError(stderr, err)
		}
		sp, _ = pipeline.OpenSpool(startCtx, cfg.Spool, pipeline.ForJob, cfg, log)
		if startCtx.Err() != nil {
			sp.Close()
			return neverStarted(early.Stop(), "opening its spool", pipeline.Started{}, cfg.FlushTimeout, early.C, stderr, log)
		}
		if !sp.InMemory() {
			lost, ov = previousAttempt(sp, job.Multi(), log)
			job.CountAttempts(sp.Attempts())
		}
	}
	job.Log(log)
	sinks, off := pipeline.Trackers().BuildSinks(cfg, ov, job, log)
	src, err := pipeline.BuildSources(cfg, log)
	if err != nil {
		return usageError(stderr, err)
	}
	tags := src.StartTags(cfg, version)
	for k, v := range job.Tags() {
		tags[k] = v
	}
	var rows []summary.Row // the end-of-run table's own rows, after the exit's
	if lost != nil {
		// Reported from the start: this attempt may not survive either.
		for k, v := range lost.Tags() {
			tags[k] = v
		}
		rows = lost.Rows()
	}
	// Provenance (the git repository's files) within the collect timeout.
	provCtx, cancelProv := context.WithTimeout(startCtx, cfg.CollectTimeout)
	info := pipeline.JobStartInfo(provCtx, cfg, argv, os.Environ(), tags, log)
	cancelProv()
	started := pipeline.StartSinksWith(startCtx, sinks, info, pipeline.StartPolicy{Timeout: cfg.StartTimeout, Background: true}, log).WithOff(off)
	if sig := early.Stop(); sig != 0 {
		return neverStarted(sig, "starting its trackers", started, cfg.FlushTimeout, early.C, stderr, log)
	}
	started.SayLate(pipeline.Trackers(), job, log)
	started.MarkCreated(tags) // for a restarted bridge: see previousAttempt

	// The job's other bridges on this node have spools of their own (Task).
	sess := pipeline.Open(pipeline.Options{Settings: cfg, Task: job.SpoolTask(), Log: log, Version: version,
		Sources: src, Spool: sp, Started: started, Off: off, StartTags: tags})
	// Leftover processes of the child's group get their SIGTERM grace inside
	// the flush timeout, which counts from the child's exit.
	grace := min(2*time.Second, max(cfg.FlushTimeout, time.Millisecond))
	child, err := supervisor.Start(supervisor.Options{Argv: argv, Env: started.ChildEnv(os.Environ()), Log: log, KillAfter: cfg.KillAfter, Grace: grace,
		Signals: early.C})
	if err != nil {
		code := supervisor.StartFailureCode(err)
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		sess.Stop(nil)
		sess.Finish(tracker.EndInfo{ExitCode: code, Time: time.Now(), Tags: map[string]string{"bridge.exit_code": strconv.Itoa(code), "bridge.error": err.Error()}})
		return code
	}
	// Signals after the child has exited cut the final flush short instead
	// of killing bridge (which would lose the child's exit status).
	defer child.Release()
	src.SetChild(child.PID(), os.Getpid()) // bridge adopts orphans: the child subreaper (or PID 1)
	lowerOOMScore(log)
	sess.Run()

	// Signals while the child runs were forwarded by the supervisor; one
	// after it has exited cuts the final flush short.
	exit := child.Wait()
	// From here the child's exit status is bridge's whatever the end does:
	// a panic in one step of the end is logged and the next step runs, and
	// one anywhere else on this goroutine still returns the child's status
	// (unrecovered, Go's runtime would exit 2).
	defer keepStatus(&status, exit.Code, log)
	// The whole end of the run, counted from the child's exit, fits in
	// --flush-timeout.
	sess.EndBy(exit.Time.Add(cfg.FlushTimeout))
	abort := make(chan struct{})
	stopReaping := make(chan struct{})
	stopReap := sync.OnceFunc(func() { close(stopReaping) })
	defer stopReap()
	go func() {
		select {
		case sig := <-child.Late():
			log.Warn("signal during the final flush: bridge exits now; "+sess.Unsent(), "signal", sig)
			close(abort)
		case <-stopReaping:
		}
	}()

	go supervisor.ReapOrphans(stopReaping)
	endStep(log, "stopping the sampling", func() { sess.Stop(abort) })
	end := tracker.EndInfo{ExitCode: exit.Code, Signal: int(exit.Signal), Time: exit.Time, Tags: exit.Tags()}
	var verdictRows []summary.Row
	endStep(log, "the exit's verdict", func() {
		ev := forensics.FromRun(forensics.Run{Exit: exit, Acc: sess.Acc(), Xids: src.XidEvents(), CgroupVersion: src.CgroupVersion()})
		verdict := forensics.Classify(ev)
		for k, v := range verdict.Tags(ev) {
			end.Tags[k] = v
		}
		end.Status = verdict.Status(ev)
		verdictRows = verdict.Rows(ev)
	})
	if job.Multi() {
		// For the job's report: when by which clock, and the node's figures
		// (the report then never reads this node's series).
		endStep(log, "the node's figures", func() {
			// Read within the collect timeout, and within the end's own
			// deadline: a clocksource file that does not answer costs its
			// tag (clocksource unknown), never the child's exit status.
			clockCtx, cancelClock := context.WithDeadline(context.Background(),
				earliest(time.Now().Add(cfg.CollectTimeout), exit.Time.Add(cfg.FlushTimeout)))
			defer cancelClock()
			end.Tags[report.TagEndedClock] = forensics.ClockSource(clockCtx, cfg.SysRoot)
			end.Tags[report.TagFigures] = report.FiguresTag(sess.Acc())
		})
	}
	endStep(log, "recording the end", func() { sess.Finish(end) })
	stopReap()

	rows = append(append([]summary.Row{{What: "exit status", Value: exit.Describe()}}, verdictRows...), rows...)
	endStep(log, "the end-of-run table", func() { sess.Report(stderr, "bridge: end of run", rows...) })
	return exit.Code
}

// endStep runs one step of the end of a run, after the child has exited:
// a panic in it is logged, and the end goes on to its next step, so that
// the end record, the table and the child's exit status never depend on
// one step's bug.
func endStep(log *slog.Logger, what string, step func()) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("internal error at the end of the run; the end goes on, and the command's exit status is still bridge's",
				"in", what, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	step()
}

// keepStatus, deferred once the child has exited, makes its exit status
// code bridge's even when a panic ends the rest of the run: the panic is
// logged, not Go's exit 2.
func keepStatus(status *int, code int, log *slog.Logger) {
	if p := recover(); p != nil {
		log.Error("internal error after the command exited; bridge exits with the command's status",
			"panic", p, "stack", string(debug.Stack()))
		*status = code
	}
}

// earliest is the earlier of two times.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// lowerOOMScore takes bridge itself (after the child has forked: the value
// is inherited, and the training process must stay the OOM killer's
// choice) out of the OOM killer's choice.
func lowerOOMScore(log *slog.Logger) {
	if err := forensics.SetOOMScoreAdj("/proc", os.Getpid(), forensics.OOMScoreAdjMin); err != nil {
		// Most containers lack CAP_SYS_RESOURCE: normal, so one short line
		// at debug rather than the errno chain at every start.
		why := "needs CAP_SYS_RESOURCE"
		if !errors.Is(err, forensics.ErrOOMScorePermission) {
			why = err.Error()
		}
		log.Debug("bridge's oom_score_adj is not lowered: a group OOM kill may take bridge too", "why", why)
		return
	}
	log.Debug("bridge set its oom_score_adj to -1000")
}

// neverStarted ends a start cut short by a terminating signal: the command
// never ran, and one line says so. A run a tracker had already found or
// created records that end (a run bridge created is not left RUNNING),
// within the flush timeout; a second signal cuts that short.
func neverStarted(sig syscall.Signal, doing string, started pipeline.Started, flush time.Duration, again <-chan os.Signal, stderr io.Writer, log *slog.Logger) int {
	code := 128 + int(sig)
	why := fmt.Sprintf("%s arrived while bridge was %s, before the command started: the command never ran", supervisor.SignalName(sig), doing)
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
	started.End(ctx, tracker.EndInfo{ExitCode: code, Signal: int(sig), Time: time.Now(),
		Tags: map[string]string{"bridge.exit_code": strconv.Itoa(code), "bridge.error": why}}, log)
	return code
}

// previousAttempt finds an earlier attempt on sp that stopped without a
// clean shutdown (a group OOM kill took bridge too, a node failure). Where
// that attempt wrote to a run bridge can resume, this attempt writes into
// that run again instead of creating a new one (pipeline.ResumeRuns).
func previousAttempt(sp *spool.Spool, multi bool, log *slog.Logger) (*forensics.Lost, pipeline.Overrides) {
	lost, ok := forensics.LostBefore(sp.Attempts(), time.Now())
	if !ok {
		return nil, pipeline.Overrides{RunIDs: map[string]string{}, Owned: map[string]bool{}}
	}
	log.Warn("the previous attempt of this job stopped without a clean shutdown", "what", lost.Sentence)
	return lost, pipeline.Trackers().ResumeRuns(lost.Record, multi, os.Getenv, log)
}
