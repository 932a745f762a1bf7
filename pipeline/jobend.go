package pipeline

import (
	"maps"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
)

// What the spool's end record keeps of a job's end: everything the
// trackers were told (tracker.EndInfo), so that `bridge sync` records the
// end a live upload would have (RecordedEnd). Its info is the end's tags,
// and, not tags of the run, the status and which trackers took the end
// (EndRecordedTag); its metrics are the job's figures.
const (
	endPrefix    = "bridge.end."
	endStatus    = endPrefix + "status"
	endRecPrefix = "bridge.end_recorded."
)

// EndRecord is the spool's end record of end; info is its tags with the
// spool's own notes (EndRecordedTag).
func EndRecord(end tracker.EndInfo, info map[string]string) spool.Record {
	code := end.ExitCode
	info = maps.Clone(info)
	if info == nil {
		info = map[string]string{}
	}
	info[endStatus] = tracker.TerminalStatus(end)
	rec := spool.Record{Time: end.Time.UnixMilli(), ExitCode: &code, Info: info}
	for _, p := range end.Figures {
		if rec.Metrics == nil {
			rec.Metrics = spool.Values{}
		}
		rec.Metrics[p.Name()] = p.Value
	}
	return rec
}

// RecordedEnd is the end a spool's end record (rec, with its exit code)
// holds, as its bridge told the trackers: exit code and signal, time,
// status, tags and figures. A spool written before the status was kept
// gets the one its exit calls for (tracker.TerminalStatus).
func RecordedEnd(rec *spool.Record) tracker.EndInfo {
	end := tracker.EndInfo{Time: time.UnixMilli(rec.Time), Tags: map[string]string{}, Status: rec.Info[endStatus]}
	if rec.ExitCode != nil {
		end.ExitCode = *rec.ExitCode
	}
	if rec.Info["bridge.exit_signal"] != "" {
		end.Signal = end.ExitCode - 128
	}
	for k, v := range rec.Info {
		if !strings.HasPrefix(k, endPrefix) && !strings.HasPrefix(k, endRecPrefix) {
			end.Tags[k] = v
		}
	}
	for _, d := range summary.Figures() {
		v, ok := rec.Metrics[d.Name]
		if f, fin := metrics.Finite(v); ok && fin && d.Range().Holds(f.Float64()) {
			end.Figures = append(end.Figures, metrics.At(d, f.Float64()))
		}
	}
	return end
}
