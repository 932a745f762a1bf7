package mlflow

import (
	"strings"
	"testing"

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
