package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bridge-dev/bridge/internal/attachlock"
	"github.com/bridge-dev/bridge/internal/printable"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/supervisor"
	"github.com/bridge-dev/bridge/tracker"
)

// attached is `bridge attach --pid PID [--run-id ID]`: no child is
// launched; bridge samples beside an existing run (a notebook kernel's)
// until PID exits, the run's owner ends it, or bridge is signalled. It
// never changes the run's status, and exits 0.
type attached struct {
	pid    int
	runID  string
	proc   *supervisor.Watched
	lock   *attachlock.Lock // nil: not taken
	me     attachlock.Holder
	since  time.Time // when sampling began
	reason string    // why attach stopped
}

// Attach is the target of `bridge attach --pid pid --run-id runID` (""
// for each tracker's run variable).
func Attach(pid int, runID string) Target { return &attached{pid: pid, runID: runID} }

func (a *attached) prepare(j *job) error {
	// Without a process to follow, attach would sample until killed.
	if a.pid <= 0 {
		return fmt.Errorf("--pid=%d: attach needs the process to sample beside, e.g. --pid $$ in a notebook's shell or os.getpid() in the kernel", a.pid)
	}
	// The pid is one of --proc-root's namespace, as the process_ scope's.
	proc, err := supervisor.Watch(j.cfg.ProcRoot, a.pid)
	switch {
	case errors.Is(err, supervisor.ErrNoProcess):
		return fmt.Errorf("--pid=%d: no such process under %s", a.pid, j.cfg.ProcRoot)
	case err != nil:
		return fmt.Errorf("--proc-root=%s: %w", j.cfg.ProcRoot, err)
	}
	a.proc = proc
	if j.cfg.Spool != "" {
		if err := pipeline.CheckSpool(j.start, j.cfg.Spool); err != nil {
			return err
		}
	}
	j.ov = pipeline.Trackers().AttachRuns(a.runID, os.Getenv)
	return nil
}

// claim: one attach per process, run and node: a second one (a notebook
// cell run twice) would log every point twice.
func (a *attached) claim(j *job) error {
	if err := pipeline.Trackers().MissingRun(j.sinks, j.ov); err != nil {
		return err
	}
	runs := map[string]string{}
	for _, s := range j.sinks {
		runs[s.Name()] = j.ov.RunIDs[s.Name()]
	}
	a.me = attachlock.Holder{PID: os.Getpid(), Target: a.pid, Runs: runs, Node: pipeline.Trackers().NodeID(j.cfg.NodeID, os.Getenv), Since: time.Now().UTC()}
	lock, holder, err := attachlock.Acquire(os.TempDir(), attachlock.Key{PID: a.pid, Start: a.proc.StartTime(), Runs: runs, Node: a.me.Node}, a.me)
	switch {
	case errors.Is(err, attachlock.ErrHeld):
		fmt.Fprintf(j.opt.Stderr, "bridge attach: process %d%s is monitored already by %s; this attach does nothing\n",
			a.pid, printable.Line(runsText(runs, a.me.Node)), printable.Line(holder.String()))
		return exit(0)
	case err != nil:
		j.log.Warn("cannot take the attach lock; a second attach for the same process and run would not be noticed", "err", err)
	default:
		a.lock = lock
	}
	return nil
}

func (a *attached) describe(j *job) []string {
	j.src.SetChild(a.pid, 0)
	j.tags[tagAttachedPID] = strconv.Itoa(a.pid)
	return nil
}

func (a *attached) cutShort(j *job, sig syscall.Signal, _ string) int {
	fmt.Fprintf(j.opt.Stderr, "bridge attach: %s before sampling started: nothing was sampled or written\n", supervisor.SignalName(sig))
	return 0
}

// start: the process runs already; its lock says where this attach
// spools.
func (a *attached) start(j *job) error {
	a.since = time.Now()
	if a.lock == nil {
		return nil
	}
	if abs, err := filepath.Abs(j.sess.SpoolFile()); err == nil && j.sess.SpoolFile() != "" {
		a.me.Spool = abs
	}
	if err := a.lock.Update(a.me); err != nil {
		j.log.Debug("cannot describe this attach in its lock file", "err", err)
	}
	return nil
}

func (a *attached) wait(j *job) ending {
	a.reason = waitForPID(a.proc, j.early.C, j.sess.RunEnded())
	j.log.Info("attach: stopping", "reason", a.reason)
	// A second signal cuts the end short.
	late, stop := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case <-j.early.C:
			close(late)
		case <-stop:
		}
	}()
	return ending{deadline: time.Now().Add(j.cfg.FlushTimeout), abort: late, done: sync.OnceFunc(func() { close(stop) })}
}

func (a *attached) end(*job) result {
	return result{end: tracker.EndInfo{Time: time.Now(), Tags: map[string]string{tagAttachEnd: a.reason}},
		title: "bridge attach: end", start: a.since, head: []summary.Row{{What: "ended", Value: "bridge stopped sampling: " + a.reason}}}
}

func (a *attached) release(j *job) {
	if a.lock != nil {
		a.lock.Release()
	}
	j.early.Release()
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
