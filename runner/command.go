package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/bridge-dev/bridge/forensics"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/supervisor"
)

// command is `bridge [flags] -- CMD [ARGS...]`: bridge starts CMD as its
// child (package supervisor), and its exit status is bridge's.
type command struct {
	argv    []string
	lost    *forensics.Lost // an earlier attempt on the spool that was lost
	child   *supervisor.Child
	started time.Time // when the child started
	exit    supervisor.Exit
	// klog is the kernel's log from before the child's start: it names
	// the process an OOM kill took.
	klog *forensics.KernelLog
}

// Command is the target of `bridge -- argv`.
func Command(argv []string) Target { return &command{argv: argv} }

func (c *command) prepare(j *job) error {
	// A command that cannot run is reported before any run is created.
	if _, err := exec.LookPath(c.argv[0]); err != nil {
		fmt.Fprintf(j.opt.Stderr, "bridge: cannot run %q: %v\n", c.argv[0], err)
		return exit(supervisor.StartFailureCode(err))
	}
	// A multi-node job: the key its bridges share, this node, and whether
	// this bridge is the node's lead (docs/multinode.md).
	j.multi = pipeline.DetectJob(j.cfg, c.argv, os.Getenv)
	j.multi.TakeNode("", j.log)
	j.multi.Apply(&j.cfg)
	// An explicit spool is opened once, before the trackers start: what an
	// earlier attempt left there decides the run and goes into its tags. One
	// that cannot be opened (read-only, another bridge writing it, a disk
	// that does not answer) leaves the samples in memory for the trackers:
	// the job runs, sampled, either way; a signal while bridge waits on its
	// disk ends the start at once.
	if j.cfg.Spool != "" {
		if err := pipeline.CheckSpool(j.start, j.cfg.Spool); err != nil {
			return err
		}
		j.sp, _ = pipeline.OpenSpool(j.start, j.cfg.Spool, pipeline.ForJob, j.cfg, j.log)
		if j.start.Err() != nil {
			j.sp.Close()
			return cut("opening its spool")
		}
		if !j.sp.InMemory() {
			c.lost, j.ov = previousAttempt(j.sp, j.multi.Multi(), j.log)
			j.multi.CountAttempts(j.sp.Attempts())
		}
	}
	j.multi.Log(j.log)
	return nil
}

func (c *command) claim(*job) error { return nil }

func (c *command) describe(j *job) []string {
	maps.Copy(j.tags, j.multi.Tags())
	if c.lost != nil {
		// Reported from the start: this attempt may not survive either.
		maps.Copy(j.tags, c.lost.Tags())
	}
	return c.argv
}

// cutShort: the command never ran, and one line says so. A run a tracker
// had already found or created records that end (a run bridge created is
// not left RUNNING), within the flush timeout; a second signal cuts that
// short.
func (c *command) cutShort(j *job, sig syscall.Signal, doing string) int {
	code := 128 + int(sig)
	why := fmt.Sprintf("%s arrived while bridge was %s, before the command started: the command never ran", supervisor.SignalName(sig), doing)
	fmt.Fprintf(j.opt.Stderr, "bridge: %s; exit status %d\n", why, code)
	ctx, cancel := abortable(j.cfg.FlushTimeout, j.early.C)
	defer cancel()
	j.started.End(ctx, notRun(code, sig, why), j.log)
	return code
}

func (c *command) start(j *job) error {
	// Leftover processes of the child's group get their SIGTERM grace inside
	// the flush timeout, which counts from the child's exit.
	grace := min(2*time.Second, max(j.cfg.FlushTimeout, time.Millisecond))
	c.klog = openKernelLog(j)
	child, err := supervisor.Start(supervisor.Options{Argv: c.argv, Env: j.started.ChildEnv(os.Environ()), Log: j.log,
		KillAfter: j.cfg.KillAfter, Grace: grace, Signals: j.early.C})
	if err != nil {
		code := supervisor.StartFailureCode(err)
		fmt.Fprintf(j.opt.Stderr, "bridge: %v\n", err)
		j.sess.Stop(nil)
		j.sess.Finish(notRun(code, 0, err.Error()))
		return exit(code)
	}
	c.child, c.started = child, time.Now()
	j.src.SetChild(child.PID(), os.Getpid()) // bridge adopts orphans: the child subreaper (or PID 1)
	lowerOOMScore(j.log)
	return nil
}

