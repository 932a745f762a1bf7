// Command bridge runs a training command as its child and sends scope-correct
// system metrics (container cgroup, node, rootfs, GPUs) to MLflow or W&B.
//
//	bridge [flags] -- CMD [ARGS...]   run CMD and sample while it runs
//	bridge sample [--json]            print one sample of every collector
//	bridge attach --run-id ID --pid PID  sample beside a running process (notebooks)
//	bridge sync FILE                  upload a spool file to its runs
//	bridge report RUN [--json]        a run's report: status, first failure, a row per node
//	bridge version                    print the version
package main

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/internal/ownproc"
	"github.com/bridge-dev/bridge/internal/safeout"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/pipeline"
)

// versionFile is the one place bridge's version is written: `go build` embeds
// it, and scripts/wheel.sh gives the same string to the wheel's metadata (a
// PEP 440 version, so that both print alike).
//
//go:embed VERSION
var versionFile string

var version = strings.TrimSpace(versionFile)

// Exit codes of bridge's own failures (a child's status passes through).
const (
	exitUsage = 2 // bad flags, variables or config file
)

func main() {
	ownproc.Setup(os.Getenv)
	// bridge's own output never blocks it or fails it (internal/safeout):
	// a closed, full or stalled stdout or stderr costs lines, not the job.
	stdout, stderr := safeout.New(os.Stdout), safeout.New(os.Stderr)
	slog.SetDefault(newLogger(stderr, "info")) // for anything logged without a logger of its own
	var out io.Writer = stdout
	if len(os.Args) > 1 && answers[os.Args[1]] {
		out = &answerOut{out: os.Stdout}
	}
	code := run(os.Args[1:], out, stderr)
	stdout.Flush(exitFlush)
	stderr.Flush(exitFlush)
	os.Exit(code)
}

// answers are the subcommands whose stdout is their answer, with no child
// to protect: it is written whole, as any command-line tool writes it,
// blocking on a slow reader, and a failed write (but a reader gone:
// answerOut) is their exit status 1.
// safeout's queue (a few hundred lines) would drop a large report whole.
var answers = map[string]bool{"report": true, "sample": true}

// answerOut is an answer's stdout (answers): written whole, blocking; a
// reader that went away (EPIPE: `bridge report | head -1`) ends the output,
// not the command, as it does through safeout. Any other failed write is
// the command's.
type answerOut struct {
	out  io.Writer
	gone bool
}

func (w *answerOut) Write(p []byte) (int, error) {
	if w.gone {
		return len(p), nil
	}
	n, err := w.out.Write(p)
	if errors.Is(err, syscall.EPIPE) {
		w.gone = true
		return len(p), nil
	}
	return n, err
}

// exitFlush bounds the wait for bridge's last lines (the end-of-run table)
// at exit: a stalled reader must not hold back the child's exit status.
const exitFlush = time.Second

// commands are bridge's subcommands by name; anything else is
// `bridge [flags] -- CMD` (runSupervise).
var commands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"version": func(_ []string, stdout, _ io.Writer) int { printVersion(stdout); return 0 },
	"help": func(_ []string, stdout, _ io.Writer) int {
		usage(stdout, pflag.NewFlagSet("bridge", pflag.ContinueOnError))
		return 0
	},
	"sample": runSample, "attach": runAttach, "sync": runSync, "report": runReport,
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && commands[args[0]] != nil {
		return commands[args[0]](args[1:], stdout, stderr)
	}
	return runSupervise(args, stdout, stderr)
}

func printVersion(w io.Writer) { fmt.Fprintf(w, "bridge %s\n", version) }

// parse registers the shared options plus extra, parses args and loads the
// configuration. When it returns no flag set the caller returns code: it
// printed the help (--help, -h) or the version (--version) on stdout (0),
// or a usage error on stderr (exitUsage). Only bridge's own flags, BRIDGE_*
// variables and config file are checked here: other tools' variables never
// stop a job (pipeline.BuildSinks turns off what depends on one that cannot
// be used).
func parse(name string, args []string, stdout, stderr io.Writer, extra func(*pflag.FlagSet)) (fs *pflag.FlagSet, cfg config.Config, code int) {
	return parseOf(pipeline.Collectors(), name, args, stdout, stderr, extra)
}

// parseOf is parse with regs for bridge's collectors: their scopes and
// options.
func parseOf(regs []metrics.Registration, name string, args []string, stdout, stderr io.Writer, extra func(*pflag.FlagSet)) (fs *pflag.FlagSet, cfg config.Config, code int) {
	choices := pipeline.ChoicesOf(regs, pipeline.Trackers())
	fs = pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SetInterspersed(false) // everything after the command belongs to it
	config.RegisterFlags(fs, choices)
	showVersion := versionFlag(fs)
	if extra != nil {
		extra(fs)
	}
	if err := config.Parse(fs, args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			usage(stdout, fs)
			return nil, cfg, 0
		}
		return nil, cfg, usageError(stderr, fmt.Errorf("%w (see bridge --help)", err))
	}
	if *showVersion {
		printVersion(stdout)
		return nil, cfg, 0
	}
	cfg, err := config.Load(fs, choices)
	if err != nil {
		return nil, cfg, usageError(stderr, err)
	}
	return fs, cfg, 0
}

// usageError prints a configuration error (from config.Load or the
// builders, whose errors are all the user's to fix) and returns exitUsage.
func usageError(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "bridge: %s\n", strings.TrimPrefix(err.Error(), config.ErrUsage.Error()+": "))
	return exitUsage
}

// versionFlag registers --version, in parseOf's flag set and in the one
// usage makes when it is given none, so that the help names it the same.
func versionFlag(fs *pflag.FlagSet) *bool {
	return fs.Bool("version", false, "print bridge's version and exit")
}

// noValueShown is a bool flag's value without IsBoolFlag: pflag's help
// writes "--version[=true|false]" for a flag whose value says it is a bool
// flag, and a flag that takes no value reads plainly as "--version". It
// still needs none: pflag's Bool sets NoOptDefVal.
type noValueShown struct{ pflag.Value }

func usage(w io.Writer, fs *pflag.FlagSet) {
	if fs.Lookup("interval") == nil {
		config.RegisterFlags(fs, pipeline.Choices())
		versionFlag(fs)
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			f.Value = noValueShown{f.Value}
		}
	})
	fmt.Fprintf(w, `bridge %s: scope-correct system metrics for training jobs in containers

usage:
  bridge [flags] -- CMD [ARGS...]   run CMD as a child, sample, send to MLflow/W&B
  bridge sample [--json] [flags]    print one sample of every collector
  bridge attach --run-id ID --pid PID   sample beside a running process (notebooks)
  bridge sync FILE [--run-id ID]    upload a spool file to its runs
  bridge report RUN [--json]        a run's report: status, first failure, a row per node
  bridge version                    (or --version) print the version
  bridge --help                     (or -h) this text

Every flag can also be set as BRIDGE_<FLAG> (e.g. BRIDGE_INTERVAL=5s) or in a
YAML file given with --config / BRIDGE_CONFIG; flags win over the environment,
which wins over the file. A bad value of any of them is exit 2 before the
child starts.

Trackers are set up with their own variables, read as their Python clients
read them:
%s
--trackers auto (the default) turns on %s.
These variables, and the launchers' (Slurm, torchrun, Kubernetes), are other
tools': a value bridge cannot use turns off only what depends on it, with a
warning; the job runs.

flags:
%s`, version, pipeline.Trackers().TrackerVars(), strings.Join(pipeline.Trackers().TrackersOn(), ",\nand "), fs.FlagUsages())
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})).With("app", "bridge")
}
