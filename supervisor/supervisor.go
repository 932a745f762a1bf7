// Package supervisor runs the training command as bridge's child, the way tini
// and dumb-init do: signals forwarded to the child's process group, orphaned
// processes reaped (bridge is PID 1 or a child subreaper), and the child's exit
// status mirrored (128+N when it died of signal N).
package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Forwarded are the signals bridge passes on to the child's process group.
var Forwarded = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
}

// Options describe the child.
type Options struct {
	Argv []string // command and arguments, run directly (no shell)
	Env  []string // full environment of the child
	Log  *slog.Logger
	// Grace is how long leftover processes of the child's group get after
	// SIGTERM, once the main child has exited, before bridge exits anyway.
	Grace time.Duration
	// KillAfter, when positive, is how long the child gets after bridge
	// forwards a terminating signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT)
	// before bridge sends SIGKILL to its group. Zero waits forever, as tini.
	KillAfter time.Duration
	// Signals, when set, is the caller's channel, already subscribed to
	// Forwarded (signal.Notify) while bridge prepared the start (Early):
	// Start forwards what it receives from then on, so that no signal falls
	// between the caller's watch and the child's. Nil: Start subscribes a
	// channel of its own.
	Signals chan os.Signal
}

// isTerminating reports whether sig asks bridge to end: SIGTERM, SIGINT,
// SIGHUP, SIGQUIT.
func isTerminating(sig os.Signal) bool {
	s, ok := sig.(syscall.Signal)
	return ok && slices.Contains(terminating, s)
}

// terminating are the forwarded signals after which KillAfter runs.
var terminating = []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT}

// SignalRecord is one signal bridge forwarded.
type SignalRecord struct {
	Signal syscall.Signal
	Time   time.Time
}

// Exit is how the child ended.
type Exit struct {
	Code      int            // what bridge exits with: the child's status, or 128+signal
	Signal    syscall.Signal // the signal that killed the child, 0 if it exited
	Forwarded []SignalRecord // signals bridge forwarded to the child, in order
	Time      time.Time      // when the child's exit was reaped
	// KilledAfter is non-zero when bridge sent SIGKILL because the child
	// outlived a terminating signal by Options.KillAfter.
	KilledAfter time.Duration
}

// Child is a running child process.
type Child struct {
	pid  int
	log  *slog.Logger
	opts Options

	sigs     chan os.Signal // the signals bridge forwards
	chld     chan os.Signal // SIGCHLD alone, capacity 1 (see loop)
	done     chan struct{}
	exit     Exit
	late     chan os.Signal // signals that arrived after the child was reaped
	stopLate chan struct{}
	lateOnce sync.Once

	mu        sync.Mutex
	forwarded []SignalRecord

	killTimer *time.Timer // started by the first terminating signal
	killC     <-chan time.Time
	killed    bool
	tookTTY   bool // the child's group was made the terminal's foreground
}

// Start starts the child. The child gets a process group of its own so that a
// signal reaches its workers too; when stdin is a terminal the child's group is
// made the terminal's foreground group, so Ctrl-C and interactive reads (pdb)
// behave as without bridge.
func Start(opts Options) (*Child, error) {
	if len(opts.Argv) == 0 {
		return nil, errors.New("no command given: usage is bridge [flags] -- CMD [ARGS...]")
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Grace == 0 {
		opts.Grace = 2 * time.Second
	}
	path, err := exec.LookPath(opts.Argv[0])
	if err != nil {
		return nil, fmt.Errorf("cannot run %q: %w", opts.Argv[0], err)
	}
	if os.Getpid() != 1 {
		// Orphaned grandchildren (DataLoader workers whose parent died) are
		// reparented to us, so that we can reap them.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			opts.Log.Debug("cannot become child subreaper", "err", err)
		}
	}

	c := &Child{log: opts.Log, opts: opts, sigs: opts.Signals, chld: make(chan os.Signal, 1),
		done: make(chan struct{}), late: make(chan os.Signal, 1), stopLate: make(chan struct{})}
	// Subscribe before the child exists so that no signal is lost in between.
	signal.Notify(c.chld, syscall.SIGCHLD)
	if c.sigs == nil {
		c.sigs = make(chan os.Signal, 32)
		signal.Notify(c.sigs, Forwarded...)
	}

	attr := &syscall.SysProcAttr{Setpgid: true}
	if inForeground(0) {
		attr.Foreground = true
		attr.Ctty = 0
	}
	pa := &os.ProcAttr{Env: opts.Env, Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: attr}
	proc, err := os.StartProcess(path, opts.Argv, pa)
	if err != nil && attr.Foreground {
		// Handing the terminal over can fail in odd setups; the job matters
		// more than Ctrl-C reaching it directly.
		opts.Log.Debug("cannot give the terminal to the child; starting it without", "err", err)
		attr.Foreground = false
		proc, err = os.StartProcess(path, opts.Argv, pa)
	}
	c.tookTTY = err == nil && attr.Foreground
	if err != nil {
		signal.Stop(c.sigs)
		signal.Stop(c.chld)
		return nil, fmt.Errorf("cannot start %q: %w", opts.Argv[0], err)
	}
	c.pid = proc.Pid
	// The process is reaped by our own wait4(-1) loop, never by proc.Wait,
	// so that orphans and the child are reaped by one owner without races.
	_ = proc.Release()
	go c.loop()
	return c, nil
}

