package jobrun

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bridge-dev/bridge/advice"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
)

// notedSink is a run store whose runs have notes (W&B's kind), with the
// largest step and latest values its reads give; its note writes are
// counted.
type notedSink struct {
	storeSink
	note   string
	step   int64
	latest map[string]float64
	writes int
	err    error // GetRun's
}

func (s *notedSink) GetRun(ctx context.Context, id string) (tracker.StoredRun, error) {
	if s.err != nil {
		return tracker.StoredRun{}, s.err
	}
	r, _ := s.storeSink.GetRun(ctx, id)
	r.Note, r.Step, r.Latest = s.note, s.step, s.latest
	return r, nil
}

func (s *notedSink) SetNote(_ context.Context, _, note string) error {
	s.note = note
	s.writes++
	return nil
}

// The note's rule: an empty note becomes bridge's section; bridge's own
// section is replaced where it is, what a person wrote around it kept;
// a person's note gets the section appended once; a person's note that
// leaves no room is left alone.
func TestWithSection(t *testing.T) {
	sec := func(s string) string { return noteBegin + "\n" + s + "\n" + noteEnd }
	for _, c := range []struct{ name, note, want string }{
		{"empty", "", sec("A")},
		{"blank", " \n", sec("A")},
		{"a person's", "my notes\n", "my notes\n\n" + sec("A")},
		{"ours", sec("old"), sec("A")},
		{"ours among a person's", "before\n\n" + sec("old") + "\nafter", "before\n\n" + sec("A") + "\nafter"},
		{"ours, its end mark deleted", "before\n" + noteBegin + "\nold", "before\n" + sec("A")},
	} {
		got, fits := withSection(c.note, "A")
		if got != c.want || !fits {
			t.Errorf("%s: %q (fits %v), want %q", c.name, got, fits, c.want)
		}
		if again, _ := withSection(got, "A"); again != got {
			t.Errorf("%s: a second write changed the note: %q", c.name, again)
		}
	}
	if _, fits := withSection(strings.Repeat("é", NoteMax-10), "A"); fits {
		t.Error("a note past NoteMax fits")
	}
}

// One tick on a single run: one read; the job's energy per step from the
// run's step and this node's live energy; no note on a tick without Note.
// With Note, bridge's section appended to a person's note once, escaped,
// and on the next note tick replaced, the person's text kept. A run not
// created yet is no error.
func TestTickSingleRun(t *testing.T) {
	st := &notedSink{storeSink: storeSink{plainSink: plainSink{run: "r"}, tags: map[string]string{}}, note: "a person's *note*", step: 100}
	s := Wrap(st, nil, nil).(*Sink)
	if !s.TicksLive() {
		t.Fatal("a single run's sink does not tick")
	}
	live := Live{Tags: map[string]string{summary.TagEnergyNodeCPU: "150.0", summary.TagEnergyGPUs: "50.0",
		"bridge.peak_working_set_megabytes": "1000", advice.TagSuggestedMemory: "1150", advice.TagUnused: "used 0.4 of 8 cores at most: 95% of the CPU limit was never used",
		"bridge.bottleneck": "input: the 6 data_loading workers"}, Shares: "input 61%, idle 39%"}
	p, err := s.Tick(context.Background(), "r", live)
	if err != nil || p.Steps != 100 || p.EnergyPerStepJoules != 2 || st.reads != 1 || st.writes != 0 {
		t.Fatalf("tick: %+v %v, %d reads %d note writes; want 200 J over 100 steps, one read, no note", p, err, st.reads, st.writes)
	}
	live.Note = true
	if _, err := s.Tick(context.Background(), "r", live); err != nil || st.writes != 1 {
		t.Fatalf("note tick: %v, %d writes", err, st.writes)
	}
	if !strings.HasPrefix(st.note, "a person's *note*\n\n"+noteBegin) || strings.Count(st.note, noteBegin) != 1 {
		t.Errorf("note:\n%s", st.note)
	}
	for _, want := range []string{"**Memory:**", "next run: a limit of 1150 MB", `input: the 6 data\_loading workers; shares: input 61%, idle 39%`,
		"95% of the CPU limit was never used", "200 J over 100 steps, 2 J a step"} {
		if !strings.Contains(st.note, want) {
			t.Errorf("the note has no %q:\n%s", want, st.note)
		}
	}
	// Nothing new: nothing written.
	if _, err := s.Tick(context.Background(), "r", live); err != nil || st.writes != 1 {
		t.Errorf("a note tick with nothing new: %v, %d writes", err, st.writes)
	}
	st.note = "edited by a person\n\n" + st.note
	live.Tags[summary.TagEnergyNodeCPU] = "350.0"
	if _, err := s.Tick(context.Background(), "r", live); err != nil || st.writes != 2 ||
		!strings.HasPrefix(st.note, "edited by a person\n\na person's *note*\n\n"+noteBegin) || strings.Count(st.note, noteBegin) != 1 ||
		!strings.Contains(st.note, "400 J over 100 steps, 4 J a step") {
		t.Errorf("second note tick: %v, %d writes:\n%s", err, st.writes, st.note)
	}
	st.err = tracker.ErrNotReady
	if p, err := s.Tick(context.Background(), "r", live); err != nil || p.Steps != 0 {
		t.Errorf("a run not created yet: %+v %v", p, err)
	}
	st.err = errors.New("503")
	if _, err := s.Tick(context.Background(), "r", live); err == nil {
		t.Error("a failed read is no error")
	}
}

