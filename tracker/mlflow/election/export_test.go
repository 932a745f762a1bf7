package election

import "time"

// StrayCleared is how long after a node of tier 0 first sees a stray
// candidate (its creator died) the node has the job's run, when requests
// take no time: an eligible stray's window and the grace (tier 0, no round
// trip), then the decision; or the grace, then an election of its own.
func StrayCleared(settle time.Duration) time.Duration {
	return stretch(settle) + settle + time.Second
}
