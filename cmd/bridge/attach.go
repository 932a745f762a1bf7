package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/internal/attachlock"
	"github.com/bridge-dev/bridge/internal/printable"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/supervisor"
	"github.com/bridge-dev/bridge/tracker"
)

// runAttach is `bridge attach [--run-id ID] [--pid PID]`: no child is
// launched; bridge samples beside an existing run (a notebook kernel's) until
// PID exits or bridge is signalled. It never changes the run's status.
func runAttach(args []string, stdout, stderr io.Writer) int {
	var runID string
	var pid int
	fs, cfg, code := parse("attach", args, stdout, stderr, func(fs *pflag.FlagSet) {
		fs.StringVar(&runID, "run-id", "", "run to write to (default "+pipeline.Trackers().RunIDVars()+")")
		fs.IntVar(&pid, "pid", 0, "sample until this process exits (required); its process tree is the process_ scope")
	})
	if fs == nil {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bridge: attach takes no command (got %q); to launch one use bridge -- CMD\n", fs.Args())
		return exitUsage
	}
	// Without a process to follow, attach would sample until killed.
	if pid <= 0 {
		fmt.Fprintf(stderr, "bridge: --pid=%d: attach needs the process to sample beside, e.g. --pid $$ in a notebook's shell or os.getpid() in the kernel\n", pid)
		return exitUsage
	}
	// The pid is one of --proc-root's namespace, as the process_ scope's.
	proc, err := supervisor.Watch(cfg.ProcRoot, pid)
	switch {
	case errors.Is(err, supervisor.ErrNoProcess):
		fmt.Fprintf(stderr, "bridge: --pid=%d: no such process under %s\n", pid, cfg.ProcRoot)
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "bridge: --proc-root=%s: %v\n", cfg.ProcRoot, err)
		return exitUsage
	}
	log := newLogger(stderr, cfg.LogLevel)
	// A signal from here on ends attach; one before sampling starts calls
	// the trackers' start off.
	startCtx, cancelStart := context.WithCancel(context.Background())
	defer cancelStart()
	early := supervisor.WatchEarly(cancelStart)
	defer early.Release()
	if cfg.Spool != "" {
		if err := pipeline.CheckSpool(startCtx, cfg.Spool); err != nil {
			return usageError(stderr, err)
		}
	}
	ov := pipeline.Trackers().AttachRuns(runID, os.Getenv)
	sinks, off := pipeline.Trackers().BuildSinks(cfg, ov, nil, log)
	if err := pipeline.Trackers().MissingRun(sinks, ov); err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return exitUsage
	}
	// One attach per process, run and node: a second one (a notebook cell
	// run twice) would log every point twice.
	runs := map[string]string{}
	for _, s := range sinks {
		runs[s.Name()] = ov.RunIDs[s.Name()]
	}
	me := attachlock.Holder{PID: os.Getpid(), Target: pid, Runs: runs, Node: pipeline.Trackers().NodeID(cfg.NodeID, os.Getenv), Since: time.Now().UTC()}
	lock, holder, err := attachlock.Acquire(os.TempDir(), attachlock.Key{PID: pid, Start: proc.StartTime(), Runs: runs, Node: me.Node}, me)
	switch {
	case errors.Is(err, attachlock.ErrHeld):
		fmt.Fprintf(stderr, "bridge attach: process %d%s is monitored already by %s; this attach does nothing\n", pid, printable.Line(runsText(runs, me.Node)), printable.Line(holder.String()))
		return 0
	case err != nil:
		log.Warn("cannot take the attach lock; a second attach for the same process and run would not be noticed", "err", err)
	default:
		defer lock.Release()
	}
	src, err := pipeline.BuildSources(cfg, log)
	if err != nil {
		return usageError(stderr, err)
	}
	src.SetChild(pid, 0)
	tags := src.StartTags(cfg, version)
	tags["bridge.attached_pid"] = strconv.Itoa(pid)
	started := pipeline.StartSinksWith(startCtx, sinks, tracker.StartInfo{NodeID: cfg.NodeID, Tags: tags},
		pipeline.StartPolicy{Timeout: cfg.StartTimeout, Background: true}, log)
	if sig := early.Stop(); sig != 0 {
		fmt.Fprintf(stderr, "bridge attach: %s before sampling started: nothing was sampled or written\n", supervisor.SignalName(sig))
		return 0
	}
	sess := pipeline.Open(pipeline.Options{Settings: cfg, Log: log, Version: version,
		Sources: src, Started: started, Off: off, StartTags: tags})
	if lock != nil {
		if abs, err := filepath.Abs(sess.SpoolFile()); err == nil && sess.SpoolFile() != "" {
			me.Spool = abs
		}
		if err := lock.Update(me); err != nil {
			log.Debug("cannot describe this attach in its lock file", "err", err)
		}
	}
	sess.Run()

	reason := waitForPID(proc, early.C, sess.RunEnded())
	log.Info("attach: stopping", "reason", reason)
	// A second signal cuts the flush short.
	late, stopLate := make(chan struct{}), make(chan struct{})
	defer close(stopLate)
	go func() {
		select {
		case <-early.C:
			close(late)
		case <-stopLate:
		}
	}()
	sess.EndBy(time.Now().Add(cfg.FlushTimeout))
	sess.Stop(late)
	sess.Finish(tracker.EndInfo{Time: time.Now(), Tags: map[string]string{"bridge.attach_end": reason}})
	sess.Report(stderr, "bridge attach: end", summary.Row{What: "ended", Value: reason})
	return 0
}

// runsText names runs (and the node) for a message.
func runsText(runs map[string]string, node string) string {
	var parts []string
	for t, r := range runs {
		parts = append(parts, t+" run "+r)
	}
	sort.Strings(parts)
	s := ""
	if len(parts) > 0 {
		s = " and " + strings.Join(parts, ", ")
	}
	if node != "" {
		s += " (node " + node + ")"
	}
	return s
}

// waitForPID returns when the process is gone, a signal arrives, or the
// run was ended by its owner, and says which. The watch of the process has
// ended when it returns: no goroutine is left waiting in poll.
func waitForPID(proc *supervisor.Watched, sigs <-chan os.Signal, ended <-chan struct{}) string {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		proc.Wait(ctx)
	}()
	var reason string
	select {
	case <-exited:
		return fmt.Sprintf("process %d exited", proc.PID())
	case s := <-sigs:
		reason = "signal " + s.String()
	case <-ended:
		reason = "the run was ended by its owner"
	}
	cancel()
	<-exited
	return reason
}
