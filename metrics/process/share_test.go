package process

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// treeUser stands in for a GPU collector: it asks the shared Tree what the
// NVIDIA collector (NSpids) or the AMD one (PIDs) asks, once a Collect.
type treeUser struct {
	name   string
	tree   *Tree
	nspids bool
}

func (u treeUser) Name() string { return u.name }

func (u treeUser) Collect(ctx context.Context, b *metrics.Batch) error {
	var n int
	if u.nspids {
		ids, err := u.tree.NSpids(ctx)
		if err != nil {
			return err
		}
		n = len(ids)
	} else {
		pids, err := u.tree.PIDs(ctx)
		if err != nil {
			return err
		}
		n = len(pids)
	}
	b.Add(&metrics.Desc{Name: u.name + "_tree_count", Unit: metrics.UnitCount, Scope: metrics.ScopeProcess}, float64(n), "")
	return nil
}

// The process collector and the GPU collectors share one Tree, run side by
// side by a real Sampler: the tree is walked once a sample, and each sees
// the same processes.
func TestOneWalkASample(t *testing.T) {
	root := t.TempDir()
	writeProcs(t, root, family...)
	tr, err := NewTree(TreeOptions{ProcRoot: root, RootPID: func() int { return 100 }})
	if err != nil {
		t.Fatal(err)
	}
	cs := []metrics.Collector{New(tr, nil), treeUser{"nvidia", tr, true}, treeUser{"amd", tr, false}}
	s := metrics.NewSampler(cs, time.Minute, slog.New(slog.DiscardHandler))
	defer s.Close()
	const samples = 5
	for i := range samples {
		smp := s.Sample(context.Background())
		for _, name := range []string{"process_count", "nvidia_tree_count", "amd_tree_count"} {
			if v, ok := smp.Value(name); !ok || v != 4 {
				t.Fatalf("sample %d: %s = %v (%v), want 4", i, name, v, ok)
			}
		}
		if tr.walks != i+1 {
			t.Fatalf("after %d samples the tree was walked %d times, want once a sample", i+1, tr.walks)
		}
	}
	// Outside a sample (a Detect) each call walks afresh.
	if _, err := tr.PIDs(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.PIDs(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tr.walks != samples+2 {
		t.Errorf("two calls outside a sample: %d walks in all, want %d", tr.walks, samples+2)
	}
}

// A collector that waits for another's walk gives up when its sample's
// time is up, rather than stall behind a walk stuck in the kernel.
func TestWaitForWalkHonoursContext(t *testing.T) {
	tr, err := NewTree(TreeOptions{ProcRoot: t.TempDir(), RootPID: func() int { return 100 }})
	if err != nil {
		t.Fatal(err)
	}
	tr.sem <- struct{}{} // a walk in flight
	defer func() { <-tr.sem }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tr.PIDs(ctx); err == nil {
		t.Error("PIDs behind a walk in flight with its ctx done: no error")
	}
}

// The collectors of a job get one Tree (and it one cgroup layout), made by
// the first Build that asks; without a Shared each gets its own.
func TestTreeOfIsMadeOnceAJob(t *testing.T) {
	job := fixedJob(100)
	env := metrics.Env{Roots: metrics.Roots{Proc: "/proc", Cgroup: "/sys/fs/cgroup"}, Job: job, Shared: &metrics.Shared{},
		Log: slog.New(slog.DiscardHandler)}
	a, err := TreeOf(env)
	if err != nil {
		t.Fatal(err)
	}
	b, err := TreeOf(env)
	if err != nil || a != b {
		t.Errorf("two Builds of one job got trees %p and %p (%v), want one", a, b, err)
	}
	env.Shared = nil
	if c, err := TreeOf(env); err != nil || c == a {
		t.Errorf("without a Shared: tree %p (%v), want one of its own", c, err)
	}
	// A proc root that cannot be read is the same error for every Build.
	env.Shared, env.Roots.Proc = &metrics.Shared{}, filepath.Join(t.TempDir(), "none")
	_, err1 := TreeOf(env)
	_, err2 := TreeOf(env)
	if err1 == nil || err1 != err2 {
		t.Errorf("unreadable proc root: %v, then %v; want one error", err1, err2)
	}
}

// fixedJob is a job whose child is pid, with no adopter.
type fixedJob int

func (j fixedJob) PID() int   { return int(j) }
func (fixedJob) Adopter() int { return 0 }
