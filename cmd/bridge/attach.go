package main

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/runner"
)

// runAttach is `bridge attach --pid PID [--run-id ID]` (runner.Attach):
// sampling beside a running process (a notebook kernel) and its run.
func runAttach(args []string, stdout, stderr io.Writer) int {
	var runID string
	var pid int
	sig := runner.Watch() // as runSupervise's
	defer sig.Stop()
	fs, cfg, code := parse("attach", args, stdout, stderr, func(fs *pflag.FlagSet) {
		fs.StringVar(&runID, "run-id", "", "run to write to (default "+pipeline.Trackers().RunIDVars()+")")
		fs.IntVar(&pid, "pid", 0, "sample until this process exits (required); its process tree is the process_ scope")
	})
	if fs == nil {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bridge: attach takes no command (got %q); to launch one use bridge -- CMD\n", fs.Args())
		return exitUsage
	}
	return runJob(sig, cfg, runner.Attach(pid, runID), stderr)
}
