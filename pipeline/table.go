package pipeline

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
)

// The end-of-run table: where to see the run, how long the job ran and
// how it ended, what was measured, and where the samples went. Each row
// is a sentence a user acts on; a row with nothing to say is left out.

// Ending is what the end-of-run table is told by its caller (runner.Run's
// target): its title, the job's span (its target's start and end; a zero
// Start: not known), the rows that say how the job ended (after the
// span), and rows after the measurements.
type Ending struct {
	Title      string
	Start, End time.Time
	Head, Rows []summary.Row
}

// Report writes the end-of-run table: each tracker's link to the run (as
// its client prints it), the job's span and sample count, e.Head, what was
// measured, what to ask for next time, the collectors that failed (if
// any), e.Rows, then where the samples went.
func (s *Session) Report(w io.Writer, e Ending) {
	rows := append([]summary.Row{s.spanRow(e.Start, e.End)}, e.Head...)
	rows = append(append(append(append(append(rows, s.acc.Rows()...), s.bottleneckRows()...), s.adviceRows()...), s.collectorRows()...), e.Rows...)
	summary.Write(w, e.Title, s.links(), append(rows, s.trackerRows()...))
}

// links are the lines each tracker's client prints where a run ends:
// where the run is seen.
func (s *Session) links() []string {
	var lines []string
	for _, r := range s.sinks {
		if l, ok := r.Sink.(tracker.Linker); ok && r.run() != "" {
			if ls, ok := l.Link(); ok {
				lines = append(lines, ls...)
			}
		}
	}
	return lines
}

// spanRow says how long the job ran, from when to when, and how many
// samples bridge took of it.
func (s *Session) spanRow(start, end time.Time) summary.Row {
	n := s.acc.Samples()
	taken := "no sample taken"
	if n > 0 {
		taken = fmt.Sprintf("%d %s taken", n, plural(n, "sample", "samples"))
	}
	if start.IsZero() || end.Before(start) {
		return summary.Row{What: "samples", Value: taken}
	}
	start, end = start.UTC(), end.UTC()
	when := fmt.Sprintf("from %s to %s UTC on %s", start.Format("15:04:05"), end.Format("15:04:05"), start.Format("2006-01-02"))
	if end.Format(time.DateOnly) != start.Format(time.DateOnly) {
		when = fmt.Sprintf("from %s to %s UTC", start.Format(time.DateTime), end.Format(time.DateTime))
	}
	return summary.Row{What: "duration", Value: summary.Duration(end.Sub(start)) + ", " + when + "; " + taken}
}

// plural is one or many by n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// bottleneckRows is the node's bottleneck verdict over the job and each
// cause's share of it; none before a verdict's window closed.
func (s *Session) bottleneckRows() []summary.Row {
	r, ok := s.Bottleneck()
	if !ok {
		return nil
	}
	return []summary.Row{{What: "bottleneck", Value: r.Text() + "; " + r.SharesText()}}
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
			v := fmt.Sprintf("failed in %d of its %d runs", h.Failures, h.Runs)
			if h.OK {
				v += ", the last of which succeeded"
			}
			parts = append(parts, v+"; its last error: "+h.LastError)
		}
		if h.Refused > 0 {
			parts = append(parts, fmt.Sprintf("left out %d %s outside the series' range, the last: %s", h.Refused, plural(h.Refused, "value", "values"), h.LastRefused))
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
		where := "; upload the samples to one with: " + SyncCommand(s.spool.Path())
		if s.spool.InMemory() {
			where = ", and there is no spool file: the samples are only in this table"
		}
		rows = append(rows, summary.Row{What: "tracker", Value: "none configured" + where})
	}
	for i, r := range s.sinks {
		rows = append(rows, summary.Row{What: r.Sink.Name(), Value: s.trackerRow(r)})
		if i < len(s.ends) && s.ends[i] != "" {
			v := s.ends[i]
			if v == endRecorded {
				v = "recorded on the run"
			}
			rows = append(rows, summary.Row{What: r.Sink.Name() + " end", Value: v})
		}
	}
	return rows
}

// endRecorded is what finishSink says of an end its tracker took.
const endRecorded = "recorded"

// endLeft says what records an end of the job that a tracker did not
// take: `bridge sync` of the spool, which has it.
func (s *Session) endLeft() string {
	if s.spool.InMemory() {
		return "there is no spool file for `bridge sync` to record it from"
	}
	return "record it later with: " + SyncCommand(s.spool.Path())
}

// trackerRow says what happened with one tracker, from what happened: its
// run, whether it ever answered, what it was sent and what it was not.
func (s *Session) trackerRow(r SinkRun) string {
	st, sent, err := r.fwd.Status()
	if re := (*tracker.RunEnded)(nil); errors.As(err, &re) {
		sent = max(sent-re.LeftOut, 0) // acknowledged, not sent
	}
	run := r.run()
	samples := fmt.Sprintf("%d %s", sent, plural(sent, "sample", "samples"))
	var v string
	switch reached := r.reached(); {
	case run == "" && !reached:
		v = "never reached, so no run was created"
	case run == "":
		v = "reached, but no run was found or created before bridge exited"
	case !reached:
		v = fmt.Sprintf("never reached; %s sent to run %s", samples, run)
	default:
		switch st {
		case tracker.StateOK:
			v = fmt.Sprintf("%s sent to run %s", samples, run)
		case tracker.StateRunEnded:
			v = fmt.Sprintf("%s sent to run %s", samples, run) // err says when its owner ended it
		case tracker.StateStopped:
			v = fmt.Sprintf("%s sent to run %s, then bridge stopped sending after an error that retrying cannot fix", samples, run)
		case tracker.StateRetrying:
			v = fmt.Sprintf("%s sent to run %s; bridge was still retrying when it exited", samples, run)
		default:
			v = fmt.Sprintf("%s sent to run %s; its state when bridge exited: %s", samples, run, st)
		}
		if r.Late != nil {
			v += " (the run was created after the job started: the tracker answered late)"
		}
	}
	if n := s.spool.PendingCount(r.Sink.Name(), run); n > 0 {
		where := ": upload them with: " + SyncCommand(s.spool.Path())
		if s.spool.InMemory() {
			where = ", and lost: there is no spool file"
		}
		v += fmt.Sprintf("; %d not sent%s", n, where)
	}
	if err != nil && st != tracker.StateOK {
		v += "; " + err.Error()
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
