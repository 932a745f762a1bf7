package jobrun

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

// plainSink is a sink whose run is no run store.
type plainSink struct {
	run, job string // job: the job's run, where the sink writes to a run of its own
	finished int
	err      error // Finish's
}

func (s *plainSink) Name() string { return "plain" }
func (s *plainSink) Start(context.Context, tracker.StartInfo) ([]string, error) {
	return nil, nil
}
func (s *plainSink) Send(_ context.Context, smp []metrics.Sample) (int, error) { return len(smp), nil }
func (s *plainSink) Run() tracker.RunInfo                                      { return tracker.RunInfo{ID: s.run, Job: s.job} }
func (s *plainSink) Finish(context.Context, tracker.EndInfo) error {
	s.finished++
	return s.err
}

// storeSink is a sink whose run is a run store (W&B's kind): a run's tags
// in memory; its reads are counted.
type storeSink struct {
	plainSink
	tags  map[string]string
	reads int
}

func (s *storeSink) GetRun(_ context.Context, id string) (tracker.StoredRun, error) {
	s.reads++
	return tracker.StoredRun{ID: id, Tags: s.tags}, nil
}

func (s *storeSink) SetTags(_ context.Context, _ string, tags map[string]string) error {
	for k, v := range tags {
		s.tags[k] = v
	}
	return nil
}

// ownerSink is a sink whose runs bridge owns (MLflow's kind), that knows
// whether its tracker answered.
type ownerSink struct {
	storeSink
	end     time.Time
	status  string
	reached bool
}

func (s *ownerSink) GetRun(ctx context.Context, id string) (tracker.StoredRun, error) {
	r, err := s.storeSink.GetRun(ctx, id)
	r.End, r.Status = s.end, s.status
	return r, err
}
func (s *ownerSink) History(context.Context, string, string) ([]tracker.Point, error) {
	return nil, nil
}
func (s *ownerSink) SetStatus(_ context.Context, _, status string, end time.Time) error {
	s.status, s.end = status, end
	return nil
}
func (s *ownerSink) PutArtifact(context.Context, tracker.StoredRun, string, string, []byte) error {
	return errors.New("no artifacts here")
}
func (s *ownerSink) Reached() bool { return s.reached }

// What Wrap wraps follows what the sink's run offers: a sink whose run is
// no store is left as it is; a store gets a job's end, and a run bridge
// owns also the end its bridge recorded. The wrapper says what the sink
// says of its tracker's answers, and a sink that cannot tell is reached.
func TestWrap(t *testing.T) {
	node := NodeOf(&tracker.Job{Node: "n1", Nodes: 2})
	plain := &plainSink{run: "r"}
	store := &storeSink{plainSink: plainSink{run: "r"}, tags: map[string]string{}}
	owner := &ownerSink{storeSink: storeSink{plainSink: plainSink{run: "r"}, tags: map[string]string{}}}
	for _, tc := range []struct {
		name    string
		s       tracker.Sink
		node    *Node
		wrapped bool
	}{
		{"no store", plain, node, false},
		{"a store, a single run", store, nil, false},
		{"a store, a job's run", store, node, true},
		{"an owner, a single run", owner, nil, true},
		{"an owner, a job's run", owner, node, true},
	} {
		if _, ok := Wrap(tc.s, tc.node, quiet(t)).(*Sink); ok != tc.wrapped {
			t.Errorf("%s: wrapped %v, want %v", tc.name, ok, tc.wrapped)
		}
	}
	if r := Wrap(owner, nil, quiet(t)).(tracker.Reacher); r.Reached() {
		t.Error("the wrapper says reached where the sink says not")
	}
	if r := Wrap(store, node, quiet(t)).(tracker.Reacher); !r.Reached() {
		t.Error("the wrapper of a sink that cannot tell says not reached")
	}
}

