package election_test

// The election as a deterministic simulation (harness/electsim): the real
// protocol code of every node against a model of MLflow's run store, over
// thousands of seeded schedules. A failing schedule prints its seed;
// BRIDGE_ELECTSIM_SEED=<seed> go test -run TestElectionSimulated/<family>
// replays it alone.

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/electsim"
)

// family is a kind of schedule; each seed draws its sizes and rates.
type family struct {
	name string
	opts func(seed uint64) electsim.Options
}

func pick[T any](seed uint64, salt uint64, xs ...T) T {
	return xs[(seed*2654435761+salt)%uint64(len(xs))]
}

var families = []family{
	{"race", func(seed uint64) electsim.Options {
		return electsim.Options{
			Nodes:       pick(seed, 1, 2, 3, 5, 8, 16),
			StartSpread: pick(seed, 2, 0, 100*time.Millisecond, time.Second, 5*time.Second),
			MaxDelay:    pick(seed, 3, time.Millisecond, 50*time.Millisecond, 300*time.Millisecond),
			Tiers:       seed%2 == 0,
		}
	}},
	{"faults", func(seed uint64) electsim.Options {
		return electsim.Options{
			Nodes:       pick(seed, 1, 2, 3, 5, 8),
			StartSpread: pick(seed, 2, 0, time.Second, 10*time.Second),
			MaxDelay:    pick(seed, 3, 10*time.Millisecond, 200*time.Millisecond, 800*time.Millisecond),
			Lose:        pick(seed, 4, 0.0, 0.05, 0.2),
			Drop:        pick(seed, 5, 0.0, 0.05, 0.2),
			Dup:         pick(seed, 6, 0.0, 0.05, 0.2),
			Kill:        pick(seed, 7, 0.0, 0.01, 0.05),
			Restart:     pick(seed, 8, 0.0, 0.5, 1.0),
			FaultsUntil: 60 * time.Second,
			Tiers:       seed%3 == 0,
		}
	}},
	{"slow-creates", func(seed uint64) electsim.Options {
		// Every request slower than T for a while (fault 2 of round 4):
		// the windows stretch instead of the candidates being withdrawn.
		return electsim.Options{
			Nodes:       pick(seed, 1, 2, 4, 8, 16),
			StartSpread: pick(seed, 2, 0, time.Second),
			MaxDelay:    pick(seed, 3, 10*time.Millisecond, 100*time.Millisecond),
			SlowFrom:    0,
			SlowUntil:   pick(seed, 4, 10*time.Second, 60*time.Second),
			SlowDelay:   pick(seed, 5, 600*time.Millisecond, 1500*time.Millisecond, 4*time.Second),
			Settle:      pick(seed, 6, 200*time.Millisecond, time.Second),
			Tiers:       seed%2 == 1,
		}
	}},
	{"tails", func(seed uint64) electsim.Options {
		// Some answers come long after T, at random: windows of every
		// length race each other.
		return electsim.Options{
			Nodes:       pick(seed, 1, 2, 3, 4, 6),
			StartSpread: pick(seed, 2, 0, 200*time.Millisecond, time.Second),
			MaxDelay:    pick(seed, 3, time.Millisecond, 20*time.Millisecond),
			Settle:      pick(seed, 4, 100*time.Millisecond, 300*time.Millisecond, time.Second),
			Tail:        pick(seed, 5, 0.1, 0.3, 0.6),
			TailMax:     pick(seed, 6, 500*time.Millisecond, 2*time.Second, 5*time.Second),
			Lose:        pick(seed, 7, 0.0, 0.0, 0.05),
			FaultsUntil: 30 * time.Second,
			Tiers:       seed%4 == 0,
		}
	}},
	{"killed-creators", func(seed uint64) electsim.Options {
		// Nodes die at any step, often (fault 3): the others, and the
		// restarted ones, still find one run.
		return electsim.Options{
			Nodes:       pick(seed, 1, 2, 3, 4, 6),
			StartSpread: pick(seed, 2, 0, 2*time.Second),
			MaxDelay:    pick(seed, 3, 5*time.Millisecond, 100*time.Millisecond),
			Kill:        pick(seed, 4, 0.05, 0.15, 0.3),
			Restart:     pick(seed, 5, 0.3, 1.0),
			Lose:        pick(seed, 6, 0.0, 0.1),
			FaultsUntil: pick(seed, 7, 20*time.Second, 90*time.Second),
			Tiers:       seed%2 == 0,
		}
	}},
}

// TestElectionSimulated checks, over every schedule: at most one run ever
// elected; every live node joins it, within the stated bound once the
// faults stop; no other candidate active after the job's end (the sweep).
func TestElectionSimulated(t *testing.T) {
	runs := uint64(1000)
	if testing.Short() {
		runs = 50
	}
	if v := os.Getenv("BRIDGE_ELECTSIM_RUNS"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("BRIDGE_ELECTSIM_RUNS=%q: %v", v, err)
		}
		runs = n
	}
	one, replay := uint64(0), false
	if v := os.Getenv("BRIDGE_ELECTSIM_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("BRIDGE_ELECTSIM_SEED=%q: %v", v, err)
		}
		one, replay = n, true
	}
	for fi, f := range families {
		t.Run(f.name, func(t *testing.T) {
			var worst time.Duration
			var seeds []uint64
			if replay {
				seeds = []uint64{one}
			} else {
				for i := range runs {
					seeds = append(seeds, uint64(fi)<<32|i)
				}
			}
			for _, seed := range seeds {
				o := f.opts(seed)
				o.Seed = seed
				if replay {
					o.Trace = func(s string) { t.Log(s) }
				}
				res, err := electsim.Run(o)
				if err != nil {
					t.Fatalf("%v\n  options %+v\n  replay: BRIDGE_ELECTSIM_SEED=%d go test -run 'TestElectionSimulated/%s' ./tracker/mlflow/election", err, o, seed, f.name)
				}
				for _, j := range res.Joined {
					worst = max(worst, j.At-max(o.FaultsUntil, o.SlowUntil, j.Started))
				}
			}
			t.Logf("%d schedules; the slowest join came %v after the faults stopped", len(seeds), worst)
		})
	}
}

func ExampleRun() {
	res, err := electsim.Run(electsim.Options{Seed: 1, Nodes: 3, MaxDelay: 10 * time.Millisecond})
	fmt.Println(len(res.Joined), len(res.Elected), err)
	// Output: 3 1 <nil>
}
