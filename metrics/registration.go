package metrics

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"time"

	"github.com/bridge-dev/bridge/config/option"
	"github.com/bridge-dev/bridge/internal/kfile"
)

// Registration is all bridge must know of a collector before it runs. The
// collector's package declares it (its Registration variable), and
// pipeline.Collectors lists it, once: --scopes takes its Scopes, the flags,
// variables and file keys its Options, docs/metrics.md its Series and Docs
// (docgen), and pipeline builds it with Build for every job, `bridge
// sample` and `bridge attach`.
type Registration struct {
	// Name is its Collector's Name: `bridge sample` reports what it
	// detected, or why it is off, under it.
	Name string
	// Scopes are the --scopes it serves: it is built when one of them is
	// on, and only the points of scopes that are on are kept. None: an
	// option of its own asks for it (Build decides), and nothing is
	// dropped. A scope of its own is declared in its package; the ones
	// several collectors serve are this package's (ScopeNode, ...).
	Scopes []Scope
	// Series are every series it may add (a per-GPU or per-instance one as
	// its template).
	Series []*Desc
	// Options are its own settings (flags, BRIDGE_ variables, file keys).
	Options []option.Option
	// Docs are its tables in docs/metrics.md. A series of Series that no
	// registration's table lists gets a row in a table of its own, from
	// its descriptor's help.
	Docs []DocTable
	// Build makes the collector. It returns an *Off when the collector is
	// off on this machine, nil and no error when it is not asked for, and
	// any other error for the user to fix (a usage error naming its flag).
	// It runs under a deadline (Env.Context): one that has not answered by
	// then is left out of the job, and what it returns later is closed.
	Build func(Env) (Collector, error)
}

// Env is what a Registration's Build gets.
type Env struct {
	// Context ends at the Build's deadline (the collect timeout): the
	// files Build reads are read under it (internal/kfile), and bridge has
	// stopped waiting for the Build once it has ended. Nil: none.
	Context        context.Context
	Roots          Roots
	CollectTimeout time.Duration // the longest one Collect may take
	// Scopes are those of the registration's Scopes that are on.
	Scopes []Scope
	// Options are the values of every registration's options: a
	// collector reads its own with option.Of.Get.
	Options option.Values
	// LookupEnv reads the environment the child inherits.
	LookupEnv func(string) (string, bool)
	// Job is the job's child, for the collectors that follow its tree.
	Job Job
	// Shared holds what several collectors of the job share, each made
	// once, by the first Build that asks for it (cgroup.LayoutOf,
	// process.TreeOf); nil: each Build makes its own.
	Shared *Shared
	// Built are the collectors built before this one, in order (the GPU
	// numbering of an earlier GPU collector, say), as their Build returned
	// them.
	Built []Collector
	// Log is bridge's logger, scoped to the collector.
	Log *slog.Logger
}

// Roots are where the collectors read the kernel's files from
// (--proc-root, --cgroup-root, --sys-root, --rootfs).
type Roots struct {
	Proc, Cgroup, Sys, Rootfs string
}

// Job is the job's child as the collectors that follow its tree see it.
// Safe for concurrent use: the child starts, and is set, while sampling
// runs.
type Job interface {
	// PID is the child's pid; 0: none (yet).
	PID() int
	// Adopter is the pid that adopts the child's orphans (bridge as
	// subreaper); 0: none.
	Adopter() int
}

// Shared is what the collectors of one job share (the cgroup layout, the
// child's process tree), each value made once. The package that owns a
// value gives it a typed accessor over Once, with a key of its own type.
// Safe for concurrent use: Builds run one at a time, but one left behind
// at its deadline may still be making a value when the next asks for it.
type Shared struct {
	mu   sync.Mutex
	made map[any]*made
}

type made struct {
	done chan struct{} // closed once v and err are set
	v    any
	err  error
}

// Once returns key's value, made by build the first time key is asked
// for, and with it the error build returned. A call while another makes the
// value waits for it until ctx ends (nil: no end), then returns ctx's
// error. On a nil Shared it makes one each time.
func (s *Shared) Once(ctx context.Context, key any, build func() (any, error)) (any, error) {
	if s == nil {
		return build()
	}
	s.mu.Lock()
	m, ok := s.made[key]
	if !ok {
		m = &made{done: make(chan struct{})}
		if s.made == nil {
			s.made = map[any]*made{}
		}
		s.made[key] = m
	}
	s.mu.Unlock()
	if !ok {
		defer close(m.done)
		m.v, m.err = build()
		return m.v, m.err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	select {
	case <-m.done:
		return m.v, m.err
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a value another collector's setup is making: %w", context.Cause(ctx))
	}
}

// Off is a Build's answer for a collector that is off on this machine: not
// the user's error. The job runs without it; `bridge sample` shows Why, and
// the log says it at Level.
type Off struct {
	Why   string
	Level slog.Level
	// Tags are run tags that say the collector is off, where a run must
	// tell (container awareness turned off); nil: none.
	Tags map[string]string
}

func (o *Off) Error() string { return o.Why }

// DocTable is one table of docs/metrics.md, written by docgen between the
// markers that name its ID: a row per series (or family of series), its
// Metric and Unit cells made from the descriptors, the other cells given
// here.
type DocTable struct {
	// ID names the table's place in docs/metrics.md: <!-- table ID ... -->.
	// A table whose place the page lacks goes under "other collectors".
	ID string
	// Columns are the headers of the cells after Metric and Unit.
	Columns []string
	Rows    []DocRow
}

// DocRow is one row of a DocTable.
type DocRow struct {
	// Series are the series the row describes; several share one unit and
	// are written as one name with {a,b} alternatives.
	Series []*Desc
	// MIG: the rows' per-GPU templates as bound to a MIG slice
	// (gpu_N_mig_M_...).
	MIG bool
	// Family is a family of series made at run time (gpu_N_prof_<x>_ratio),
	// written as it is, in Unit, instead of Series.
	Family string
	Unit   Unit
	// UnitNote follows the unit in its cell: "(0/1)".
	UnitNote string
	// Cells are the row's other cells, one per DocTable column (Markdown).
	Cells []string
}

// Absent is the Off of a collector whose hardware New did not find (err):
// logged at debug where it is simply not there (most machines), at info
// where it is but bridge may not read it, at warn where a file it reads
// is no file of the kernel's (a FIFO, a device, one that never ends) or
// did not answer.
func Absent(err error) *Off {
	level := slog.LevelDebug
	switch {
	case errors.Is(err, kfile.ErrNotRegular), errors.Is(err, kfile.ErrTooLarge), errors.Is(err, kfile.ErrNoAnswer):
		level = slog.LevelWarn
	case errors.Is(err, fs.ErrPermission):
		level = slog.LevelInfo
	}
	return &Off{Why: "off: " + err.Error(), Level: level}
}
