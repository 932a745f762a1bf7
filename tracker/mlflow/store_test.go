package mlflow

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"

	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
)

// The report's summary fits the tag it goes in.
func TestSummaryFitsATag(t *testing.T) {
	if report.SummaryMax > maxTagValue {
		t.Errorf("report.SummaryMax %d, over MLflow's %d characters a tag", report.SummaryMax, maxTagValue)
	}
}

// A page of a series' history fits the bound on an answer, whatever the
// key's length.
func TestHistoryPageFitsAnAnswer(t *testing.T) {
	for _, key := range []string{"a", "system/node-12/container_memory_working_set_megabytes", strings.Repeat("k", maxKeyLength)} {
		page := historyPageOf(key)
		if page < 1 || page > historyPage || page*(len(key)+historyPointJSON) > tracker.MaxResponseBytes {
			t.Errorf("page of %d points for a key of %d bytes: over an answer's %d bytes", page, len(key), tracker.MaxResponseBytes)
		}
	}
}

// LogPoints on a real server: one point a series, at the time and step
// given, read back as each series' history; a value that is not finite
// left out; a key MLflow refuses an error, nothing sent; the same points
// again change nothing.
func TestLogPoints(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := fmt.Sprintf("log-points-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := serverSink(t, srv.URL, Config{ExperimentName: exp})
	if _, err := s.Start(ctx, tracker.StartInfo{NodeID: "n0", RunName: "job"}); err != nil {
		t.Fatal(err)
	}
	id := s.Run().ID
	at := time.UnixMilli(1796580000000)
	var w tracker.SeriesWriter = s
	values := map[string]float64{"system/job_a_min": 1.5, "system/job_a_max": 3, "system/job_nan": math.NaN()}
	for range 2 {
		if err := w.LogPoints(ctx, id, values, at, 7); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.LogPoints(ctx, id, map[string]float64{"system/job_b": 1, "bad//key": 2}, at, 8); err == nil || !strings.Contains(err.Error(), "bad//key") {
		t.Errorf("a key MLflow refuses: %v, want an error naming it", err)
	}
	for key, want := range map[string]float64{"system/job_a_min": 1.5, "system/job_a_max": 3} {
		pts, err := s.History(ctx, id, key)
		if err != nil || len(pts) != 1 || pts[0].Value != want || !pts[0].Time.Equal(at) {
			t.Errorf("%s: %v %v, want one point %v at %v", key, pts, err, want, at)
		}
	}
	run, err := s.GetRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := run.Latest["system/job_nan"]; ok {
		t.Error("a NaN was sent")
	}
	if _, ok := run.Latest["system/job_b"]; ok {
		t.Error("a batch with a refused key was partly sent")
	}
}
