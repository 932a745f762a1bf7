package upload

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/bridge-dev/bridge/spool"
)

// Job is one run `bridge sync` uploads to, and the attempts whose samples
// belong to it: those that recorded it, or, for run "", a chain of
// attempts that recorded no run for the tracker (an attempt that follows a
// lost one resumes its job), which the run sync creates then takes
// (claim).
type Job struct {
	tracker string
	run     string // "": sync creates one
	claim   []int  // attempt numbers the run is recorded for
	last    *spool.Attempt
}

// isSync reports whether a is an attempt of `bridge sync` (not a training
// attempt).
func isSync(a *spool.Attempt) bool { return a.Start.Info["mode"] == "sync" }

// Plan lists the runs to upload to, tracker by tracker, in the order the
// file first names them. With runID, every tracker uploads to it the
// samples of the attempts that recorded it or no run at all; attempts that
// wrote to other runs are left out and named in skipped.
func Plan(attempts []spool.Attempt, trackers []string, runID string) (jobs []Job, skipped []string) {
	var training []*spool.Attempt
	lastSync := map[string]string{}
	for i := range attempts {
		if a := &attempts[i]; isSync(a) {
			for t, r := range a.Start.Runs {
				lastSync[t] = r
			}
		} else {
			training = append(training, a)
		}
	}
	for _, t := range trackers {
		switch {
		case len(training) == 0:
			// A file bridge did not write: its samples go to the run an
			// earlier sync gave them, else to a new one.
			jobs = append(jobs, Job{tracker: t, run: cmp.Or(runID, lastSync[t])})
		case runID != "":
			j, others := toRun(training, t, runID)
			if len(others) > 0 {
				skipped = append(skipped, fmt.Sprintf("%s: attempts %s wrote to other runs; their samples are not sent to --run-id %s (without --run-id, sync sends them to their own runs)",
					t, strings.Join(others, ", "), runID))
			}
			jobs = append(jobs, j)
		default:
			jobs = append(jobs, byRun(training, t)...)
		}
	}
	// A chain whose attempts wrote no sample has nothing to upload.
	return slices.DeleteFunc(jobs, func(j Job) bool {
		return j.run == "" && j.last != nil && !slices.ContainsFunc(training, func(a *spool.Attempt) bool {
			return a.Samples > 0 && slices.Contains(j.claim, a.Start.Attempt)
		})
	}), skipped
}

// toRun is the job of --run-id runID for tracker t: the attempts that
// recorded no run for t (claimed) or runID; others names the attempts that
// wrote to another run.
func toRun(training []*spool.Attempt, t, runID string) (j Job, others []string) {
	j = Job{tracker: t, run: runID}
	for _, a := range training {
		switch r := a.Start.Runs[t]; r {
		case "":
			j.claim, j.last = append(j.claim, a.Start.Attempt), a
		case runID:
			j.last = a
		default:
			others = append(others, fmt.Sprintf("%d (run %s)", a.Start.Attempt, r))
		}
	}
	return j, others
}

// byRun is one job per run the attempts recorded for tracker t, and one
// per chain of run-less attempts.
func byRun(training []*spool.Attempt, t string) []Job {
	var jobs []Job
	index := map[string]int{}
	chain := -1 // the job of the run-less chain the previous attempt is in
	for i, a := range training {
		r := a.Start.Runs[t]
		switch {
		case r != "":
			if k, ok := index[r]; ok {
				jobs[k].last = a
			} else {
				index[r] = len(jobs)
				jobs = append(jobs, Job{tracker: t, run: r, last: a})
			}
			chain = -1
		case chain >= 0 && training[i-1].End == nil:
			jobs[chain].claim, jobs[chain].last = append(jobs[chain].claim, a.Start.Attempt), a
		default:
			chain = len(jobs)
			jobs = append(jobs, Job{tracker: t, claim: []int{a.Start.Attempt}, last: a})
		}
	}
	return jobs
}
