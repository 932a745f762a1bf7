package runner

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/syncbuf"
)

// A panic in one step of the end is that step's: the next runs, and the
// target's exit status is returned, not Go's exit 2.
func TestEndPanicKeepsStatus(t *testing.T) {
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var ran []string
	end := func() (status int) {
		defer keepStatus(&status, 5, log)
		endStep(log, "first", func() { panic("boom in the first step") })
		endStep(log, "second", func() { ran = append(ran, "second") })
		var m map[string]int
		m["x"] = 1 // outside any step: still the child's status
		return 0
	}
	if got := end(); got != 5 {
		t.Errorf("status %d, want the child's 5", got)
	}
	if len(ran) != 1 || !strings.Contains(logs.String(), "boom in the first step") || !strings.Contains(logs.String(), "assignment to entry in nil map") {
		t.Errorf("ran %v; log:\n%s", ran, logs.String())
	}
}
