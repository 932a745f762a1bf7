package electsim

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// jobOptions is a job of n nodes, each request lost, never applied or
// refused with probability faults in all (and duplicated with a quarter
// of it; an answer lost is an error after 5 s), a node killed at a step with probability kill and restarted
// half the time, 3% of children failing and 1% killed: its election, its
// run and its end.
func jobOptions(seed uint64, n int, faults, kill float64) Options {
	return Options{
		Seed: seed, Nodes: n, Tiers: true,
		StartSpread: 10 * time.Second, MaxDelay: 50 * time.Millisecond,
		Lose: faults / 4, Drop: faults / 4, Refuse: faults / 2, Dup: faults / 4, Timeout: 5 * time.Second,
		Kill: kill, Restart: 0.5, FaultsUntil: time.Hour,
		End: true, RunFor: 2 * time.Minute, EndSpread: time.Minute,
		Fail: 0.03, Killed: 0.01, MaxPerNodeMinute: 60,
	}
}

// TestJobSimulated: the whole job (election, state lines, the end, the
// first failure, the report) as a deterministic simulation, small jobs
// over many seeds with 20% of requests failing and nodes killed at any
// step. BRIDGE_ELECTSIM_SEED=<seed> replays one; 1,024 nodes are
// bench/jobsim (large N is not CI's).
func TestJobSimulated(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 10
	}
	from := uint64(1)
	if s := os.Getenv("BRIDGE_ELECTSIM_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("BRIDGE_ELECTSIM_SEED=%q: %v", s, err)
		}
		from, seeds = v, 1
	}
	for seed := from; seed < from+uint64(seeds); seed++ {
		n := []int{2, 3, 8, 16, 32}[seed%5]
		o := jobOptions(seed, n, 0.2, []float64{0, 0.002, 0.01}[seed%3])
		res, err := Run(o)
		if err != nil {
			t.Errorf("%d nodes: %v (replay: BRIDGE_ELECTSIM_SEED=%d)", n, err, seed)
			continue
		}
		if res.Job.Ended == 0 {
			t.Errorf("seed %d: no node recorded its end", seed)
		}
	}
}

// TestJobSimulatedCatchesAWrongStatus: the invariants can fail: a job
// whose run is FINISHED though a node's line says FAILED is refused.
func TestJobSimulatedCatchesAWrongStatus(t *testing.T) {
	e := newEngine(jobOptions(1, 2, 0, 0))
	e.res.Elected = []string{"r"}
	j := e.model.job("r")
	j.status = "FINISHED"
	j.tags["bridge.nodes"] = "2"
	j.tags["bridge.state.node-0"] = "status=FAILED exit=1 reason=app_error ended=1"
	j.tags["bridge.failed.node-0"] = "FAILED: exit 1"
	err := e.checkJob(func(f string, a ...any) error { return fmt.Errorf(f, a...) })
	if err == nil {
		t.Error("a FINISHED run with a FAILED line passed")
	}
}
