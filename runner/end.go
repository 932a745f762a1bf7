package runner

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/bridge-dev/bridge/forensics"
	"github.com/bridge-dev/bridge/tracker"
)

// The tags bridge records itself at a job's start and end; the child's
// exit's are supervisor.Exit.Tags, forensics' verdict's its own.
const (
	// tagError says why the command never ran (it could not be started, or
	// a signal ended bridge's start first).
	tagError = "bridge.error"
	// tagAttachedPID is the process `bridge attach` sampled beside.
	tagAttachedPID = "bridge.attached_pid"
	// tagAttachEnd says why `bridge attach` stopped.
	tagAttachEnd = "bridge.attach_end"
)

// notRun is the end of a job whose command never ran: bridge's exit
// status code, the signal that ended the start (0: none), and why.
func notRun(code int, sig syscall.Signal, why string) tracker.EndInfo {
	return tracker.EndInfo{ExitCode: code, Signal: int(sig), Time: time.Now(),
		Tags: map[string]string{forensics.TagExitCode: strconv.Itoa(code), tagError: why}}
}

// abortable is a context that ends after d, or at once when a signal
// arrives on again (a second one cuts the end short).
func abortable(d time.Duration, again <-chan os.Signal) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-again:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// endStep runs one step of the end of a run, after the target has ended:
// a panic in it is logged, and the end goes on to its next step, so that
// the end record, the table and the exit status never depend on one
// step's bug.
func endStep(log *slog.Logger, what string, step func()) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("internal error at the end of the run; the end goes on, and the command's exit status is still bridge's",
				"in", what, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	step()
}

// keepStatus, deferred once the target has ended, makes code bridge's exit
// status even when a panic ends the rest of the run: the panic is logged,
// not Go's exit 2.
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
