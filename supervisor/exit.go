package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Exit codes of a command that could not be started, as a shell gives them.
const (
	exitNotFound  = 127 // the command was not found
	exitCannotRun = 126 // it was found and could not be executed
)

// StartFailureCode is the exit status for a command that could not be
// started (err from exec.LookPath or Start), following the shell.
func StartFailureCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotRun
}

// SignalName is the signal's name (SIGTERM), or "signal N" for a number
// without one.
func SignalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return "signal " + strconv.Itoa(int(s))
}

// Tags are the run tags that record how the child ended.
func (e Exit) Tags() map[string]string {
	tags := map[string]string{"bridge.exit_code": strconv.Itoa(e.Code)}
	if e.Signal != 0 {
		tags["bridge.exit_signal"] = SignalName(e.Signal)
	}
	if e.KilledAfter > 0 {
		tags["bridge.killed_after"] = e.KilledAfter.String()
	}
	return tags
}

// Describe says how the child ended, for the end-of-run table: its exit
// code, and the signal that killed it and who sent that.
func (e Exit) Describe() string {
	if e.Signal == 0 {
		return strconv.Itoa(e.Code)
	}
	if e.KilledAfter > 0 {
		return fmt.Sprintf("%d (killed by SIGKILL, sent by bridge: still running %s (--kill-after) after a forwarded signal)", e.Code, e.KilledAfter)
	}
	how := ""
	for _, f := range e.Forwarded {
		if f.Signal == e.Signal {
			how = ", forwarded by bridge"
			break
		}
	}
	return fmt.Sprintf("%d (killed by %s%s)", e.Code, SignalName(e.Signal), how)
}
