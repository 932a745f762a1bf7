package main

import (
	"context"
	"fmt"
	"io"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/runner"
)

// runSupervise is `bridge [flags] -- CMD [ARGS...]` (runner.Command).
func runSupervise(args []string, stdout, stderr io.Writer) int {
	// From here on a signal is bridge's to handle: one while the settings
	// are read (a root on a disk that does not answer) ends the start, and
	// the command never runs.
	sig := runner.Watch()
	defer sig.Stop()
	fs, cfg, code := parse("bridge", args, stdout, stderr, nil)
	if fs == nil {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "bridge: no command given: usage is bridge [flags] -- CMD [ARGS...] (see bridge --help)")
		return exitUsage
	}
	return runJob(sig, cfg, runner.Command(fs.Args()), stderr)
}

// runJob runs the job of target, with the signals watched from sig, and
// returns bridge's exit status.
func runJob(sig *runner.Signals, cfg config.Config, target runner.Target, stderr io.Writer) int {
	code, err := runner.Run(context.Background(), cfg, target, runner.Options{Version: version, Stderr: stderr,
		Log: newLogger(stderr, cfg.LogLevel), Signals: sig})
	if err != nil {
		return usageError(stderr, err)
	}
	return code
}
