package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
)

// SpoolPath is the configured path or a default in the working directory
// named after the node (node, else the host name), the task (Job.SpoolTask:
// several bridges of one job on one node) and the run: unique per bridge,
// so that the bridges of a multi-node job that share a directory (NFS, one
// volume) and a run id never write one file, and the same on a restart, so
// that a restarted bridge finds what its predecessor left.
func SpoolPath(configured, node, task string, runs []SinkRun, now time.Time) string {
	if configured != "" {
		return configured
	}
	if node == "" {
		node = hostname()
	}
	if task != "" {
		node += "." + task
	}
	node = safeName(node)
	for _, r := range runs {
		if r.RunID != "" {
			return "bridge-spool-" + node + "-" + safeName(r.RunID) + ".jsonl"
		}
	}
	return fmt.Sprintf("bridge-spool-%s-%s-%d.jsonl", node, now.UTC().Format("20060102T150405"), os.Getpid())
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') {
			return r
		}
		return '_'
	}, s)
}

// SpoolUse is what a spool is opened for. It decides the spool's options
// (spoolOptions): this is the one place they are made, and OpenSpool the one
// place a spool file is opened.
type SpoolUse int

const (
	// ForJob is the spool a job writes (`bridge -- CMD`, `bridge attach`):
	// created if missing, capped by --spool-max-size (delivered samples go
	// first), fsynced by --spool-sync; a file that cannot be opened leaves
	// the samples in memory for the trackers.
	ForJob SpoolUse = iota
	// ForSync is the spool `bridge sync` uploads: it must exist, and it is
	// never capped, whatever --spool-max-size says: sync adds only
	// acknowledgements and its own records, and a cap would compact away
	// samples it has yet to send.
	ForSync
)

// spoolOptions are the spool's options for use.
func spoolOptions(use SpoolUse, set config.Config, log *slog.Logger) spool.Options {
	o := spool.Options{Logger: log, SyncEvery: set.SpoolSync}
	switch use {
	case ForJob:
		o.MaxSize = int64(set.SpoolMaxSize) // 0: no cap, for the spool as for --spool-max-size
	case ForSync:
		o.MaxSize, o.MustExist = 0, true
	}
	return o
}

// spoolOpenStall is how long one step of opening a spool may go
// unanswered before the job starts without it (or `bridge sync` gives up):
// a live disk answers each read in far less, even on a loaded machine.
const spoolOpenStall = 5 * time.Second

// ErrSpoolNotFile means --spool names a directory.
var ErrSpoolNotFile = errors.New("is a directory; name a file")

// spoolCheckWait bounds CheckSpool's stat.
const spoolCheckWait = 2 * time.Second

// CheckSpool refuses a --spool that names a directory (a usage error,
// before the child starts). The stat is bounded by ctx (the start's: a
// signal ends it at once) and by spoolCheckWait: a disk that does not
// answer is no usage error (OpenSpool then gives up on it).
func CheckSpool(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, spoolCheckWait)
	defer cancel()
	st, err := kfile.Stat(ctx, path)
	if err == nil && st.IsDir() {
		return fmt.Errorf("--spool (BRIDGE_SPOOL) %q: %w", path, ErrSpoolNotFile)
	}
	return nil
}

// OpenSpool opens the spool at path for use, within ctx: a ctx that ends
// (a signal before the child starts, `bridge sync --timeout`) ends the
// open at once, and one step of the open that goes unanswered for
// spoolOpenStall (a disk that does not answer) ends it too; the abandoned
// open closes the file if the disk ever answers (spool.OpenWithin). A
// job's spool (ForJob) never fails: when the file cannot be opened (a
// read-only working directory, a spool another live bridge writes, a disk
// that does not answer, a path that is no regular file, any other
// failure), the job still gets its samples: they go to the trackers from
// memory (spool.NewMemory), and one ERROR says why and where to point
// --spool. For ForSync the error is returned (spool.ErrLocked while a live
// bridge writes the file).
func OpenSpool(ctx context.Context, path string, use SpoolUse, set config.Config, log *slog.Logger) (*spool.Spool, error) {
	opt := spoolOptions(use, set, log)
	sp, err := spool.OpenWithin(ctx, path, opt, spoolOpenStall)
	if err == nil || use != ForJob {
		return sp, err
	}
	abs, aerr := filepath.Abs(path)
	if aerr != nil {
		abs = path
	}
	switch {
	case ctx.Err() != nil:
		// The start was called off (a signal): the caller says so.
	case errors.Is(err, spool.ErrStalled):
		log.Error("the disk under the spool does not answer (a hung network mount?); the job runs without waiting for it, and its samples go to the trackers from memory only (lost if they cannot take them): point --spool (BRIDGE_SPOOL) at a local disk",
			"path", abs, "waited", spoolOpenStall)
	case errors.Is(err, spool.ErrLocked):
		log.Error("another bridge is writing this spool (one writer per spool); this job's samples go to the trackers from memory only, and are lost if they cannot take them: give each job its own --spool (BRIDGE_SPOOL)",
			"path", abs)
	case errors.Is(err, kfile.ErrNotRegular):
		log.Error("the spool is not a regular file; the job runs, and its samples go to the trackers from memory only (lost if they cannot take them): point --spool (BRIDGE_SPOOL) at a file",
			"path", abs, "err", err)
	default:
		log.Error("cannot open the spool; the job runs, and its samples go to the trackers from memory only (lost if they cannot take them): point --spool (BRIDGE_SPOOL) at a writable file, e.g. on an emptyDir volume",
			"path", abs, "err", err)
	}
	return spool.NewMemory(opt), nil
}