// PID is the child's process id (and process group id).
func (c *Child) PID() int { return c.pid }

// Done is closed when the child has exited and been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Late delivers the terminating signals (SIGTERM, SIGINT, SIGHUP, SIGQUIT)
// that bridge received after the child was reaped (none of them was
// forwarded): the caller's cue to cut its final flush short. Every such
// signal is either forwarded or delivered here, so none is lost between the
// reaping and the caller's own handling, with one exception: bridge's own
// copy of the signal that ended the child, when bridge had not forwarded it
// and the child has no terminal (see endingSignal), is the request the
// child already obeyed, not a second one. SIGWINCH, SIGUSR1 and SIGUSR2
// after the child's exit have no one to go to and are not such a cue.
// The subscription lasts until Release.
func (c *Child) Late() <-chan os.Signal { return c.late }

// Release ends the signal subscription that Late reads from.
func (c *Child) Release() { c.lateOnce.Do(func() { close(c.stopLate) }) }

// Wait blocks until the child exits, then gives leftover processes in its
// group SIGTERM and up to Grace to go, and returns how the child ended.
func (c *Child) Wait() Exit {
	<-c.done
	return c.exit
}

func (c *Child) forward(sig syscall.Signal) {
	c.mu.Lock()
	c.forwarded = append(c.forwarded, SignalRecord{Signal: sig, Time: time.Now()})
	c.mu.Unlock()
	if err := syscall.Kill(-c.pid, sig); err != nil {
		// The group may be gone already (the child exited); fall back to the pid.
		if err2 := syscall.Kill(c.pid, sig); err2 != nil && !errors.Is(err2, syscall.ESRCH) {
			c.log.Warn("cannot forward signal", "signal", sig, "pid", c.pid, "err", err2)
		}
	}
	c.log.Debug("forwarded signal", "signal", sig, "pgid", c.pid)
}

func (c *Child) loop() {
	var mainDone bool
	var status syscall.WaitStatus
	reap := func() {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if pid <= 0 || err != nil {
				return
			}
			if pid == c.pid {
				mainDone, status = true, ws
			} else {
				c.log.Debug("reaped orphan", "pid", pid)
			}
		}
	}
	// SIGCHLD has a channel of its own with room for one: when a SIGCHLD
	// finds it full, a reap is already due and reap takes every exited
	// process, so none is missed however signals coalesce, and no poll is
	// needed (each wake-up of a Go program costs about as much as a
	// sample). The first reap takes an orphan that died before Notify.
	defer signal.Stop(c.chld) // ReapOrphans reaps after the child's exit
	reap()
	for !mainDone {
		select {
		case <-c.chld:
			reap()
		case s := <-c.sigs:
			c.forward(s.(syscall.Signal))
			c.armKill(s.(syscall.Signal))
		case <-c.killC:
			c.killed = true
			c.log.Warn("the child outlived the terminating signal by --kill-after; sending SIGKILL to its process group",
				"kill_after", c.opts.KillAfter, "pgid", c.pid)
			if err := syscall.Kill(-c.pid, syscall.SIGKILL); err != nil {
				_ = syscall.Kill(c.pid, syscall.SIGKILL)
			}
		}
	}
	exitTime := time.Now()
	go c.relayLate(c.endingSignal(status))
	if c.killTimer != nil {
		c.killTimer.Stop()
	}
	c.reclaimTerminal()
	c.cleanupGroup(reap)

	c.mu.Lock()
	c.exit = Exit{Time: exitTime, Forwarded: append([]SignalRecord(nil), c.forwarded...)}
	c.mu.Unlock()
	if c.killed && status.Signaled() && status.Signal() == syscall.SIGKILL {
		c.exit.KilledAfter = c.opts.KillAfter
	}
	switch {
	case status.Exited():
		c.exit.Code = status.ExitStatus()
	case status.Signaled():
		c.exit.Signal = status.Signal()
		c.exit.Code = 128 + int(status.Signal())
	default:
		c.exit.Code = 1
	}
	close(c.done)
}

