package runner

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/syncbuf"
)

// A panic in one step of the end is that step's: the next runs, and the
// target's exit status is returned, not Go's exit 2, after a panic
// outside any step too.
func TestEndPanicKeepsStatus(t *testing.T) {
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var ran []string
	end := func() (status int) {
		defer keepStatus(&status, 5, log)
		endStep(log, "first", func() { panic("boom in the first step") })
		endStep(log, "second", func() { ran = append(ran, "second") })
		panic("boom outside any step") // keepStatus's, not a step's
	}
	if got := end(); got != 5 {
		t.Errorf("status %d, want the child's 5", got)
	}
	if !slices.Equal(ran, []string{"second"}) || !strings.Contains(logs.String(), "boom in the first step") || !strings.Contains(logs.String(), "boom outside any step") {
		t.Errorf("ran %v, want the second step; log:\n%s", ran, logs.String())
	}
}