// SyncCommand is the command that uploads the spool at path later; the
// spool records its runs and node id, so the path is all it needs.
func SyncCommand(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if strings.Trim(path, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:@,") != "" {
		path = "'" + strings.ReplaceAll(path, "'", `'\''`) + "'"
	}
	return "bridge sync " + path
}

// EndRecordedTag is the end record's note that the end of the job was
// recorded on sink's run (its value), so that `bridge sync` leaves a
// delivered run that is already ended alone.
func EndRecordedTag(sink string) string { return endRecPrefix + sink }

// closeSpool closes the spool and removes it when it holds nothing a user
// still needs: bridge chose its path (a path the user gave is always kept),
// every started tracker took every sample (a run ended by its owner took
// what was taken before its end), and the file is whole (no lost, dropped
// or skipped records). Anything else keeps it, for `bridge sync` and for a
// restarted bridge's forensics. A run given to bridge (MLFLOW_RUN_ID, W&B's
// run, `bridge attach`'s) is no exception: a later bridge on it continues
// the node's steps from the run itself (tracker.RunInfo.NextStep).
//
// Closing waits for the disk until ctx ends: one that stalled is left
// behind, and the table's spool row says so (spoolRows).
func (s *Session) closeSpool(ctx context.Context) {
	keep := func() {
		if err := s.spool.CloseContext(ctx); err != nil && !errors.Is(err, spool.ErrStalled) {
			s.log.Warn("cannot close the spool cleanly", "err", err)
		}
	}
	later := slices.ContainsFunc(s.off, TrackerOff.Later) // the table names the spool for their upload
	if s.spool.InMemory() || s.set.Spool != "" || s.set.KeepSpool || len(s.failedStarts) > 0 || len(s.sinks) == 0 || later {
		keep()
		return
	}
	for _, r := range s.sinks {
		if st, _, _ := r.fwd.Status(); st != tracker.StateOK && st != tracker.StateRunEnded {
			keep()
			return
		}
	}
	if !s.spool.Delivered() {
		keep()
		return
	}
	if err := s.spool.RemoveContext(ctx); err != nil {
		if !errors.Is(err, spool.ErrStalled) {
			s.log.Warn("cannot remove the delivered spool", "err", err)
		}
		return
	}
	s.spoolRemoved = true
	s.log.Debug("every sample reached every tracker; spool removed", "path", s.spool.Path())
}

// spoolRows report, for the end-of-run table, where the spool is and what
// went wrong with it; a spool that simply worked gets one short row.
func (s *Session) spoolRows() []summary.Row {
	st := s.spool.Stats()
	if s.spool.InMemory() {
		v := "none: it could not be opened, so the samples went to the trackers from memory"
		if st.LostUnwritten > 0 {
			v += fmt.Sprintf("; %d of them were dropped from the full memory buffer", st.LostUnwritten)
		}
		return []summary.Row{{What: "spool", Value: v}}
	}
	var notes []string
	if st.Outages > 0 {
		notes = append(notes, fmt.Sprintf("writing to it failed %d %s, in %d %s", st.WriteFailures, plural(int(st.WriteFailures), "time", "times"),
			st.Outages, plural(int(st.Outages), "outage", "outages")))
	}
	if st.Buffered > 0 && st.Stalled == "" {
		// Closed with records still in memory: the file failed to the end.
		notes = append(notes, fmt.Sprintf("%d records were never written: the file could not be written", st.Buffered))
	}
	if st.LostUnwritten > 0 {
		notes = append(notes, fmt.Sprintf("%d samples were dropped from the full memory buffer", st.LostUnwritten))
	}
	if st.DroppedByCap > 0 || st.Compactions > 0 {
		notes = append(notes, fmt.Sprintf("its size cap (--spool-max-size) dropped %d undelivered samples in %d rewrites", st.DroppedByCap, st.Compactions))
	}
	if st.PointsLeftOut > 0 {
		notes = append(notes, leftOutNote(st))
	}
	if st.BadValues > 0 {
		notes = append(notes, fmt.Sprintf("%d values that are not numbers were skipped", st.BadValues))
	}
	if st.BadLines > 0 {
		notes = append(notes, fmt.Sprintf("%d unreadable lines were skipped (lines %v)", st.BadLines, st.BadLineNums))
	}
	if st.TornTail {
		notes = append(notes, "a torn last line was repaired")
	}
	if st.Stalled != "" {
		notes = append(notes, fmt.Sprintf("the disk stalled (its %s had not returned when bridge exited): %d records not known to be written, %d bytes written but not fsynced",
			st.Stalled, st.Buffered, st.Unsynced))
	}
	v := fmt.Sprintf("%d samples written to %s", st.Written, s.spool.Path())
	if s.spoolRemoved {
		v = fmt.Sprintf("%d samples written; every one reached every tracker, so the file was removed", st.Written)
	}
	if len(notes) > 0 {
		v += "; " + strings.Join(notes, "; ")
	}
	return []summary.Row{{What: "spool", Value: v}}
}

// leftOutNote names the points a sample's bounds left out, by what they
// were (the spool's tiers, first left out first) with one series of each.
func leftOutNote(st spool.Stats) string {
	var parts []string
	for t := spool.TierPassedThrough; t <= spool.TierOwn; t++ {
		if n := st.LeftOutByTier[t]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s, e.g. %s", n, t, st.LeftOutExample[t]))
		}
	}
	if st.LongNames > 0 {
		parts = append(parts, fmt.Sprintf("%d named in more than %d bytes", st.LongNames, spool.MaxKey))
	}
	return fmt.Sprintf("%d points were left out of samples over a sample's bounds (%s)", st.PointsLeftOut, strings.Join(parts, "; "))
}
