package forensics

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/spool"
)

// attempt is one run of bridge on a spool file, written with the real spool.
type attempt struct {
	start   time.Duration // after t0
	pid     int
	sync    bool
	samples []metrics.Sample
	clean   bool // write an end record
}

// writeSpool writes the attempts one after the other, reopening the file
// for each as a restarted bridge would, then opens it once more for the
// current attempt at `now` and returns what it reads.
func writeSpool(t *testing.T, attempts []attempt, now time.Duration) []spool.Attempt {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bridge-spool-run1.jsonl")
	start := func(sp *spool.Spool, at time.Duration, pid int, sync bool) {
		info := map[string]string{"bridge.cgroup.version": "v1"}
		if sync {
			info = map[string]string{"mode": "sync"}
		}
		if err := sp.WriteStart(spool.Record{Time: t0.Add(at).UnixMilli(), PID: pid, Runs: map[string]string{"mlflow": "run1"}, Info: info}); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range attempts {
		sp, err := spooltest.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		start(sp, a.start, a.pid, a.sync)
		for _, s := range a.samples {
			if err := sp.Append(s); err != nil {
				t.Fatal(err)
			}
		}
		if a.clean {
			code := 0
			if err := sp.WriteEnd(spool.Record{Time: t0.Add(a.start + time.Minute).UnixMilli(), ExitCode: &code}); err != nil {
				t.Fatal(err)
			}
		}
		// No end record: as if bridge was SIGKILLed with its container.
		if err := sp.Close(); err != nil {
			t.Fatal(err)
		}
	}
	sp, err := spooltest.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	start(sp, now, 999, false)
	return sp.Attempts()
}

func oomingSamples(from int64, at time.Duration) []metrics.Sample {
	return []metrics.Sample{
		sample(from, at, "container_memory_working_set_megabytes", 150.0, "container_memory_limit_megabytes", 209.7,
			"container_memory_working_set_percentage", 71.5, "container_memory_oom_kill_events_count", 0.0),
		sample(from+1, at+time.Second, "container_memory_working_set_megabytes", 208.9, "container_memory_limit_megabytes", 209.7,
			"container_memory_working_set_percentage", 99.6, "container_memory_oom_kill_events_count", 0.0,
			"node_memory_available_megabytes", 20000.0, "gpu_0_utilization_percentage", 97.0),
	}
}

func TestLostBeforeCurrentAttempt(t *testing.T) {
	t.Run("lost with samples", func(t *testing.T) {
		atts := writeSpool(t, []attempt{
			{start: 0, pid: 101, samples: oomingSamples(0, 10*time.Second), clean: true},
			{start: time.Minute, pid: 102, samples: oomingSamples(2, time.Minute+10*time.Second)},
		}, time.Minute+13*time.Second)
		l, ok := previousAttemptLost(atts)
		if !ok {
			t.Fatalf("no lost attempt in %+v", atts)
		}
		if l.Attempt != 2 || l.PID != 102 || !l.Start.Equal(t0.Add(time.Minute)) || !l.HasSample || l.Last.Seq != 3 ||
			!l.Next.Equal(t0.Add(time.Minute+13*time.Second)) {
			t.Errorf("Lost = %+v", l)
		}
		t.Log(l.Sentence)
		for _, want := range []string{"working set 99.6% of limit (208.9 of 209.7 MB)", "2.0 s before the next attempt started",
			"attempt 2 (bridge pid 102, started 2026-10-01T12:01:00Z) stopped without a clean shutdown", "(its last sample, seq 3: oom_kill counter 0, node MemAvailable 20000 MB)"} {
			if !strings.Contains(l.Sentence, want) {
				t.Errorf("sentence lacks %q:\n%s", want, l.Sentence)
			}
		}
		tags := l.Tags()
		if tags[TagPreviousAttemptLost] != l.Sentence {
			t.Errorf("%s = %q", TagPreviousAttemptLost, tags[TagPreviousAttemptLost])
		}
		var last struct {
			Attempt int                `json:"attempt"`
			Seq     int64              `json:"seq"`
			Time    string             `json:"time"`
			Before  string             `json:"before_next_attempt"`
			Metrics map[string]float64 `json:"metrics"`
		}
		if err := json.Unmarshal([]byte(tags[TagPreviousAttemptLastSample]), &last); err != nil {
			t.Fatalf("%s is not JSON: %v: %s", TagPreviousAttemptLastSample, err, tags[TagPreviousAttemptLastSample])
		}
		if last.Attempt != 2 || last.Seq != 3 || last.Time != "2026-10-01T12:01:11Z" || last.Before != "2.0 s" ||
			last.Metrics["container_memory_working_set_percentage"] != 99.6 || last.Metrics["node_memory_available_megabytes"] != 20000 {
			t.Errorf("last sample tag = %+v", last)
		}
		if _, ok := last.Metrics["gpu_0_utilization_percentage"]; ok {
			t.Error("the last-sample tag carries non-memory metrics")
		}
		if r := l.Rows(); len(r) != 1 || r[0].Value != l.Sentence {
			t.Errorf("Rows = %+v", r)
		}
	})
	t.Run("previous ended cleanly", func(t *testing.T) {
		atts := writeSpool(t, []attempt{{start: 0, pid: 101, samples: oomingSamples(0, time.Second), clean: true}}, time.Minute)
		if l, ok := previousAttemptLost(atts); ok {
			t.Errorf("lost %+v", l)
		}
	})
	t.Run("an older lost attempt was reported already", func(t *testing.T) {
		atts := writeSpool(t, []attempt{
			{start: 0, pid: 101, samples: oomingSamples(0, time.Second)},
			{start: time.Minute, pid: 102, samples: oomingSamples(2, time.Minute+time.Second), clean: true},
		}, 2*time.Minute)
		if l, ok := previousAttemptLost(atts); ok {
			t.Errorf("lost %+v", l)
		}
	})
	t.Run("sync attempts are skipped", func(t *testing.T) {
		atts := writeSpool(t, []attempt{
			{start: 0, pid: 101, samples: oomingSamples(0, 10*time.Second)},
			{start: time.Minute, pid: 102, sync: true, clean: true},
			{start: 2 * time.Minute, pid: 103, sync: true}, // a sync that crashed
		}, 3*time.Minute)
		l, ok := previousAttemptLost(atts)
		if !ok {
			t.Fatal("the lost training attempt behind the syncs was not found")
		}
		// The gap runs to the attempt right after it, the first sync.
		if l.PID != 101 || !l.Next.Equal(t0.Add(time.Minute)) || !strings.Contains(l.Sentence, "49 s before the next attempt started") {
			t.Errorf("Lost = %+v", l)
		}
	})
	t.Run("lost without a sample", func(t *testing.T) {
		atts := writeSpool(t, []attempt{{start: 0, pid: 101}}, time.Minute)
		l, ok := previousAttemptLost(atts)
		if !ok || l.HasSample || !strings.HasSuffix(l.Sentence, "and left no sample") {
			t.Fatalf("Lost = %+v, %v", l, ok)
		}
		if _, ok := l.Tags()[TagPreviousAttemptLastSample]; ok {
			t.Error("last-sample tag without a sample")
		}
	})
	t.Run("first attempt", func(t *testing.T) {
		if l, ok := previousAttemptLost(writeSpool(t, nil, 0)); ok {
			t.Errorf("lost %+v", l)
		}
	})
}

// previousAttemptLost applies LostBefore to attempts whose last element is
// the current attempt.
func previousAttemptLost(attempts []spool.Attempt) (*Lost, bool) {
	if len(attempts) < 2 {
		return nil, false
	}
	n := len(attempts) - 1
	return LostBefore(attempts[:n], time.UnixMilli(attempts[n].Start.Time))
}
