package pipeline

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
)

// linkedSink is a sink whose tracker's client prints where its run is.
type linkedSink struct{ fakeSink }

func (l *linkedSink) Link() ([]string, bool) {
	return []string{"🏃 View run train.py at: http://mlflow/#/experiments/1/runs/" + l.runID}, true
}

// The end-of-run table opens with where the run is seen (each tracker's
// link, as its client prints it), then how long the job ran, from when to
// when, with the samples taken, then how it ended (the caller's head
// rows), before what was measured and where the samples went.
func TestReportOpensWithLinkAndDuration(t *testing.T) {
	sink := &linkedSink{fakeSink{t: t, name: "linked", runID: "r1"}}
	plain := &fakeSink{t: t, name: "plain", runID: "r2"}
	s := open(t, settings(t), []metrics.Collector{&counter{}}, nil, sink, plain)
	s.Run()
	s.Stop(nil)
	s.Finish(tracker.EndInfo{Time: time.Now()})
	start := time.Date(2026, 12, 7, 17, 1, 56, 0, time.UTC)
	var b bytes.Buffer
	s.Report(&b, Ending{Title: "bridge: end of run", Start: start, End: start.Add(12*time.Minute + 5*time.Second),
		Head: []summary.Row{{What: "exit status", Value: "0"}}})
	lines := strings.Split(b.String(), "\n")
	taken := fmt.Sprintf("%d samples taken", s.Acc().Samples())
	if s.Acc().Samples() == 1 {
		taken = "1 sample taken"
	}
	want := []string{"", "bridge: end of run", "  🏃 View run train.py at: http://mlflow/#/experiments/1/runs/r1"}
	if len(lines) < 5 || strings.Join(lines[:3], "\n") != strings.Join(want, "\n") ||
		!strings.HasPrefix(lines[3], "  duration ") || !strings.HasSuffix(lines[3], "12 min 5 s, from 17:01:56 to 17:14:01 UTC on 2026-12-07; "+taken) ||
		!strings.HasPrefix(lines[4], "  exit status ") {
		t.Errorf("table:\n%s\nwant it to open with the link, the duration and the exit status", b.String())
	}
	if strings.Count(b.String(), "View run") != 1 {
		t.Errorf("table:\n%s\nwant one link: the plain tracker has none", b.String())
	}
	// Without a start: the sample count alone; over midnight: both dates.
	b.Reset()
	s.Report(&b, Ending{Title: "t"})
	if !strings.Contains(b.String(), "  samples ") || strings.Contains(b.String(), "duration") {
		t.Errorf("no start known:\n%s", b.String())
	}
	late := time.Date(2026, 12, 7, 23, 59, 58, 0, time.UTC)
	b.Reset()
	s.Report(&b, Ending{Title: "t", Start: late, End: late.Add(5 * time.Second)})
	if !strings.Contains(b.String(), "5.0 s, from 2026-12-07 23:59:58 to 2026-12-08 00:00:03 UTC; ") {
		t.Errorf("over midnight:\n%s", b.String())
	}
}
