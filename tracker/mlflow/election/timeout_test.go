package election_test

import (
	"testing"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/tracker/mlflow/election"
)

// A node that meets a stray candidate of a multi-node job (its creator
// died) has the job's run before --start-timeout's default passes, with a
// few requests' time to spare, so that a restarted node's child gets the
// run (round 4, fault 4: the stall window was longer than the start
// timeout). config's TestStartTimeoutCoversStray holds the flags' defaults
// to these constants.
func TestStartTimeoutCoversStray(t *testing.T) {
	const requests = time.Second // a dozen requests to a server that answers in 80 ms
	if need := election.StrayCleared(election.DefaultSettle) + requests; need >= config.DefaultStartTimeout {
		t.Errorf("--start-timeout %v: clearing a stray candidate takes up to %v", config.DefaultStartTimeout, need)
	}
}