// The job's end is decided once this node's end is recorded: not after
// the sink's Finish failed, nor for an end that keeps the run's status; a
// single run's end is the sink's alone.
func TestFinishDecidesTheJobAfterTheNode(t *testing.T) {
	end := tracker.EndInfo{ExitCode: 1, Time: time.Now()}
	for _, tc := range []struct {
		name  string
		node  *Node
		err   error
		keep  bool
		reads int // the job's end reads the run
	}{
		{"a node's end", NodeOf(&tracker.Job{Node: "n1"}), nil, false, 1},
		{"the node's end failed", NodeOf(&tracker.Job{Node: "n1"}), errors.New("outage"), false, 0},
		{"status kept", NodeOf(&tracker.Job{Node: "n1"}), nil, true, 0},
		{"a single run", nil, nil, false, 0},
	} {
		s := &ownerSink{storeSink: storeSink{plainSink: plainSink{run: "r", err: tc.err}, tags: map[string]string{}}}
		e := end
		e.KeepStatus = tc.keep
		err := Wrap(s, tc.node, quiet(t)).Finish(context.Background(), e)
		if !errors.Is(err, tc.err) || s.finished != 1 || s.reads != tc.reads {
			t.Errorf("%s: Finish %v, the sink's Finish %d times, %d reads of the run; want %v, once, %d", tc.name, err, s.finished, s.reads, tc.err, tc.reads)
		}
	}
}

// The end a bridge recorded: a single run's from its exit code tag and the
// run's end, not one ended before the attempt started; a job's node's from
// the tags under its scope, not an earlier attempt's.
func TestRecordedEnd(t *testing.T) {
	since := time.UnixMilli(1_000_000)
	after, before := since.Add(time.Second), since.Add(-time.Second)
	single := &ownerSink{storeSink: storeSink{plainSink: plainSink{run: "r"}, tags: map[string]string{"bridge.exit_code": "3"}}, end: after, status: tracker.StatusFailed}
	if end, ok, err := RecordedEnd(context.Background(), Wrap(single, nil, quiet(t)), since); err != nil || !ok || end.ExitCode != 3 || end.Status != tracker.StatusFailed || !end.Time.Equal(after) {
		t.Errorf("single run: %+v %v %v", end, ok, err)
	}
	single.end = before
	if _, ok, err := RecordedEnd(context.Background(), Wrap(single, nil, quiet(t)), since); err != nil || ok {
		t.Errorf("single run ended before the attempt: found %v, %v", ok, err)
	}
	job := &ownerSink{storeSink: storeSink{plainSink: plainSink{run: "r"}, tags: map[string]string{
		"bridge.node.n1.exit_code": "0", "bridge.node.n1.status": tracker.StatusFinished, "bridge.node.n1.ended": "1001000",
		"bridge.node.n2.exit_code": "1", "bridge.node.n2.ended": "999000"}}}
	if end, ok, err := RecordedEnd(context.Background(), Wrap(job, NodeOf(&tracker.Job{Node: "n1"}), quiet(t)), since); err != nil || !ok || end.Status != tracker.StatusFinished {
		t.Errorf("n1's end: %+v %v %v", end, ok, err)
	}
	if _, ok, err := RecordedEnd(context.Background(), Wrap(job, NodeOf(&tracker.Job{Node: "n2"}), quiet(t)), since); err != nil || ok {
		t.Errorf("n2's end before the attempt: found %v, %v", ok, err)
	}
	if _, ok, err := RecordedEnd(context.Background(), &plainSink{run: "r"}, since); err != nil || ok {
		t.Errorf("a sink with no store: found %v, %v", ok, err)
	}
	// A job's node with a run of its own: its end there, the lead's
	// unscoped, a task's under its scope.
	own := &ownerSink{storeSink: storeSink{plainSink: plainSink{run: "own", job: "jobrun"}, tags: map[string]string{
		"bridge.exit_code": "3", "bridge.status": tracker.StatusFailed, "bridge.ended": "1002000",
		"bridge.task.task-1.exit_code": "0", "bridge.task.task-1.status": tracker.StatusFinished, "bridge.task.task-1.ended": "1003000"}}}
	if end, ok, err := RecordedEnd(context.Background(), Wrap(own, NodeOf(&tracker.Job{Node: "n1"}), quiet(t)), since); err != nil || !ok || end.ExitCode != 3 || end.Status != tracker.StatusFailed {
		t.Errorf("the lead's end on its run: %+v %v %v", end, ok, err)
	}
	if end, ok, err := RecordedEnd(context.Background(), Wrap(own, NodeOf(&tracker.Job{Node: "n1", Task: "task-1"}), quiet(t)), since); err != nil || !ok || end.ExitCode != 0 || !end.Time.Equal(time.UnixMilli(1003000)) {
		t.Errorf("the task's end on its node's run: %+v %v %v", end, ok, err)
	}
}

