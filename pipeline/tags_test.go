package pipeline

import (
	"testing"

	bridgereport "github.com/bridge-dev/bridge/report"
)

// The job's run is found by the tag the report reads (report cannot import
// this package, which imports it).
func TestJobKeyTagIsTheReports(t *testing.T) {
	if TagJobKey != bridgereport.TagJobKey {
		t.Errorf("TagJobKey %q, the report reads %q", TagJobKey, bridgereport.TagJobKey)
	}
}
