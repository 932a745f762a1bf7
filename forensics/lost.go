package forensics

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/metrics"

	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/summary"
)

// Tag keys of a lost previous attempt.
const (
	TagPreviousAttemptLost       = "bridge.previous_attempt_lost"
	TagPreviousAttemptLastSample = "bridge.previous_attempt_last_sample"
)

// Lost is an earlier attempt of the run that stopped without a clean
// shutdown: bridge was killed with its container (a group OOM kill, a
// SIGKILL after the grace period) or the node went away.
type Lost struct {
	Record    spool.Record // its start record (runs it wrote to, start tags)
	Attempt   int          // its attempt number in the spool
	PID       int          // bridge's pid in that attempt
	Start     time.Time    // when it started
	HasSample bool         // it left at least one sample
	Last      metrics.Sample
	// Next is when the attempt after it started (the one that found it).
	// The gap Last.Time..Next bounds when it stopped: bridge cannot know
	// the moment itself.
	Next     time.Time
	Sentence string
}

// LostBefore looks at a spool read before this attempt's start record is
// written (its tags go to the tracker first): earlier holds only the earlier
// attempts, next is when this one starts. It returns the most recent earlier
// training attempt (a `bridge sync` start, Info mode=sync, is skipped) when
// that one has no end record. An earlier attempt that ended cleanly means
// nothing was lost since: older lost attempts were reported by the attempt
// that followed them.
func LostBefore(earlier []spool.Attempt, next time.Time) (*Lost, bool) {
	for i := len(earlier) - 1; i >= 0; i-- {
		a := earlier[i]
		if a.Start.Info["mode"] == "sync" {
			continue
		}
		if a.End != nil {
			return nil, false
		}
		following := next
		if i+1 < len(earlier) {
			following = time.UnixMilli(earlier[i+1].Start.Time)
		}
		l := &Lost{
			Record:  a.Start,
			Attempt: a.Start.Attempt,
			PID:     a.Start.PID,
			Start:   time.UnixMilli(a.Start.Time),
			Next:    following,
		}
		if a.LastSample != nil {
			l.HasSample, l.Last = true, *a.LastSample
		}
		l.Sentence = l.sentence()
		return l, true
	}
	return nil, false
}

func (l *Lost) sentence() string {
	what := fmt.Sprintf("attempt %d (bridge pid %d, started %s) stopped without a clean shutdown",
		l.Attempt, l.PID, l.Start.UTC().Format(time.RFC3339))
	if !l.HasSample {
		return what + " and left no sample"
	}
	s := l.Last
	var facts []string
	ws, hasWS := s.Value(metrics.ContainerMemoryWorkingSet.Name)
	lim, hasLim := s.Value(metrics.ContainerMemoryLimit.Name)
	pct, hasPct := s.Value(metrics.ContainerMemoryWorkingSetPercent.Name)
	switch {
	case hasWS && hasLim && lim > 0:
		if !hasPct {
			pct = 100 * ws / lim
		}
		facts = append(facts, fmt.Sprintf("working set %.1f%% of limit (%.1f of %.1f MB)", pct, ws, lim))
	case hasWS:
		facts = append(facts, fmt.Sprintf("working set %.1f MB (no memory limit)", ws))
	}
	if v, ok := s.Value(metrics.ContainerOOMKills.Name); ok {
		facts = append(facts, fmt.Sprintf("oom_kill counter %.0f", v))
	}
	if v, ok := s.Value(metrics.ContainerPressureMemorySome.Name); ok {
		facts = append(facts, fmt.Sprintf("memory pressure some %.1f%%", v))
	}
	if v, ok := s.Value(metrics.NodeMemoryAvailable.Name); ok {
		facts = append(facts, fmt.Sprintf("node MemAvailable %.0f MB", v))
	}
	if len(facts) == 0 {
		facts = append(facts, fmt.Sprintf("%d metrics, none of memory,", len(s.Points)))
	}
	more := fmt.Sprintf("its last sample, seq %d", s.Seq)
	if len(facts) > 1 {
		more += ": " + strings.Join(facts[1:], ", ")
	}
	return fmt.Sprintf("%s %s before the next attempt started (%s); %s",
		facts[0], duration(l.Next.Sub(s.Time)), more, what)
}

// lastSampleSeries are the series of a lost attempt's last sample worth a
// tag: its memory figures.
var lastSampleSeries = []*metrics.Desc{
	metrics.ContainerMemoryWorkingSet, metrics.ContainerMemoryUsage, metrics.ContainerMemoryRSS, metrics.ContainerMemoryCache,
	metrics.ContainerMemoryPeak, metrics.ContainerMemoryLimit, metrics.ContainerMemoryWorkingSetPercent,
	metrics.ContainerMemoryHighEvents, metrics.ContainerMemoryMaxEvents, metrics.ContainerOOMEvents, metrics.ContainerOOMKills,
	metrics.ContainerOOMGroupKills, metrics.ContainerPressureMemorySome, metrics.ContainerPressureMemoryFull,
	metrics.NodeMemoryAvailable, metrics.NodeMemoryTotal, metrics.ProcessMemoryRSS,
}

// Tags are the run tags reporting the lost attempt. The last sample is a
// compact JSON object of its memory figures.
func (l *Lost) Tags() map[string]string {
	t := map[string]string{TagPreviousAttemptLost: clip(l.Sentence)}
	if !l.HasSample {
		return t
	}
	vals := map[string]metrics.Float{}
	for _, d := range lastSampleSeries {
		if v, ok := l.Last.Value(d.Name); ok && math.Abs(v) < 1e15 {
			if f, ok := metrics.Finite(math.Round(v*10) / 10); ok {
				vals[d.Name] = f
			}
		}
	}
	// encoding/json writes map keys sorted, so the tag is stable.
	b, err := json.Marshal(struct {
		Attempt int                      `json:"attempt"`
		Seq     int64                    `json:"seq"`
		Time    string                   `json:"time"`
		Before  string                   `json:"before_next_attempt"`
		Metrics map[string]metrics.Float `json:"metrics"`
	}{l.Attempt, l.Last.Seq, l.Last.Time.UTC().Format(time.RFC3339Nano), duration(l.Next.Sub(l.Last.Time)), vals})
	if err == nil {
		t[TagPreviousAttemptLastSample] = clip(string(b))
	}
	return t
}

// Rows is the lost attempt's line of the end-of-run table.
func (l *Lost) Rows() []summary.Row {
	return []summary.Row{{What: "previous attempt lost", Value: l.Sentence}}
}
