package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/supervisor"
	"github.com/bridge-dev/bridge/tracker"
)

// runAttach is `bridge attach [--run-id ID] [--pid PID]`: no child is
// launched; bridge samples beside an existing run (a notebook kernel's) until
// PID exits or bridge is signalled. It never changes the run's status.
func runAttach(args []string, stderr io.Writer) int {
	var runID string
	var pid int
	fs, cfg, ok := parse("attach", args, stderr, func(fs *pflag.FlagSet) {
		fs.StringVar(&runID, "run-id", "", "run to write to (default MLFLOW_RUN_ID / WANDB_RUN_ID)")
		fs.IntVar(&pid, "pid", 0, "sample until this process exits; its process tree is the process_ scope")
	})
	if !ok {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bridge: attach takes no command (got %q); to launch one use bridge -- CMD\n", fs.Args())
		return exitUsage
	}
	if pid < 0 {
		fmt.Fprintf(stderr, "bridge: --pid=%d: must be a process id\n", pid)
		return exitUsage
	}
	if pid > 0 {
		if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
			fmt.Fprintf(stderr, "bridge: --pid=%d: no such process\n", pid)
			return exitUsage
		}
	}
	log := newLogger(stderr, cfg.LogLevel)
	ov := overrides{mlflowRunID: runID, wandbRunID: runID}
	if runID == "" {
		ov = overrides{mlflowRunID: os.Getenv("MLFLOW_RUN_ID"), wandbRunID: os.Getenv("WANDB_RUN_ID")}
	}
	sinks, err := buildSinks(cfg, ov, log)
	if err != nil {
		return usageError(stderr, err)
	}
	for _, s := range sinks {
		if s.Name() == "mlflow" && ov.mlflowRunID == "" {
			fmt.Fprintln(stderr, "bridge: attach needs the run to write to: --run-id ID or MLFLOW_RUN_ID (e.g. mlflow.active_run().info.run_id)")
			return exitUsage
		}
	}
	src, err := buildSources(cfg, log)
	if err != nil {
		return usageError(stderr, err)
	}
	src.childPID.Store(int64(pid))
	tags := startTags(cfg, src)
	tags["bridge.attached_pid"] = strconv.Itoa(pid)
	runs, _, failed := startSinks(context.Background(), sinks, tracker.StartInfo{NodeID: cfg.NodeID, Tags: tags}, defaultStartTimeout, true, log)
	sess, err := openSession(cfg, log, src, nil, runs, failed, tags)
	if err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, supervisor.Forwarded...)
	defer signal.Stop(sigs)
	sess.run()

	reason := waitForPID(pid, sigs)
	log.Info("attach: stopping", "reason", reason)
	late := make(chan struct{})
	go func() {
		<-sigs // a second signal cuts the flush short
		close(late)
	}()
	sess.stop(late)
	sess.finish(tracker.EndInfo{Time: time.Now(), Tags: map[string]string{"bridge.attach_end": reason}})
	sess.report(stderr, "bridge attach: end", summary.Row{What: "ended", Value: reason})
	return 0
}

// waitForPID returns when pid is gone (or, with pid 0, never by itself) or a
// signal arrives.
func waitForPID(pid int, sigs <-chan os.Signal) string {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case s := <-sigs:
			return "signal " + s.String()
		case <-t.C:
			if pid > 0 && !alive(pid) {
				return fmt.Sprintf("process %d exited", pid)
			}
		}
	}
}

// alive treats a zombie as gone: it has exited, only its parent has not
// reaped it yet.
func alive(pid int) bool {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return false
	}
	st, err := p.Stat()
	return err == nil && st.State != "Z" && st.State != "X"
}
