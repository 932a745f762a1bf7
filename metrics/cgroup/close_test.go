package cgroup

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/internal/waitfor"
	"github.com/bridge-dev/bridge/metrics/internal/closetest"
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
