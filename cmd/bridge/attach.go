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

	"github.com/prometheus/procfs"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/internal/attachlock"
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
		fs.StringVar(&runID, "run-id", "", "run to write to (default MLFLOW_RUN_ID / WANDB_RUN_ID)")
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
	procs, err := procfs.NewFS(cfg.ProcRoot)
	if err != nil {
		fmt.Fprintf(stderr, "bridge: --proc-root=%s: %v\n", cfg.ProcRoot, err)
		return exitUsage
	}
	if !alive(procs, pid) {
		fmt.Fprintf(stderr, "bridge: --pid=%d: no such process under %s\n", pid, cfg.ProcRoot)
		return exitUsage
	}
	log := newLogger(stderr, cfg.LogLevel)
	// A signal from here on ends attach; one before sampling starts calls
	// the trackers' start off.
	startCtx, cancelStart := context.WithCancel(context.Background())
	defer cancelStart()
	early := supervisor.WatchEarly(cancelStart)
	defer early.Release()
	ov := pipeline.SameRun(runID)
	if runID == "" {
		ov = pipeline.Overrides{RunIDs: map[string]string{}}
		for _, t := range pipeline.Trackers {
			ov.RunIDs[t.Name] = os.Getenv(t.RunIDEnv)
		}
	}
	// The run is its owner's: once it ends it (mlflow.end_run()), attach
	// writes nothing more into it and stops, as MLflow's own monitor does.
	ov.Follow = true
	sinks, off := pipeline.BuildSinks(cfg, ov, nil, log)
	for _, s := range sinks {
		if t, _ := pipeline.Registered(s.Name()); t.AttachRunHint != "" && ov.RunIDs[t.Name] == "" {
			fmt.Fprintf(stderr, "bridge: attach needs the run to write to: --run-id ID or %s (e.g. %s)\n", t.RunIDEnv, t.AttachRunHint)
			return exitUsage
		}
	}
	// One attach per process, run and node: a second one (a notebook cell
	// run twice) would log every point twice.
	runs := map[string]string{}
	for _, s := range sinks {
		runs[s.Name()] = ov.RunIDs[s.Name()]
	}
	me := attachlock.Holder{PID: os.Getpid(), Target: pid, Runs: runs, Node: attachNode(cfg), Since: time.Now().UTC()}
	lock, holder, err := attachlock.Acquire(os.TempDir(), attachlock.Key{PID: pid, Start: startTime(procs, pid), Runs: runs, Node: me.Node}, me)
	switch {
	case errors.Is(err, attachlock.ErrHeld):
		fmt.Fprintf(stderr, "bridge attach: process %d%s is monitored already by %s; this attach does nothing\n", pid, runsText(runs, me.Node), holder)
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
		fmt.Fprintf(stderr, "bridge attach: %s before sampling started: nothing was sampled or written\n", unixSignalName(sig))
		return 0
	}
	sess := pipeline.Open(pipeline.Options{Settings: pipeline.SettingsFrom(cfg), Log: log, Version: version,
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

	reason := waitForPID(procs, pid, filepath.Clean(cfg.ProcRoot) == "/proc", early.C, sess.RunEnded())
	log.Info("attach: stopping", "reason", reason)
	late := make(chan struct{})
	go func() {
		<-early.C // a second signal cuts the flush short
		close(late)
	}()
	sess.EndBy(time.Now().Add(cfg.FlushTimeout))
	sess.Stop(late)
	sess.Finish(tracker.EndInfo{Time: time.Now(), Tags: map[string]string{"bridge.attach_end": reason}})
	sess.Report(stderr, "bridge attach: end", summary.Row{What: "ended", Value: reason})
	return 0
}

// attachNode is the node id attach's series are keyed under: bridge's own,
// else MLflow's variable, as the MLflow sink reads it.
func attachNode(cfg config.Config) string {
	if cfg.NodeID != "" {
		return cfg.NodeID
	}
	return os.Getenv("MLFLOW_SYSTEM_METRICS_NODE_ID")
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

// startTime is pid's start time in clock ticks since boot: with the pid,
// it names one process (a pid is reused once its process is gone); 0 when
// it cannot be read.
func startTime(procs procfs.FS, pid int) uint64 {
	p, err := procs.Proc(pid)
	if err != nil {
		return 0
	}
	st, err := p.Stat()
	if err != nil {
		return 0
	}
	return st.Starttime
}

// waitForPID returns when pid is gone, a signal arrives, or the run was
// ended by its owner.
func waitForPID(procs procfs.FS, pid int, ownNS bool, sigs <-chan os.Signal, ended <-chan struct{}) string {
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		watchExit(procs, pid, ownNS)
	}()
	select {
	case s := <-sigs:
		return "signal " + s.String()
	case <-exited:
		return fmt.Sprintf("process %d exited", pid)
	case <-ended:
		return "the run was ended by its owner"
	}
}

// watchExit returns once pid has exited. A pidfd (Linux 5.3) becomes
// readable at the exit, so one thread waits in poll without waking bridge
// (each wake-up costs about as much as a sample) and a reused pid is never
// mistaken for it; it names a process of bridge's own pid namespace, so only
// when --proc-root is /proc. Else, or without pidfds, /proc is looked at
// every 500 ms.
func watchExit(procs procfs.FS, pid int, ownNS bool) {
	if ownNS {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			defer unix.Close(fd)
			for {
				_, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
				if err == nil {
					return
				}
				if err != unix.EINTR {
					break // fall back to looking
				}
			}
		}
	}
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for range t.C {
		if !alive(procs, pid) {
			return
		}
	}
}

// alive treats a zombie as gone: it has exited, only its parent has not
// reaped it yet.
func alive(procs procfs.FS, pid int) bool {
	p, err := procs.Proc(pid)
	if err != nil {
		return false
	}
	st, err := p.Stat()
	return err == nil && st.State != "Z" && st.State != "X"
}
