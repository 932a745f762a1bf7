package pipeline

import (
	"fmt"
	"io"
	"strings"

	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
)

// The end-of-run table: what was measured, and where the samples went.

// Report writes the end-of-run table: what was measured, the collectors
// that failed (if any), the caller's rows (exit status, forensics), then
// where the samples went.
func (s *Session) Report(w io.Writer, title string, extra ...summary.Row) {
	rows := append(append(append(s.acc.Rows(), s.adviceRows()...), s.collectorRows()...), extra...)
	summary.Write(w, title, append(rows, s.trackerRows()...))
}

// collectorRows say, per collector that failed during the job, how often
// and its last error, and per collector whose values were left out (out of
// their series' range), how many and the last; none when every run
// succeeded with every value in range.
func (s *Session) collectorRows() []summary.Row {
	var rows []summary.Row
	for _, h := range s.sampler.Health() {
		var parts []string
		if h.Failures > 0 {
			v := fmt.Sprintf("failed %d of %d runs", h.Failures, h.Runs)
			if h.OK {
				v += " (the last one succeeded)"
			}
			parts = append(parts, v+"; last error: "+h.LastError)
		}
		if h.Refused > 0 {
			parts = append(parts, fmt.Sprintf("%d values out of range left out; the last: %s", h.Refused, h.LastRefused))
		}
		if len(parts) > 0 {
			rows = append(rows, summary.Row{What: "collector " + h.Collector, Value: strings.Join(parts, "; ")})
		}
	}
	return rows
}

// trackerRows says, per tracker, where the samples went.
func (s *Session) trackerRows() []summary.Row {
	var rows []summary.Row
	rows = append(rows, s.failedStarts...)
	rows = append(rows, s.spoolRows()...)
	for _, o := range s.off {
		rows = append(rows, o.row(s.spool))
	}
	if len(s.sinks) == 0 && len(s.failedStarts) == 0 && len(s.off) == 0 {
		where := "samples are in " + s.spool.Path() + "; upload them with: " + SyncCommand(s.spool.Path())
		if s.spool.InMemory() {
			where = "and no spool file: samples are only in this table"
		}
		rows = append(rows, summary.Row{What: "tracker", Value: "none configured: " + where})
	}
	for i, r := range s.sinks {
		rows = append(rows, summary.Row{What: r.Sink.Name(), Value: s.trackerRow(r)})
		if i < len(s.ends) && s.ends[i] != "" {
			rows = append(rows, summary.Row{What: r.Sink.Name() + " end", Value: s.ends[i]})
		}
	}
	return rows
}

// endLeft says what records an end of the job that a tracker did not
// take: `bridge sync` of the spool, which has it.
func (s *Session) endLeft() string {
	if s.spool.InMemory() {
		return "there is no spool file for `bridge sync` to record it from"
	}
	return "left for " + SyncCommand(s.spool.Path())
}

// trackerRow says what happened with one tracker, from what happened: its
// run, whether it ever answered, what it was sent and what it was not.
func (s *Session) trackerRow(r SinkRun) string {
	st, sent, err := r.fwd.Status()
	run := r.run()
	var v string
	switch reached := r.reached(); {
	case run == "" && !reached:
		v = "never reached: no run"
	case run == "":
		v = "reached, but no run was found or created before bridge exited"
	case !reached:
		v = fmt.Sprintf("run %s: never reached, %d samples sent", run, sent)
	default:
		v = fmt.Sprintf("%s run %s: %d samples sent", st, run, sent)
		if r.Late != nil {
			v += " (run created after the job started)"
		}
	}
	if n := s.spool.PendingCount(r.Sink.Name(), run); n > 0 {
		where := "in the spool; " + SyncCommand(s.spool.Path()) + " uploads them"
		if s.spool.InMemory() {
			where = "lost: no spool file"
		}
		v += fmt.Sprintf(", %d unsent (%s)", n, where)
	}
	if err != nil && st != tracker.StateOK {
		v += ": " + err.Error()
	}
	return v
}

// Unsent says what becomes of samples a tracker has not taken when bridge
// exits: the command that uploads them later, or that they are lost when
// there is no spool file.
func (s *Session) Unsent() string {
	if s.spool.InMemory() {
		return "there is no spool file: the samples no tracker took are lost"
	}
	return "the samples no tracker took stay in the spool; upload them later with: " + SyncCommand(s.spool.Path())
}
