package pipeline

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/advice"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

// energy is a collector of the node's CPU energy: 100 J, always.
type energy struct{}

func (energy) Name() string { return "energy" }
func (energy) Collect(_ context.Context, b *metrics.Batch) error {
	b.Add(metrics.NodeCPUEnergy, 100, "test")
	return nil
}

// stepRun is a sink whose run bridge owns and has a note, whose training
// script reached step 10; it counts its reads and keeps its tags and
// note.
type stepRun struct {
	fakeSink
	mu      sync.Mutex
	reads   int
	tags    map[string]string
	note    string
	endTags map[string]string
}

func (s *stepRun) GetRun(_ context.Context, id string) (tracker.StoredRun, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return tracker.StoredRun{ID: id, Status: "RUNNING", Step: 10, Note: s.note, Tags: map[string]string{}}, nil
}
func (s *stepRun) SetTags(_ context.Context, _ string, tags map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range tags {
		s.tags[k] = v
	}
	return nil
}
func (s *stepRun) SetNote(_ context.Context, _, note string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.note = note
	return nil
}
func (s *stepRun) History(context.Context, string, string) ([]tracker.Point, error) { return nil, nil }
func (s *stepRun) SetStatus(context.Context, string, string, time.Time) error       { return nil }
func (s *stepRun) SetOnce(_ context.Context, _, _, v string) (string, error)        { return v, nil }
func (s *stepRun) PutArtifact(context.Context, tracker.StoredRun, string, string, []byte) error {
	return nil
}
func (s *stepRun) Finish(ctx context.Context, end tracker.EndInfo) error {
	s.mu.Lock()
	s.endTags = end.Tags
	s.mu.Unlock()
	return s.fakeSink.Finish(ctx, end)
}

// The run's tick: every --run-tick one read of the run, whose step and
// this node's energy give the job's energy per step, which the samples
// then carry (in the spool); the note at its every fifth tick. At the end
// the advice and the cost are end tags, the energy per step a tag of its
// own, the note written, and the table has a row of each. None of it
// waits for a tick at a given time: the test polls.
func TestRunTick(t *testing.T) {
	st := &stepRun{fakeSink: fakeSink{t: t, name: "fake", runID: "r1"}, tags: map[string]string{}}
	set := settings(t)
	set.RunTick, set.PricePerNodeHour = 20*time.Millisecond, 3600
	s := open(t, set, []metrics.Collector{energy{}}, nil, jobrun.Wrap(st, nil, quiet()))
	s.Run()
	carried := func() bool {
		smp, _, _, _ := spooltest.ReadFile(set.Spool)
		return slices.ContainsFunc(smp, func(m metrics.Sample) bool {
			v, ok := m.Value(JobEnergyPerStep.Name)
			return ok && v == 10
		})
	}
	waitfor.Cond(t, deadline, "a sample with the job's energy per step, 100 J over 10 steps", carried)
	waitfor.Cond(t, deadline, "the note of the fifth tick", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return strings.Contains(st.note, "100 J over 10 steps")
	})
	s.Finish(tracker.EndInfo{ExitCode: 0, Time: time.Now()})
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.endTags[advice.TagCost] == "" || !strings.Contains(st.endTags[advice.TagCostBasis], "at 3600 a node-hour") {
		t.Errorf("end tags %v: no cost", st.endTags)
	}
	if st.tags[jobrun.TagEnergyPerStep] != "10" || st.tags[jobrun.TagSteps] != "10" {
		t.Errorf("tags %v: want the energy per step, 10 J over 10 steps", st.tags)
	}
	if strings.Count(st.note, "bridge: begin") != 1 {
		t.Errorf("note:\n%s", st.note)
	}
	r := report(s)
	for _, want := range []string{"energy per step  10 J over 10 steps", "cost             " + st.endTags[advice.TagCost] + " (", " at 3600 a node-hour)"} {
		if !strings.Contains(r, want) {
			t.Errorf("the table has no %q:\n%s", want, r)
		}
	}
	if n, _ := strconv.ParseFloat(st.endTags[advice.TagCost], 64); n <= 0 {
		t.Errorf("cost %q", st.endTags[advice.TagCost])
	}
}

// Without a sink whose run ticks, or with the tick off, no tick runs and
// no sample carries an energy per step.
func TestNoTickWithoutRunStore(t *testing.T) {
	set := settings(t)
	set.RunTick = 20 * time.Millisecond
	s := open(t, set, []metrics.Collector{energy{}}, nil, &fakeSink{t: t, name: "fake", runID: "r1"})
	if s.tickCancel != nil {
		t.Error("a tick started with no run store")
	}
	s.Run()
	s.Finish(tracker.EndInfo{Time: time.Now()})
	smp, _, _, _ := spooltest.ReadFile(set.Spool)
	if len(smp) == 0 || slices.ContainsFunc(smp, func(m metrics.Sample) bool { _, ok := m.Value(JobEnergyPerStep.Name); return ok }) {
		t.Errorf("%d samples, one with an energy per step", len(smp))
	}
}