// At the end, on a run bridge owns: the job's energy per step as tags,
// and the note. A run without steps gets no such tag.
func TestTickEnd(t *testing.T) {
	o := &ownerSink{storeSink: storeSink{plainSink: plainSink{run: "r"}, tags: map[string]string{}}}
	s := Wrap(o, nil, nil).(*Sink)
	live := Live{Tags: map[string]string{summary.TagEnergyNodeCPU: "150.0"}, End: true}
	if _, err := s.Tick(context.Background(), "r", live); err != nil || o.tags[TagEnergyPerStep] != "" {
		t.Errorf("no steps: %v, tags %v", err, o.tags)
	}
	st := &stepOwner{ownerSink: o}
	s = Wrap(st, nil, nil).(*Sink)
	if _, err := s.Tick(context.Background(), "r", live); err != nil || o.tags[TagEnergyPerStep] != "1.5" || o.tags[TagSteps] != "100" {
		t.Errorf("end: %v, tags %v", err, o.tags)
	}
	if !strings.Contains(o.tags["mlflow-note"], noteBegin) {
		t.Errorf("no note at the end: %v", o.tags)
	}
}

// stepOwner is an owner whose run has 100 steps and a note in a tag.
type stepOwner struct{ *ownerSink }

func (s *stepOwner) GetRun(ctx context.Context, id string) (tracker.StoredRun, error) {
	r, err := s.ownerSink.GetRun(ctx, id)
	r.Step, r.Note = 100, s.tags["mlflow-note"]
	return r, err
}

func (s *stepOwner) SetNote(ctx context.Context, id, note string) error {
	return s.SetTags(ctx, id, map[string]string{"mlflow-note": note})
}

// A multi-node job on a run every node shares (W&B's): only the first
// node's lead reads it during the run (another node's lead ticks, and
// reads nothing), a further bridge of a node never ticks; every node's
// energy is the job's (this node's live, the others' latest series), and
// the note is the job's, with a row a node.
func TestTickJob(t *testing.T) {
	other := &notedSink{storeSink: storeSink{plainSink: plainSink{run: "r"}}}
	if s := Wrap(other, NodeOf(&tracker.Job{Node: "node-1", Rank: 1}), nil).(*Sink); !s.TicksLive() {
		t.Error("node 1's lead does not tick")
	} else if _, err := s.Tick(context.Background(), "r", Live{Note: true}); err != nil || other.reads != 0 || other.writes != 0 {
		t.Errorf("node 1's tick on a shared run: %v, %d reads, %d notes; want nothing done", err, other.reads, other.writes)
	}
	st := &notedSink{storeSink: storeSink{plainSink: plainSink{run: "r"}, tags: map[string]string{
		tracker.TagJobKey: "k", "bridge.node.node-0.started": "1", "bridge.node.node-1.started": "1",
		"bridge.node.node-1.bottleneck": "gpu_compute: busy"}},
		step: 10, latest: map[string]float64{"system/node-1/node_cpu_energy_joules": 30, "system/node-1/gpu_0_energy_joules": 20}}
	s := Wrap(st, NodeOf(&tracker.Job{Node: "node-0", Rank: 0}), nil).(*Sink)
	if !s.TicksLive() {
		t.Fatal("node 0's lead does not tick")
	}
	p, err := s.Tick(context.Background(), "r", Live{Tags: map[string]string{summary.TagEnergyNodeCPU: "50.0"}, Note: true, Shares: "idle 100%"})
	if err != nil || p.EnergyPerStepJoules != 10 {
		t.Errorf("job tick: %+v %v; want (50 + 30 + 20) J over 10 steps", p, err)
	}
	for _, want := range []string{"| node-0 | RUNNING |", "| node-1 | RUNNING |", "gpu\\_compute: busy", "shares: idle 100%"} {
		if !strings.Contains(st.note, want) {
			t.Errorf("the job's note has no %q:\n%s", want, st.note)
		}
	}
	if task := Wrap(st, NodeOf(&tracker.Job{Node: "node-0", Rank: 0, Task: "task-1"}), nil).(*Sink); task.TicksLive() {
		t.Error("a node's further bridge ticks")
	}
	if n := utf8.RuneCountInString(st.note); n > NoteMax {
		t.Errorf("note of %d characters", n)
	}
}

