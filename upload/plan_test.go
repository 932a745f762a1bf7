package upload

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/spool"
)

// att is a training attempt: number, mlflow run ("" none), samples, whether
// it ended cleanly.
func att(n int, run string, samples int, ended bool) spool.Attempt {
	a := spool.Attempt{Start: spool.Record{Attempt: n, Runs: map[string]string{}}, Samples: samples}
	if run != "" {
		a.Start.Runs["mlflow"] = run
	}
	if ended {
		a.End = &spool.Record{}
	}
	return a
}

func syncAtt(n int, run string) spool.Attempt {
	a := att(n, run, 0, true)
	a.Start.Info = map[string]string{"mode": "sync"}
	return a
}

func plan(jobs []Job) string {
	var s []string
	for _, j := range jobs {
		s = append(s, fmt.Sprintf("%s:%q%v", j.tracker, j.run, j.claim))
	}
	return strings.Join(s, " ")
}

// Sync uploads each attempt's samples to its own run: one job per run the
// file names, one new run per chain of run-less attempts (an attempt after
// a lost one resumes it), none for attempts without samples; --run-id
// takes the run-less attempts and its own, and names the others.
func TestPlanSync(t *testing.T) {
	for _, tc := range []struct {
		name     string
		attempts []spool.Attempt
		runID    string
		want     string
		skipped  int
	}{
		{"one run", []spool.Attempt{att(1, "A", 3, true)}, "", `mlflow:"A"[]`, 0},
		{"reused: two jobs", []spool.Attempt{att(1, "A", 3, true), att(2, "B", 3, true)}, "", `mlflow:"A"[] mlflow:"B"[]`, 0},
		{"resumed run", []spool.Attempt{att(1, "A", 3, false), att(2, "A", 3, true)}, "", `mlflow:"A"[]`, 0},
		{"offline, crashed and resumed", []spool.Attempt{att(1, "", 3, false), att(2, "", 3, false), att(3, "", 3, true)}, "",
			`mlflow:""[1 2 3]`, 0},
		{"offline, two clean jobs", []spool.Attempt{att(1, "", 3, true), att(2, "", 3, true)}, "", `mlflow:""[1] mlflow:""[2]`, 0},
		{"offline without samples", []spool.Attempt{att(1, "", 0, true), att(2, "B", 2, true)}, "", `mlflow:"B"[]`, 0},
		{"offline, then a run", []spool.Attempt{att(1, "", 3, false), att(2, "B", 2, true), att(3, "", 1, true)}, "",
			`mlflow:""[1] mlflow:"B"[] mlflow:""[3]`, 0},
		{"earlier sync's run is the attempt's", []spool.Attempt{att(1, "S", 3, true), syncAtt(2, "S")}, "", `mlflow:"S"[]`, 0},
		{"no start record: the last sync's run", []spool.Attempt{syncAtt(1, "S")}, "", `mlflow:"S"[]`, 0},
		{"no start record at all", nil, "", `mlflow:""[]`, 0},
		{"--run-id", []spool.Attempt{att(1, "", 3, true), att(2, "X", 2, true), att(3, "A", 2, true)}, "X", `mlflow:"X"[1]`, 1},
		{"--run-id, no start record", nil, "X", `mlflow:"X"[]`, 0},
	} {
		jobs, skipped := Plan(tc.attempts, []string{"mlflow"}, tc.runID)
		if got := plan(jobs); got != tc.want || len(skipped) != tc.skipped {
			t.Errorf("%s: plan %s (skipped %q), want %s (%d skipped)", tc.name, got, skipped, tc.want, tc.skipped)
		}
	}
}