// wait: signals while the child runs are forwarded by the supervisor; one
// after it has exited cuts the end short, instead of killing bridge (which
// would lose the child's exit status). Orphans are reaped until the end is
// over (bridge as PID 1 stays up while it flushes). From here the child's
// exit status is bridge's.
func (c *command) wait(j *job) ending {
	c.exit = c.child.Wait()
	abort, stop := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case sig := <-c.child.Late():
			j.log.Warn("signal during the final flush: bridge exits now; "+j.sess.Unsent(), "signal", sig)
			close(abort)
		case <-stop:
		}
	}()
	go supervisor.ReapOrphans(stop)
	// The whole end of the run, counted from the child's exit, fits in
	// --flush-timeout.
	return ending{deadline: c.exit.Time.Add(j.cfg.FlushTimeout), abort: abort, done: sync.OnceFunc(func() { close(stop) }), code: c.exit.Code}
}

// end: the child's exit, and forensics' verdict on why it ended, each
// step apart (endStep).
func (c *command) end(j *job) result {
	r := result{title: "bridge: end of run", start: c.started, code: c.exit.Code}
	r.end.ExitCode, r.end.Signal, r.end.Time, r.end.Tags = c.exit.Code, int(c.exit.Signal), c.exit.Time, c.exit.Tags()
	var verdictRows []summary.Row
	endStep(j.log, "the exit's verdict", func() {
		run := forensics.Run{Exit: c.exit, Acc: j.sess.Acc(), Xids: j.src.XidEvents(), CgroupVersion: j.src.CgroupVersion(),
			Start: c.started, Processes: j.src.Processes()}
		// The kernel's log and bridge's cgroup, read within the collect
		// timeout and the end's own deadline: a read that does not answer
		// costs the killed process's name, never the exit status.
		ctx, cancel := context.WithDeadline(context.Background(),
			earliest(time.Now().Add(j.cfg.CollectTimeout), c.exit.Time.Add(j.cfg.FlushTimeout)))
		defer cancel()
		run.Kills, run.KillsWhy = c.klog.Kills(ctx)
		run.Cgroup = forensics.OwnCgroup(ctx, j.cfg.ProcRoot)
		ev := forensics.FromRun(run)
		verdict := forensics.Classify(ev)
		maps.Copy(r.end.Tags, verdict.Tags(ev))
		r.end.Status = verdict.Status(ev)
		verdictRows = verdict.Rows(ev)
	})
	if j.multi.Multi() {
		// For the job's report: when by which clock, and the node's figures
		// (the report then never reads this node's series).
		endStep(j.log, "the node's figures", func() {
			// Read within the collect timeout, and within the end's own
			// deadline: a clocksource file that does not answer costs its
			// tag (clocksource unknown), never the child's exit status.
			clockCtx, cancelClock := context.WithDeadline(context.Background(),
				earliest(time.Now().Add(j.cfg.CollectTimeout), c.exit.Time.Add(j.cfg.FlushTimeout)))
			defer cancelClock()
			r.end.Tags[report.TagEndedClock] = forensics.ClockSource(clockCtx, j.cfg.SysRoot)
			r.end.Tags[report.TagFigures] = report.FiguresTag(j.sess.Acc())
		})
	}
	r.head = append([]summary.Row{{What: "exit status", Value: c.exit.Describe()}}, verdictRows...)
	if c.lost != nil {
		r.head = append(r.head, c.lost.Rows()...)
	}
	return r
}

// openKernelLog opens the kernel's log at its end, before the child
// starts, within the collect timeout: the OOM kills logged after it are
// the job's. One that cannot be read says why at the end.
func openKernelLog(j *job) *forensics.KernelLog {
	ctx, cancel := context.WithTimeout(j.start, max(j.cfg.CollectTimeout, time.Millisecond))
	defer cancel()
	return forensics.OpenKernelLog(ctx, forensics.KernelLogPath)
}

func (c *command) release(j *job) {
	c.klog.Close()
	if c.child != nil {
		c.child.Release()
	}
	if j.multi != nil {
		j.multi.Release()
	}
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
