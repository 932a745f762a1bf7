package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/internal/printable"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
)

// defaultReportTimeout bounds `bridge report` as a whole: one runs/get,
// and the series of the nodes that recorded no figures (a job's running
// nodes), a few requests each.
const defaultReportTimeout = 2 * time.Minute

// runReport is `bridge report RUN [--json|--markdown] [--timeout D]`: the
// report of a run (a job's: one row a node) of the tracker whose runs
// bridge reads (pipeline.TrackerList.Reader: MLflow), made by package
// jobrun, while the job runs or after it ended. It ends within --timeout:
// when that passes while the nodes' series are read, the report so far is
// printed (every row, from the run's tags; the figures of the nodes not
// read left out, named in a note) and bridge exits 1; before the run
// itself is read, nothing is printed.
func runReport(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("bridge report", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	asMarkdown := fs.Bool("markdown", false, "print the report as Markdown (as the run's bridge-report.md)")
	timeout := fs.Duration("timeout", defaultReportTimeout, "give up after this long; the report read so far is printed")
	logLevel := fs.String("log-level", "warn", "debug, info, warn, error")
	reg, configured := pipeline.Trackers().Reader(os.Getenv)
	use := fmt.Sprintf("usage: bridge report RUN [--json|--markdown] [--timeout D]   (RUN: %s's run id; %s when left out)", reg.Help.Title, reg.RunIDEnv)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stdout, "%s\n\nThe job's status, its first failure and one row per node, read from the %s\nserver its variables name (`bridge --help` lists them).\n\nflags:\n%s",
				use, reg.Help.Title, fs.FlagUsages())
			return 0
		}
		fmt.Fprintf(stderr, "bridge: report: %v\n%s\n", err, use)
		return exitUsage
	}
	if *asJSON && *asMarkdown {
		fmt.Fprintf(stderr, "bridge: report: --json and --markdown: give one\n%s\n", use)
		return exitUsage
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "bridge: report: --timeout=%s: must be positive\n", *timeout)
		return exitUsage
	}
	run := os.Getenv(reg.RunIDEnv)
	switch fs.NArg() {
	case 0:
	case 1:
		run = fs.Arg(0)
	default:
		fmt.Fprintf(stderr, "bridge: report takes one run id\n%s\n", use)
		return exitUsage
	}
	if run == "" {
		fmt.Fprintf(stderr, "bridge: report: no run given (nor %s)\n%s\n", reg.RunIDEnv, use)
		return exitUsage
	}
	if !configured {
		fmt.Fprintf(stderr, "bridge report reads the run from %s, used when %s (`bridge --help` lists its variables)\n", reg.Help.Title, reg.Help.On)
		return exitUsage
	}
	return reportRun(reg, run, reportAsked{json: *asJSON, markdown: *asMarkdown, timeout: *timeout, logLevel: *logLevel}, stdout, stderr)
}

// reportAsked is how `bridge report` was asked to read and print.
type reportAsked struct {
	json, markdown bool
	timeout        time.Duration
	logLevel       string
}

// reportRun reads run's report from reg's store within --timeout and
// prints it as asked: runReport once its flags are checked.
func reportRun(reg tracker.Registration, run string, ask reportAsked, stdout, stderr io.Writer) int {
	home, _ := os.UserHomeDir()
	store, err := reg.Store(tracker.Build{Getenv: os.Getenv, Home: home, Log: newLogger(stderr, ask.logLevel)})
	if err != nil {
		fmt.Fprintf(stderr, "bridge: report: %s\n", printable.Line(err.Error()))
		return exitUsage
	}
	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	passed := fmt.Errorf("--timeout %s passed", ask.timeout)
	ctx, cancel := context.WithTimeoutCause(sig, ask.timeout, passed)
	defer cancel()
	rep, err := jobrun.Report(ctx, store, run)
	if err != nil && errors.Is(context.Cause(ctx), passed) {
		err = fmt.Errorf("%w (a longer one reads more): %w", passed, err)
	}
	if rep == nil {
		fmt.Fprintf(stderr, "bridge: report: %s\n", printable.Line(err.Error()))
		return 1
	}
	if werr := write(stdout, rep, ask.json, ask.markdown); werr != nil {
		fmt.Fprintf(stderr, "bridge: report: %v\n", werr)
		return 1
	}
	if err != nil {
		// The report above is the part read in time.
		fmt.Fprintf(stderr, "bridge: report: the report above is partial: %s\n", printable.Line(err.Error()))
		return 1
	}
	return 0
}

// write prints rep as asked: text for a terminal, Markdown, or JSON
// (escaped for a terminal as well: printable.JSON).
func write(w io.Writer, rep *report.Report, asJSON, asMarkdown bool) error {
	switch {
	case asJSON:
		_, err := w.Write(printable.JSON(rep.JSON()))
		return err
	case asMarkdown:
		return rep.Markdown(w)
	}
	return rep.Text(w)
}
