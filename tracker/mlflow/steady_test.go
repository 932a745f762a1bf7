package mlflow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

// flaky is an MLflow stand-in that fails a share of the requests (503) and
// keeps the metrics of those it took.
type flaky struct {
	mu   sync.Mutex
	rng  *rand.Rand
	fail float64
	took map[string][]wirePoint // by key
	n    int                    // requests taken
}

type wirePoint struct {
	Key       string  `json:"key"`
	Value     float64 `json:"value"`
	Timestamp int64   `json:"timestamp"`
	Step      int64   `json:"step"`
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rng.Float64() < f.fail {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var b struct {
		Metrics []wirePoint `json:"metrics"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	f.n++
	for _, m := range b.Metrics {
		f.took[m.Key] = append(f.took[m.Key], m)
	}
	io.WriteString(w, "{}")
}

var (
	steadyA = &metrics.Desc{Name: "container_test_limit_megabytes", Unit: metrics.UnitMegabytes, Steady: true}
	steadyB = &metrics.Desc{Name: "container_test_events_count", Unit: metrics.UnitCount, Steady: true}
	plain   = &metrics.Desc{Name: "container_test_usage_megabytes", Unit: metrics.UnitMegabytes}
)

// Whatever the requests that fail, the interval and the batches, what
// MLflow stores of a steady series draws the same line as every sample
// would: its first and last samples, both ends of each change, nothing
// else between two points but their common value, and the first sample a
// minute or more after a stored one. Every other series has every sample.
func TestSteadySeriesDrawTheSameLine(t *testing.T) {
	for seed := range uint64(40) {
		interval := []time.Duration{time.Second, 7 * time.Second, 10 * time.Second, 45 * time.Second}[seed%4]
		t.Run(fmt.Sprintf("seed%d-%s", seed, interval), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			srv := &flaky{rng: rand.New(rand.NewPCG(seed, 2)), fail: 0.2, took: map[string][]wirePoint{}}
			ts := httptest.NewServer(srv)
			t.Cleanup(ts.Close)
			s, err := New(Config{TrackingURI: ts.URL}, nil)
			if err != nil {
				t.Fatal(err)
			}
			s.runID = "run1"
			s.maxMetrics = 1 + rng.IntN(5) // requests split inside a Send
			in := steadySamples(rng, 150, interval)

			ctx := context.Background()
			queue := in
			for tries := 0; len(queue) > 0; tries++ {
				if tries > 10000 {
					t.Fatal("samples never all acknowledged")
				}
				acked, _ := s.Send(ctx, queue[:1+rng.IntN(min(6, len(queue)))])
				queue = queue[acked:]
			}
			for tries := 0; s.Finish(ctx, tracker.EndInfo{}) != nil; tries++ {
				if tries > 1000 {
					t.Fatal("Finish never succeeded")
				}
			}

			srv.mu.Lock()
			defer srv.mu.Unlock()
			checkLine(t, in, srv.took, "system/"+steadyA.Name, steadyA.Name)
			checkLine(t, in, srv.took, "system/"+steadyB.Name, steadyB.Name)
			got := map[int64]bool{}
			for _, p := range srv.took["system/"+plain.Name] {
				got[p.Step] = true
			}
			if len(got) != len(in) {
				t.Errorf("%s: %d of %d samples stored", plain.Name, len(got), len(in))
			}
		})
	}
}

// steadySamples are n samples, interval apart: the steady series change
// now and then, the plain one every sample; after the first, a sample may
// be one read back from the spool (names only).
func steadySamples(rng *rand.Rand, n int, interval time.Duration) []metrics.Sample {
	a, b := 1000.0, 0.0
	out := make([]metrics.Sample, n)
	for i := range out {
		if rng.Float64() < 0.05 {
			a = float64(1000 + rng.IntN(3)) // may change to the same value
		}
		if rng.Float64() < 0.1 {
			b++
		}
		s := metrics.Sample{Seq: int64(i), Time: t0.Add(time.Duration(i) * interval)}
		if i > 0 && rng.Float64() < 0.3 {
			s.Points = []metrics.Point{metrics.Named(steadyA.Name, a), metrics.Named(steadyB.Name, b), metrics.Named(plain.Name, float64(i))}
		} else {
			s.Points = []metrics.Point{metrics.At(steadyA, a), metrics.At(steadyB, b), metrics.At(plain, float64(i))}
		}
		out[i] = s
	}
	return out
}

// checkLine asserts that the points stored under key draw the line of
// name's values in the samples.
func checkLine(t *testing.T, in []metrics.Sample, took map[string][]wirePoint, key, name string) {
	t.Helper()
	want := map[int64]float64{}
	for _, s := range in {
		v, _ := s.Value(name)
		want[s.Seq] = v
	}
	byStep := map[int64]wirePoint{}
	for _, p := range took[key] {
		byStep[p.Step] = p
		if p.Value != want[p.Step] || p.Timestamp != in[p.Step].Time.UnixMilli() {
			t.Errorf("%s: stored %v at step %d (time %d), the sample has %v (time %d)", key, p.Value, p.Step, p.Timestamp, want[p.Step], in[p.Step].Time.UnixMilli())
		}
	}
	steps := slices.Sorted(func(yield func(int64) bool) {
		for s := range byStep {
			if !yield(s) {
				return
			}
		}
	})
	last := int64(len(in) - 1)
	if len(steps) == 0 || steps[0] != 0 || steps[len(steps)-1] != last {
		t.Fatalf("%s: steps %v, want the first (0) and the last (%d)", key, steps, last)
	}
	for i := 1; i < len(steps); i++ {
		a, b := steps[i-1], steps[i]
		for s := a + 1; s < b; s++ {
			if want[s] != want[a] {
				t.Errorf("%s: step %d (%v) is not stored, and differs from step %d's (%v): the line misses it", key, s, want[s], a, want[a])
				break
			}
		}
		if want[b] != want[a] && b != a+1 {
			t.Errorf("%s: the value changes at step %d, but step %d, the last of the old value, is not stored", key, b, b-1)
		}
		if gap := in[b-1].Time.Sub(in[a].Time); gap >= time.Minute {
			t.Errorf("%s: stored steps %d and %d: step %d, %v after the first, was not stored", key, a, b, b-1, gap)
		}
	}
	if len(steps) == len(in) && len(in) > 20 {
		t.Errorf("%s: every sample stored: nothing was held back", key)
	}
}
