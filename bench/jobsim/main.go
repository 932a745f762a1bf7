// Command jobsim plays a whole multi-node job (its election, its run's
// state lines, its live phase: each node's lead ticking once a minute
// with the job's live evaluation and its handover, every node's end, the
// first failure, the report) in the
// deterministic simulation of harness/electsim, at a size CI does not
// run: by default 1,024 nodes, 20% of requests failing (lost, never
// applied, refused; a quarter as many duplicated), nodes killed at any
// step and half of them restarted, 3% of children failing and 1% killed
// (-fail 0 -killed 0 -kill 0: a clean job, FINISHED); children run 7 to
// 8 minutes, and evaluator candidates (ranks 0..2) are killed at a tick
// of theirs: 1 in seed 1, 3 in seed 2, none in seed 3 (then again).
// It checks the simulation's invariants on each seed and prints what the
// job's run holds and the requests it took.
//
//	go run ./bench/jobsim -nodes 1024 -seeds 5
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/bridge-dev/bridge/harness/electsim"
)

func main() {
	nodes := flag.Int("nodes", 1024, "nodes in the job")
	seeds := flag.Int("seeds", 3, "schedules to play, seeds 1..N")
	faults := flag.Float64("faults", 0.2, "share of requests that fail (lost, never applied, refused)")
	kill := flag.Float64("kill", 0.002, "probability a node is killed at a step")
	failShare := flag.Float64("fail", 0.03, "share of children that fail (exit 1)")
	killedShare := flag.Float64("killed", 0.01, "share of children killed (137)")
	tick := flag.Duration("tick", time.Minute, "period of the nodes' live ticks (0: no live phase)")
	runFor := flag.Duration("run-for", 7*time.Minute, "children run this long, plus up to a minute")
	kills := flag.Int("kill-candidates", -1, "evaluator candidates killed at a tick (-1: 1, 3, 0 by seed)")
	evaluated := flag.Bool("evaluated", true, "check the job's live series: a point a minute a candidate lived, but the minutes lost with a dead candidate's slots")
	flag.Parse()
	bad := 0
	for seed := uint64(1); seed <= uint64(*seeds); seed++ {
		o := electsim.Options{
			Seed: seed, Nodes: *nodes, Tiers: true,
			StartSpread: 10 * time.Second, MaxDelay: 50 * time.Millisecond, Timeout: 5 * time.Second,
			Lose: *faults / 4, Drop: *faults / 4, Refuse: *faults / 2, Dup: *faults / 4,
			Kill: *kill, Restart: 0.5, FaultsUntil: time.Hour,
			End: true, RunFor: *runFor, EndSpread: time.Minute,
			Fail: *failShare, Killed: *killedShare, MaxPerNodeMinute: 60,
			Tick: *tick, KillCandidates: *kills, Evaluated: *evaluated,
		}
		if *kills < 0 {
			o.KillCandidates = []int{0, 1, 3}[seed%3]
		}
		began := time.Now()
		res, err := electsim.Run(o)
		j := res.Job
		kinds := make([]string, 0, len(res.Requests))
		total := 0
		for k, n := range res.Requests {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
			total += n
		}
		slices.Sort(kinds)
		fmt.Printf("seed %d, %d nodes: run %s (lines call for %s), %d lines, %d nodes' ends recorded, run %d bytes, "+
			"at most %d requests a node in a minute, %.1f a node in all; first failure %q; report %d rows (%.1fs)\n  requests: %v\n",
			seed, *nodes, j.Status, j.Want, j.Lines, j.Ended, j.RunBytes, j.MaxPerNodeMinute, float64(total)/float64(*nodes),
			j.FirstFailure, j.ReportRows, time.Since(began).Seconds(), kinds)
		l := j.Live
		fmt.Printf("  live: run at most %d bytes as a tick read it; %d ticks (%d failed within the tick's budget), reads of the job's run a minute: at most %d "+
			"(%d minutes read, %d of them twice); candidates killed %d, candidates' live phases ended %d, handovers %d; "+
			"series minutes %d (%d missed); killed nodes checked as stopped reporting %d; nodes' ends left to the spool %d\n",
			l.MaxRunBytes, l.Ticks, l.FailedTicks, l.MaxReadsMinute, l.ReadMinutes, l.TwoReadMinutes, l.CandidatesKilled, l.CandidateDeaths,
			l.Handovers, l.SeriesMinutes, l.MissedMinutes, l.StoppedChecked, len(j.BudgetSpent))
		if len(j.BudgetSpent) > 0 {
			fmt.Printf("  ends left to the spool (a request failed on every try within 30 s): %v\n", j.BudgetSpent)
		}
		if err != nil {
			bad++
			fmt.Printf("  INVARIANT BROKEN: %v\n", err)
		}
	}
	if bad > 0 {
		os.Exit(1)
	}
}
