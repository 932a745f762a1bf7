package pipeline

import (
	"fmt"
	"strings"

	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
)

// keepDeliveredSpool keeps a spool at the default path even when every
// sample reached every tracker. A --keep-spool flag (Settings.KeepSpool, from
// config.Config) is meant to replace this constant.
const keepDeliveredSpool = false

// closeSpool closes the spool and removes it when it holds nothing a user
// still needs: bridge chose its path (a path the user gave is always kept),
// bridge created every run it wrote to, every started tracker took every
// sample, and the file is whole (no lost, dropped or skipped records).
// Anything else keeps it, for `bridge sync` and for a restarted bridge's
// forensics. A run given to bridge (MLFLOW_RUN_ID, W&B's run) keeps it
// because a later bridge on that run continues its steps from the file.
func (s *Session) closeSpool() {
	if s.set.Spool != "" || keepDeliveredSpool || len(s.failedStarts) > 0 || len(s.sinks) == 0 {
		s.spool.Close()
		return
	}
	for _, r := range s.sinks {
		c, ok := r.Sink.(interface{ Created() bool })
		if st, _, _ := r.fwd.Status(); st != tracker.StateOK || !ok || !c.Created() {
			s.spool.Close()
			return
		}
	}
	if !s.spool.Delivered() {
		s.spool.Close()
		return
	}
	if err := s.spool.Remove(); err != nil {
		s.log.Warn("cannot remove the delivered spool", "err", err)
		return
	}
	s.spoolRemoved = true
	s.log.Debug("every sample reached every tracker; spool removed", "path", s.spool.Path())
}

// spoolRows report, for the end-of-run table, where the spool is and what
// went wrong with it; a spool that simply worked gets one short row.
func (s *Session) spoolRows() []summary.Row {
	st := s.spool.Stats()
	where := s.spool.Path()
	if s.spoolRemoved {
		where = "removed (every sample delivered)"
	}
	var notes []string
	if st.Outages > 0 {
		notes = append(notes, fmt.Sprintf("writing failed %d times (%d outages)", st.WriteFailures, st.Outages))
	}
	if st.Buffered > 0 {
		notes = append(notes, fmt.Sprintf("%d records never written", st.Buffered))
	}
	if st.LostUnwritten > 0 {
		notes = append(notes, fmt.Sprintf("%d samples dropped from the full memory buffer", st.LostUnwritten))
	}
	if st.DroppedByCap > 0 || st.Compactions > 0 {
		notes = append(notes, fmt.Sprintf("size cap: %d undelivered samples dropped in %d rewrites", st.DroppedByCap, st.Compactions))
	}
	if st.BadLines > 0 {
		notes = append(notes, fmt.Sprintf("%d unreadable lines skipped (lines %v)", st.BadLines, st.BadLineNums))
	}
	if st.TornTail {
		notes = append(notes, "a torn last line was repaired")
	}
	v := fmt.Sprintf("%s: %d samples written", where, st.Written)
	if len(notes) > 0 {
		v += "; " + strings.Join(notes, "; ")
	}
	return []summary.Row{{What: "spool", Value: v}}
}
