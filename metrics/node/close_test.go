package node

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bridge-dev/bridge/harness/closetest"
)

// Close beside a Collect and a Detect both stuck for real opening
// /proc/meminfo, a FIFO nobody writes: Close does not wait for them,
// nothing races, and nothing stays open once they return.
func TestCloseWhileReadHangs(t *testing.T) {
	root := fullFixture(t)
	c := newFixture(t, root)
	path := filepath.Join(root, "meminfo")
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	closetest.CloseWhileReadHangs(t, c, root, closetest.Fifo(t, path, string(body)))
}

// Collect, Detect and Close at once on the real /proc (descriptors kept):
// no data race.
func TestCloseRaceReal(t *testing.T) {
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	closetest.Race(t, c)
}
