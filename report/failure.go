package report

import (
	"fmt"
	"strings"
	"time"
)

// A node stopped from outside (SIGTERM or SIGKILL, exit 143 or 137) within
// ConsequenceWindow after the first failure is taken as its consequence:
// the launcher stopping the job's other nodes (Slurm, torchrun, a JobSet's
// failure policy). Node clocks are assumed NTP-close, not equal: a stop
// that ends up to ClockSlack before a failure is ordered after it.
const (
	ConsequenceWindow = 5 * time.Minute
	ClockSlack        = time.Second
)

// Failure is a job's first failure: the earliest node whose child did not
// end cleanly, by its end time.
type Failure struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
	Time   string `json:"time"` // RFC 3339, UTC, milliseconds
	Detail string `json:"detail"`
	at     time.Time
}

// timeLayout is how the report writes times: UTC, to the millisecond.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// Tag is the value of TagFirstFailure: "<node>: <reason> at <time> (<why>)".
func (f *Failure) Tag() string {
	why := f.Detail
	if why == "" {
		why = "no detail recorded"
	}
	return fmt.Sprintf("%s: %s at %s (%s)", f.Node, f.Reason, f.Time, why)
}

// parseFailureTag reads a TagFirstFailure value back (a node id and a
// reason hold no space).
func parseFailureTag(v string) (*Failure, bool) {
	node, rest, ok := strings.Cut(v, ": ")
	if !ok {
		return nil, false
	}
	reason, rest, ok := strings.Cut(rest, " at ")
	if !ok {
		return nil, false
	}
	ts, detail, _ := strings.Cut(rest, " (")
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return nil, false
	}
	return &Failure{Node: node, Reason: reason, Time: at.UTC().Format(timeLayout), Detail: strings.TrimSuffix(detail, ")"), at: at}, true
}

// tagFailed prefixes a node's (or task's) record of a failed attempt,
// bridge.failed.<who>, which a later attempt never clears.
const tagFailed = "bridge.failed."

// setFirstFailure sets the report's first failure: the earliest failed end
// the nodes' records show, or the run's TagFirstFailure where it is
// earlier and agrees with them (recordedFailure). A tag that does not
// agree is not shown as the first failure: FailureTagDisagrees says why.
func (r *Report) setFirstFailure(run Run, ends []nodeEnd) {
	r.FirstFailure = firstFailure(ends)
	tag := run.Tags[TagFirstFailure]
	if tag == "" {
		return
	}
	rec, why := recordedFailure(run, ends, tag)
	if why != "" {
		r.FailureTagDisagrees = why
		return
	}
	if r.FirstFailure == nil || rec.at.Before(r.FirstFailure.at) {
		r.FirstFailure = rec
	}
}

// RecordedFailureOf is the failure the run's TagFirstFailure names, where
// it agrees with the nodes' records (recordedFailure); nil otherwise.
func RecordedFailureOf(run Run) *Failure {
	f, why := recordedFailure(run, endsOf(run, nodesOf(run)), run.Tags[TagFirstFailure])
	if why != "" {
		return nil
	}
	return f
}

// recordedFailure reads tag (a TagFirstFailure value) and checks it
// against the records: it must name a node or a node's task whose end
// failed, or that recorded a failed attempt (bridge.failed.<who>: a failure
// whose records a later attempt replaced). why says how it disagrees; ""
// when it agrees.
func recordedFailure(run Run, ends []nodeEnd, tag string) (f *Failure, why string) {
	f, ok := parseFailureTag(tag)
	if !ok {
		return nil, fmt.Sprintf("%s is not a failure as bridge records it (<node>: <reason> at <time> (<why>))", TagFirstFailure)
	}
	for _, e := range ends {
		if e.who != f.Node {
			continue
		}
		if failedStatus(e.rec.status) || run.Tags[tagFailed+e.who] != "" {
			return f, ""
		}
		status := e.rec.status
		if status == "" {
			status = statusRunning
		}
		return nil, fmt.Sprintf("%s names %s, which recorded no failure (its status is %s)", TagFirstFailure, f.Node, status)
	}
	return nil, fmt.Sprintf("%s names %s, and no node of the run is %s", TagFirstFailure, f.Node, f.Node)
}

// nodeEnd is one node's recorded end.
type nodeEnd struct {
	who  string
	task bool // a further bridge of a node (<node>.<task>)
	rec  record
}

// failed reports an end that failed, at a known time.
func failed(r record) bool { return !r.ended.IsZero() && failedStatus(r.status) }

// failedStatus reports a row's status that is a failure: not running,
// finished, or missing.
func failedStatus(s string) bool {
	return s != "" && s != statusFinished && s != statusRunning && s != StatusMissing
}

// stopped reports an end that came from outside the job: a SIGTERM or
// SIGKILL, or the exit codes a wrapper gives for them, that the OOM killer
// did not send.
func stopped(r record) bool {
	if oomKilled(r.reason) {
		return false
	}
	if r.signal == "SIGTERM" || r.signal == "SIGKILL" {
		return true
	}
	return r.exitCode != nil && (*r.exitCode == 143 || *r.exitCode == 137)
}

// firstFailure picks the job's first failure from its nodes' ends: the
// earliest failed end, a stop counted ClockSlack later (so that a stop
// that a skewed clock puts just before the failure that caused it does
// not take its place); ties go to the smaller node id. nil when no node
// failed.
func firstFailure(ends []nodeEnd) *Failure {
	var best *nodeEnd
	var bestKey time.Time
	for i := range ends {
		e := &ends[i]
		if !failed(e.rec) {
			continue
		}
		key := e.rec.ended
		if stopped(e.rec) {
			key = key.Add(ClockSlack)
		}
		if best == nil || key.Before(bestKey) || (key.Equal(bestKey) && e.who < best.who) {
			best, bestKey = e, key
		}
	}
	if best == nil {
		return nil
	}
	reason := best.rec.reason
	if reason == "" {
		reason = strings.ToLower(best.rec.status)
	}
	detail := best.rec.detail
	if detail == "" && best.rec.exitCode != nil {
		detail = fmt.Sprintf("exit code %d", *best.rec.exitCode)
	}
	return &Failure{Node: best.who, Reason: reason, Time: best.rec.ended.Format(timeLayout), Detail: detail, at: best.rec.ended}
}

// consequence says how r's end follows the first failure f, or "" when it
// is not its consequence.
func consequence(f *Failure, who string, r record) string {
	if f == nil || who == f.Node || !failed(r) || !stopped(r) {
		return ""
	}
	d := r.ended.Sub(f.at)
	if d < -ClockSlack || d > ConsequenceWindow {
		return ""
	}
	return fmt.Sprintf("stopped %s after %s's failure", seconds(max(d, 0)), f.Node)
}

func seconds(d time.Duration) string {
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// At is when the failure happened, by its node's clock.
func (f *Failure) At() time.Time { return f.at }
