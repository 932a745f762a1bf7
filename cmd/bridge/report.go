package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/tracker/mlflow"
)

// runReport is `bridge report RUN [--json]`: the report of an MLflow run
// (a job's: one row a node), made by package report, while the job runs or
// after it ended.
func runReport(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("bridge report", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	logLevel := fs.String("log-level", "warn", "debug, info, warn, error")
	const use = "usage: bridge report RUN [--json]   (RUN: an MLflow run id; MLFLOW_RUN_ID when left out)"
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stdout, "%s\n\nThe job's status, its first failure and one row per node, read from the MLflow\nserver MLFLOW_TRACKING_URI names (and its credentials' variables).\n\nflags:\n%s", use, fs.FlagUsages())
			return 0
		}
		fmt.Fprintf(stderr, "bridge: report: %v\n%s\n", err, use)
		return exitUsage
	}
	run := os.Getenv(mlflow.EnvRunID)
	switch fs.NArg() {
	case 0:
	case 1:
		run = fs.Arg(0)
	default:
		fmt.Fprintf(stderr, "bridge: report takes one run id\n%s\n", use)
		return exitUsage
	}
	if run == "" {
		fmt.Fprintf(stderr, "bridge: report: no run given (nor %s)\n%s\n", mlflow.EnvRunID, use)
		return exitUsage
	}
	if !mlflow.Configured(os.Getenv) {
		fmt.Fprintf(stderr, "bridge: report reads the run from MLflow: set %s to the http(s) URL of the `mlflow server`\n", mlflow.EnvTrackingURI)
		return exitUsage
	}
	home, _ := os.UserHomeDir()
	cfg, ignored, err := mlflow.ConfigFromEnv(os.Getenv, home)
	log := newLogger(stderr, *logLevel)
	for _, line := range ignored {
		log.Warn(line)
	}
	if err != nil {
		fmt.Fprintf(stderr, "bridge: report: %v\n", err)
		return exitUsage
	}
	cfg.RunID = "" // the run to read is RUN; the sink itself writes nothing
	sink, err := mlflow.New(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "bridge: report: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := sink.Report(ctx, run)
	if err != nil {
		fmt.Fprintf(stderr, "bridge: report: %v\n", err)
		return 1
	}
	if *asJSON {
		_, err = stdout.Write(rep.JSON())
	} else {
		err = rep.Text(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "bridge: report: %v\n", err)
		return 1
	}
	return 0
}
