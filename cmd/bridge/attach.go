package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/procfs"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

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
	ov := pipeline.SameRun(runID)
	if runID == "" {
		ov = pipeline.Overrides{RunIDs: map[string]string{}}
		for _, t := range pipeline.Trackers {
			ov.RunIDs[t.Name] = os.Getenv(t.RunIDEnv)
		}
	}
	sinks, off := pipeline.BuildSinks(cfg, ov, nil, log)
	for _, s := range sinks {
		if t, _ := pipeline.Registered(s.Name()); t.AttachRunHint != "" && ov.RunIDs[t.Name] == "" {
			fmt.Fprintf(stderr, "bridge: attach needs the run to write to: --run-id ID or %s (e.g. %s)\n", t.RunIDEnv, t.AttachRunHint)
			return exitUsage
		}
	}
	src, err := pipeline.BuildSources(cfg, log)
	if err != nil {
		return usageError(stderr, err)
	}
	src.SetChild(pid, 0)
	tags := src.StartTags(cfg, version)
	tags["bridge.attached_pid"] = strconv.Itoa(pid)
	started := pipeline.StartSinksWith(context.Background(), sinks, tracker.StartInfo{NodeID: cfg.NodeID, Tags: tags},
		pipeline.StartPolicy{Timeout: cfg.StartTimeout, Background: true}, log)
	sess := pipeline.Open(pipeline.Options{Settings: pipeline.SettingsFrom(cfg), Log: log, Version: version,
		Sources: src, Started: started, Off: off, StartTags: tags})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, supervisor.Forwarded...)
	defer signal.Stop(sigs)
	sess.Run()

	reason := waitForPID(procs, pid, filepath.Clean(cfg.ProcRoot) == "/proc", sigs)
	log.Info("attach: stopping", "reason", reason)
	late := make(chan struct{})
	go func() {
		<-sigs // a second signal cuts the flush short
		close(late)
	}()
	sess.EndBy(time.Now().Add(cfg.FlushTimeout))
	sess.Stop(late)
	sess.Finish(tracker.EndInfo{Time: time.Now(), Tags: map[string]string{"bridge.attach_end": reason}})
	sess.Report(stderr, "bridge attach: end", summary.Row{What: "ended", Value: reason})
	return 0
}

// waitForPID returns when pid is gone or a signal arrives.
func waitForPID(procs procfs.FS, pid int, ownNS bool, sigs <-chan os.Signal) string {
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
