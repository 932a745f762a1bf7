package attachlock

import (
	"errors"
	"os"
	"testing"
	"time"
)

func TestOneAttachPerKey(t *testing.T) {
	dir := t.TempDir()
	k := Key{PID: 42, Start: 1000, Runs: map[string]string{"mlflow": "abc", "wandb": "xyz"}, Node: "node-0"}
	me := Holder{PID: 7, Target: 42, Runs: k.Runs, Node: k.Node, Since: time.Unix(1_800_000_000, 0).UTC()}
	l, _, err := Acquire(dir, k, me)
	if err != nil {
		t.Fatal(err)
	}
	me.Spool = "/work/bridge-spool-node-0-abc.jsonl"
	if err := l.Update(me); err != nil {
		t.Fatal(err)
	}

	// The same process, runs (in any order) and node: held, and named.
	same := Key{PID: 42, Start: 1000, Runs: map[string]string{"wandb": "xyz", "mlflow": "abc"}, Node: "node-0"}
	_, h, err := Acquire(dir, same, Holder{PID: 8})
	if !errors.Is(err, ErrHeld) {
		t.Fatalf("second Acquire: %v, want ErrHeld", err)
	}
	if h.PID != 7 || h.Spool != me.Spool || h.Target != 42 {
		t.Errorf("holder %+v, want the first attach's description", h)
	}

	// Another run, node, or a reused pid (another start time): another key.
	for _, other := range []Key{
		{PID: 42, Start: 1000, Runs: map[string]string{"mlflow": "abd", "wandb": "xyz"}, Node: "node-0"},
		{PID: 42, Start: 1000, Runs: k.Runs, Node: "node-1"},
		{PID: 42, Start: 2000, Runs: k.Runs, Node: "node-0"},
		{PID: 43, Start: 1000, Runs: k.Runs, Node: "node-0"},
	} {
		o, _, err := Acquire(dir, other, Holder{PID: 9})
		if err != nil {
			t.Errorf("Acquire(%+v): %v, want its own lock", other, err)
			continue
		}
		if err := o.Release(); err != nil {
			t.Error(err)
		}
	}

	// Released: the file is gone and the next attach takes it.
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file after Release: %v", err)
	}
	l2, _, err := Acquire(dir, same, Holder{PID: 8})
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}
