package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/snapshot"
)

func runSample(args []string, stdout, stderr io.Writer) int {
	return sample(pipeline.Collectors(), args, stdout, stderr)
}

// sample is `bridge sample` (package snapshot) with regs for bridge's
// collectors.
func sample(regs []metrics.Registration, args []string, stdout, stderr io.Writer) int {
	var asJSON bool
	fs, cfg, code := parseOf(regs, "sample", args, stdout, stderr, func(fs *pflag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print one JSON object instead of a table")
	})
	if fs == nil {
		return code
	}
	// A command after the flags is the one bridge would run: a torchrun's
	// options name the job (bridge sample -- torchrun ... train.py).
	if fs.NArg() > 0 && !isCommand(args, fs.Args()) {
		fmt.Fprintf(stderr, "bridge: sample takes no arguments, only a command after -- (got %q)\n", fs.Args())
		return exitUsage
	}
	snap, err := snapshot.Take(context.Background(), regs, cfg, fs.Args(), newLogger(stderr, cfg.LogLevel))
	if err != nil {
		return usageError(stderr, err)
	}
	if !asJSON {
		snap.Text(stdout)
		return 0
	}
	if err := snap.JSON(stdout); err != nil {
		fmt.Fprintf(stderr, "bridge: writing JSON: %v\n", err)
		return 1
	}
	return 0
}

// isCommand reports whether rest, what is left after the flags, came after
// a "--" in args.
func isCommand(args, rest []string) bool {
	n := len(args) - len(rest)
	return n > 0 && args[n-1] == "--"
}