// The status the nodes' records call for: the worst failure at once,
// FINISHED only when every node the launcher started ended so (its state
// line, or its tags before the state lines), none without a count; a
// task's end does not count as a node's.
func TestStatus(t *testing.T) {
	clean := "status=FINISHED exit=0 ended=1000"
	for _, tc := range []struct {
		name  string
		tags  map[string]string
		nodes int
		want  string
	}{
		{"none ended", map[string]string{}, 2, ""},
		{"one of two clean", map[string]string{"bridge.state.a": clean, "bridge.state.b": "status=RUNNING"}, 2, ""},
		{"both clean", map[string]string{"bridge.state.a": clean, "bridge.state.b": clean}, 2, "FINISHED"},
		{"a node and a task clean", map[string]string{"bridge.state.a": clean, "bridge.state.a/task-1": clean}, 2, ""},
		{"both clean, one before the state lines", map[string]string{"bridge.state.a": clean,
			"bridge.node.b.status": "FINISHED", "bridge.node.b.ended": "1000"}, 2, "FINISHED"},
		{"clean, count unknown", map[string]string{"bridge.state.a": clean}, 0, ""},
		{"killed and failed", map[string]string{"bridge.failed.a": "KILLED: exit 143", "bridge.failed.b": "FAILED: exit 1"}, 2, "FAILED"},
		{"a failure, count unknown", map[string]string{"bridge.failed.a": "KILLED: exit 143"}, 0, "KILLED"},
	} {
		if got := Status(tc.tags, tc.nodes); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The report is written again only by a node that changes what the run
// says, by the last to end (its read shows every node ended), or where a
// report claim outlived its writer.
func TestAllEndedAndStaleClaim(t *testing.T) {
	run := func(nodes string, lines ...string) tracker.StoredRun {
		tags := map[string]string{tracker.TagNodes: nodes}
		for i, l := range lines {
			tags[tracker.StateTag(fmt.Sprintf("n%d", i), "")] = l
		}
		return tracker.StoredRun{Tags: tags}
	}
	ended := "status=KILLED ended=1000"
	for _, tc := range []struct {
		name string
		run  tracker.StoredRun
		want bool
	}{
		{"every node ended", run("2", ended, ended), true},
		{"one still running", run("2", ended, "status=RUNNING"), false},
		{"one never recorded", run("3", ended, ended), false},
		{"count unknown, every line ended", run("", ended), true},
		{"nothing recorded", run(""), false},
	} {
		if got := allEnded(tc.run, 0); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	now := time.Now()
	claim := func(until time.Time) string {
		ctx, cancel := context.WithDeadline(context.Background(), until)
		defer cancel()
		return reportClaim(ctx, "n1", now.Add(-time.Minute))
	}
	if !staleClaim(claim(now.Add(-time.Second)), now) || staleClaim(claim(now.Add(time.Minute)), now) || staleClaim("artifacts x, written by n1", now) {
		t.Error("a claim is stale only once its until passed")
	}
}
