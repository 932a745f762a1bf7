package cgroup

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/closetest"
	"github.com/bridge-dev/bridge/harness/waitfor"
)

// Close beside a Collect, a memory probe and (on v1, where it reads
// memory.stat too) a Detect, all stuck for real opening memory.stat, a FIFO
// nobody writes: Close does not wait for them, nothing races, and nothing
// stays open once they return.
func TestCloseWhileReadHangs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(t *testing.T) (f *fixture, leaf string)
	}{
		{"v2", func(t *testing.T) (*fixture, string) { f, _, leaf := k8sV2(t, nil, nil); return f, leaf }},
		{"v1", func(t *testing.T) (*fixture, string) { v := newV1(t, ModeV1, nil, nil, nil); return v.f, v.memLeaf }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, leaf := tc.build(t)
			c := f.collector()
			stat := filepath.Join(leaf, "memory.stat")
			body, err := os.ReadFile(stat)
			if err != nil {
				t.Fatal(err)
			}
			release := closetest.Fifo(t, stat, string(body))
			probed := make(chan struct{})
			go func() { defer close(probed); c.MemoryPoints(context.Background()) }()
			closetest.CloseWhileReadHangs(t, c, filepath.Dir(f.proc), release)
			waitfor.Cond(t, time.Minute, "the stuck memory probe returning", waitfor.Closed(probed))
		})
	}
}

// Collect, a memory probe, Detect and Close at once on this machine's own
// cgroup (its files kept open): no data race.
func TestCloseRaceReal(t *testing.T) {
	c, err := newCollector(Options{})
	if err != nil {
		t.Skipf("SKIP: no cgroup of our own to read here: %v", err)
	}
	probing := make(chan struct{})
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		for {
			select {
			case <-probing:
				return
			default:
				c.MemoryPoints(context.Background())
			}
		}
	}()
	closetest.Race(t, c)
	close(probing)
	<-probed
}

// The sampling loop's memory probe runs on a goroutine of its own and may
// overlap the next sample's Collect (pipeline.MemoryProbe): the two at once
// share nothing unguarded (run with -race) and both answer; and a probe
// takes no CPU reading, so Collect's rates stay between Collects.
func TestMemoryProbeBesideCollect(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(t *testing.T) *fixture
	}{
		{"v2", func(t *testing.T) *fixture { f, _, _ := k8sV2(t, nil, nil); return f }},
		{"v1", func(t *testing.T) *fixture { return newV1(t, ModeV1, nil, nil, nil).f }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.build(t).collector()
			defer c.Close()
			var mu sync.Mutex // the clock is read by both (kfile's absence records)
			clock := time.Unix(1700000000, 0)
			c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }

			collect(t, c)
			prev := c.prev
			if pts, err := c.MemoryPoints(context.Background()); err != nil || len(pts) == 0 {
				t.Fatalf("MemoryPoints = %v, %v", pts, err)
			}
			if c.prev != prev {
				t.Fatal("MemoryPoints took a CPU reading: the next Collect's rates would be over the wrong window")
			}

			probed := make(chan struct{})
			go func() {
				defer close(probed)
				for range 200 {
					if pts, err := c.MemoryPoints(context.Background()); err != nil || len(pts) == 0 {
						t.Errorf("MemoryPoints beside Collect = %v, %v", pts, err)
						return
					}
				}
			}()
			defer func() { <-probed }()
			for !waitfor.Closed(probed)() {
				mu.Lock()
				clock = clock.Add(time.Second)
				mu.Unlock()
				collect(t, c) // fails the test on an error
			}
		})
	}
}
