package pipeline

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/whyslow"
)

// idleJob is a collector of a container that uses almost none of its 4
// cores.
type idleJob struct{}

func (idleJob) Name() string { return "idle" }

func (idleJob) Collect(_ context.Context, b *metrics.Batch) error {
	b.Add(metrics.ContainerCPULimit, 4, "test")
	b.Add(metrics.ContainerCPUUsage, 0.01, "test")
	return nil
}

// endSink is a fakeSink that keeps the end it was given.
type endSink struct {
	fakeSink
	mu  sync.Mutex
	end tracker.EndInfo
}

func (e *endSink) Finish(ctx context.Context, end tracker.EndInfo) error {
	e.mu.Lock()
	e.end = end
	e.mu.Unlock()
	return e.fakeSink.Finish(ctx, end)
}

// The session gives every sample to the bottleneck verdict: a sample that
// closes a window carries each cause's share, in the spool and at the
// sink, among its points in name order; the end has the verdict's tag and
// the table its row.
func TestSessionBottleneck(t *testing.T) {
	sink := &endSink{fakeSink: fakeSink{t: t, name: "fake", runID: "r1"}}
	set := settings(t)
	set.AnalysisWindow = 20 * time.Millisecond
	s := open(t, set, []metrics.Collector{idleJob{}}, nil, sink)
	s.Run()
	waitfor.Cond(t, deadline, "three verdicts", func() bool {
		smp, _, _, err := spooltest.ReadFile(set.Spool)
		n := 0
		for _, x := range smp {
			if _, ok := x.Value("node_bottleneck_idle_ratio"); ok {
				n++
			}
		}
		return err == nil && n >= 3
	})
	s.Stop(nil)
	s.Finish(tracker.EndInfo{Time: time.Now()})

	smp, _, _, err := spooltest.ReadFile(set.Spool)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range smp {
		names := make([]string, len(x.Points))
		for i, p := range x.Points {
			names[i] = p.Name()
		}
		if !slices.IsSorted(names) {
			t.Errorf("sample %d's points are not in name order: %v", x.Seq, names)
		}
		if v, ok := x.Value("node_bottleneck_idle_ratio"); ok && v != 1 {
			t.Errorf("sample %d: idle share %v, want 1", x.Seq, v)
		}
		if v, ok := x.Value("node_bottleneck_gpu_compute_ratio"); ok && v != 0 {
			t.Errorf("sample %d: gpu_compute share %v, want 0", x.Seq, v)
		}
	}
	sink.mu.Lock()
	tag := sink.end.Tags[whyslow.Tag]
	sink.mu.Unlock()
	if !strings.HasPrefix(tag, "idle: the job used 0.01 of the 4.0 cores allowed: it waits on something outside this node; the cause for 100% of ") {
		t.Errorf("%s = %q, want the idle verdict", whyslow.Tag, tag)
	}
	if r := report(s); !strings.Contains(r, "bottleneck  ") || !strings.Contains(r, "idle: the job used 0.01 of the 4.0 cores allowed") ||
		!strings.Contains(r, "; idle 100%") {
		t.Errorf("report:\n%s\nwant the bottleneck row", r)
	}
}
