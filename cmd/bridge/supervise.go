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
	fs, cfg, code := parse("bridge", args, stdout, stderr, nil)
	if fs == nil {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "bridge: no command given: usage is bridge [flags] -- CMD [ARGS...] (see bridge --help)")
		return exitUsage
	}
	return runJob(cfg, runner.Command(fs.Args()), stderr)
}

// runJob runs the job of target, and returns bridge's exit status.
func runJob(cfg config.Config, target runner.Target, stderr io.Writer) int {
	code, err := runner.Run(context.Background(), cfg, target, runner.Options{Version: version, Stderr: stderr, Log: newLogger(stderr, cfg.LogLevel)})
	if err != nil {
		return usageError(stderr, err)
	}
	return code
}