// A multi-node job whose nodes write to runs of their own (MLflow's node
// runs): the tick reads the job's run, not the node's, and this node's
// live figures stand in its state line; another node's end line counts
// its energy. A line that holds this node's end is kept.
func TestTickJobOfNodeRuns(t *testing.T) {
	st := &notedSink{storeSink: storeSink{plainSink: plainSink{run: "own0", job: "job"}, tags: map[string]string{
		tracker.TagJobKey: "k", tracker.TagNodes: "2",
		tracker.StateTag("node-0", ""): "status=RUNNING attempt=0 started=1 at=1 run=own0",
		tracker.StateTag("node-1", ""): "status=FINISHED exit=0 reason=success ended=2 run=own1 gpu_j=20 cpu_j=30"}},
		step: 10}
	got := ""
	s := Wrap(&runRecorder{notedSink: st, read: &got}, NodeOf(&tracker.Job{Node: "node-0", Rank: 0, Attempt: 0}), nil).(*Sink)
	p, err := s.Tick(context.Background(), "own0", Live{Tags: map[string]string{summary.TagEnergyNodeCPU: "50.0"}, Note: true})
	if err != nil || p.EnergyPerStepJoules != 10 || got != "job" {
		t.Errorf("tick read run %q: %+v %v; want the job's run, (50 + 30 + 20) J over 10 steps", got, p, err)
	}
	for _, want := range []string{"| node-0 | RUNNING |", "| node-1 | FINISHED, exit 0"} {
		if !strings.Contains(st.note, want) {
			t.Errorf("the job's note has no %q:\n%s", want, st.note)
		}
	}
	st.tags[tracker.StateTag("node-0", "")] = "status=FAILED exit=1 reason=app_error ended=3 run=own0 cpu_j=40"
	p, err = s.Tick(context.Background(), "own0", Live{Tags: map[string]string{summary.TagEnergyNodeCPU: "50.0"}, End: true, Status: tracker.StatusFailed})
	if err != nil || p.EnergyPerStepJoules != 9 {
		t.Errorf("end tick: %+v %v; want node 0's recorded end kept: (40 + 30 + 20) J over 10 steps", p, err)
	}
}

// runRecorder records the id of the run read.
type runRecorder struct {
	*notedSink
	read *string
}

func (r *runRecorder) GetRun(ctx context.Context, id string) (tracker.StoredRun, error) {
	*r.read = id
	return r.notedSink.GetRun(ctx, id)
}

// Nodes that write to runs of their own (MLflow's): another node's lead
// writes its line on its tick, one request and no read; the first node's
// lead reads the job's run and writes its own line and which nodes differ
// now, in the report's words, with a node whose line stopped moving.
func TestTickLiveLines(t *testing.T) {
	now := time.Now()
	ms := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).UnixMilli(), 10) }
	st := &notedSink{storeSink: storeSink{plainSink: plainSink{run: "own1", job: "job"}, tags: map[string]string{
		tracker.TagJobKey: "k", tracker.TagNodes: "4",
		tracker.StateTag("node-2", ""): "status=RUNNING attempt=0 at=" + ms(0) + " run=own2 samples=10 throttled_pct=85",
		tracker.StateTag("node-3", ""): "status=RUNNING attempt=0 at=" + ms(-10*time.Minute) + " run=own3 samples=10"}}}
	figs := `{"samples":12,"cpu_mean_cores":1.5}`
	n1 := Wrap(st, NodeOf(&tracker.Job{Node: "node-1", Rank: 1, Attempt: 0}), nil).(*Sink)
	if _, err := n1.Tick(context.Background(), "own1", Live{Tags: map[string]string{report.TagFigures: figs}, At: now}); err != nil || st.reads != 0 {
		t.Fatalf("node 1's tick: %v, %d reads; want its line written, no read", err, st.reads)
	}
	l := tracker.ParseLine(st.tags[tracker.StateTag("node-1", "")])
	if l["who"] != "node-1" || !strings.HasPrefix(st.tags[tracker.StateTag("node-1", "")], "who=node-1 ") ||
		l["status"] != "RUNNING" || l["run"] != "own1" || l["samples"] != "12" || l["cpu_mean"] != "1.5" || l["at"] == "" {
		t.Errorf("node 1's line %v, want its node first, RUNNING with its run, figures and time", l)
	}
	st.plainSink = plainSink{run: "own0", job: "job"}
	n0 := Wrap(st, NodeOf(&tracker.Job{Node: "node-0", Rank: 0, Attempt: 0}), nil).(*Sink)
	if _, err := n0.Tick(context.Background(), "own0", Live{Tags: map[string]string{report.TagFigures: figs}, At: now}); err != nil || st.reads != 1 {
		t.Fatalf("node 0's tick: %v, %d reads; want one", err, st.reads)
	}
	if l := tracker.ParseLine(st.tags[tracker.StateTag("node-0", "")]); l["status"] != "RUNNING" || l["run"] != "own0" {
		t.Errorf("node 0's line %v", l)
	}
	d := st.tags[TagDiffers]
	for _, want := range []string{"node-2: CPU throttled in 85% of periods", "node-3: stopped reporting at "} {
		if !strings.Contains(d, want) {
			t.Errorf("%s = %q, want %q in it", TagDiffers, d, want)
		}
	}
	if strings.Contains(d, "node-0") || strings.Contains(d, "node-1") {
		t.Errorf("%s = %q names a node that does not differ", TagDiffers, d)
	}
}