// endingSignal is the signal that ended the child (it died of it, or exited
// 128+its number) when bridge did not forward it and the child has no
// terminal; 0 otherwise. Such a signal was sent to every process of the job
// at once (Slurm signals all of a step's processes on scancel, requeue or
// time limit; systemd all of a unit's cgroup), and bridge's copy may arrive
// after the child is gone: it asks for the end the child already made, and
// the flush goes on (within --flush-timeout). In a terminal the keyboard's
// signals reach bridge only once it has taken the terminal back: each late
// one is a new keypress.
func (c *Child) endingSignal(ws syscall.WaitStatus) syscall.Signal {
	var sig syscall.Signal
	switch {
	case c.tookTTY:
		return 0
	case ws.Signaled():
		sig = ws.Signal()
	case ws.Exited() && ws.ExitStatus() > 128:
		sig = syscall.Signal(ws.ExitStatus() - 128)
	default:
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if slices.ContainsFunc(c.forwarded, func(r SignalRecord) bool { return r.Signal == sig }) {
		return 0 // bridge had it and passed it on: another one is a second
	}
	return sig
}

// relayLate passes terminating signals received after the child's exit to
// Late (one pending is enough: the caller only needs to know that one
// came), except the first copy of ending, the signal that ended the child
// (endingSignal).
func (c *Child) relayLate(ending syscall.Signal) {
	defer signal.Stop(c.sigs)
	for {
		select {
		case s := <-c.sigs:
			if ending != 0 && s == ending {
				ending = 0
				c.log.Info("the signal that ended the child reached bridge too (sent to every process of the job): the final flush goes on; a second signal cuts it short",
					"signal", s)
				continue
			}
			if !isTerminating(s) {
				// A terminal resized or a USR signal is not a request
				// to hurry: the final flush goes on.
				c.log.Debug("signal after the child's exit, not a request to stop: the final flush goes on", "signal", s)
				continue
			}
			c.log.Debug("signal after the child's exit", "signal", s)
			select {
			case c.late <- s:
			default:
			}
		case <-c.stopLate:
			return
		}
	}
}

// armKill starts the --kill-after timer at the first terminating signal;
// later signals do not restart it.
func (c *Child) armKill(sig syscall.Signal) {
	if c.opts.KillAfter <= 0 || c.killTimer != nil || !isTerminating(sig) {
		return
	}
	c.killTimer = time.NewTimer(c.opts.KillAfter)
	c.killC = c.killTimer.C
}

// reclaimTerminal makes bridge's group the terminal's foreground again once
// the child is gone: else Ctrl-C during the final flush goes to the child's
// empty group and bridge never sees it. tcsetpgrp from a background group
// raises SIGTTOU, which is ignored for the call.
func (c *Child) reclaimTerminal() {
	if !c.tookTTY {
		return
	}
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	if err := unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, syscall.Getpgrp()); err != nil {
		c.log.Debug("cannot take the terminal back from the child's group", "err", err)
	}
}

// cleanupGroup sends SIGTERM to processes left in the child's group (as
// dumb-init does) and reaps them for up to Grace.
func (c *Child) cleanupGroup(reap func()) {
	if err := syscall.Kill(-c.pid, 0); err != nil {
		return // group empty
	}
	c.log.Debug("main child exited; sending SIGTERM to its leftover process group", "pgid", c.pid)
	_ = syscall.Kill(-c.pid, syscall.SIGTERM)
	deadline := time.Now().Add(c.opts.Grace)
	for time.Now().Before(deadline) {
		reap()
		if err := syscall.Kill(-c.pid, 0); err != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.log.Warn("processes of the child's group outlived it and SIGTERM", "pgid", c.pid)
}

// ReapOrphans keeps reaping orphans after the child is gone until stop is
// closed (bridge as PID 1 stays up while it flushes to the tracker).
func ReapOrphans(stop <-chan struct{}) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || (err != nil && err != syscall.EINTR) {
				break
			}
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// inForeground reports whether fd is a terminal whose foreground process
// group is bridge's: only then can the child's group take it over.
func inForeground(fd int) bool {
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pgrp == syscall.Getpgrp()
}

// Early watches the forwarded signals while bridge prepares the child's
// start (its trackers, a multi-node job's election), before there is a
// child to forward them to. The first terminating one calls the cancel
// function given to WatchEarly, so that the preparation ends at once, and
// the child must then not be started; the others (a terminal resized,
// SIGUSR1) are dropped: they were meant for a process that does not exist
// yet. Signals after that stay in C: a second one cuts the end short, or
// Start forwards them (Options.Signals = C).
type Early struct {
	C    chan os.Signal
	stop chan struct{}
	done chan struct{}
	got  syscall.Signal
}

// WatchEarly subscribes C to Forwarded and watches it until Stop.
func WatchEarly(cancel func()) *Early {
	e := &Early{C: make(chan os.Signal, 32), stop: make(chan struct{}), done: make(chan struct{})}
	signal.Notify(e.C, Forwarded...)
	go func() {
		defer close(e.done)
		for {
			select {
			case s := <-e.C:
				if isTerminating(s) {
					e.got = s.(syscall.Signal)
					cancel()
					return
				}
			case <-e.stop:
				return
			}
		}
	}()
	return e
}

// Stop ends the watch and returns the terminating signal that arrived
// during it, 0 if none. It is safe to call more than once.
func (e *Early) Stop() syscall.Signal {
	select {
	case <-e.stop:
	default:
		close(e.stop)
	}
	<-e.done
	return e.got
}

// Release ends the subscription when no child is started.
func (e *Early) Release() { signal.Stop(e.C) }
