package node

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/metrics"
)

// scopedFixture is newFixture limited to scopes, counting statfs calls. Its
// net/dev is garbage, so a read of it would fail Collect.
func scopedFixture(t *testing.T, scopes ...metrics.Scope) (*Collector, *int) {
	t.Helper()
	root := fullFixture(t)
	writeFile(t, root, "net/dev", "header\nheader\ngarbage\n")
	c, err := New(Options{ProcRoot: root, SysRoot: filepath.Join(root, "sys"), RootfsPath: root, Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1764682500, 0), step: 10 * time.Second}
	c.now = clk.now
	calls := new(int)
	c.statfs = func(path string) (fsUsage, error) {
		*calls++
		return readFsUsage(path)
	}
	return c, calls
}

func prefixes(pts []metrics.Point) []string {
	var out []string
	for _, p := range pts {
		pre, _, _ := strings.Cut(p.Name(), "_")
		if !slices.Contains(out, pre) {
			out = append(out, pre)
		}
	}
	slices.Sort(out)
	return out
}

// --scopes ...,node: no statfs, no net/dev; only node_ series.
func TestScopesNodeOnly(t *testing.T) {
	c, statfs := scopedFixture(t, metrics.ScopeNode)
	for i := range 2 { // the second has the deltas
		b, err := collectBatch(c)
		if err != nil {
			t.Fatalf("Collect %d: %v (net/dev must not be read)", i, err)
		}
		if got := prefixes(b.Points); !slices.Equal(got, []string{"node"}) {
			t.Errorf("Collect %d: series of %v, want node only", i, got)
		}
		if _, ok := byName(t, b)["node_memory_total_megabytes"]; !ok {
			t.Errorf("Collect %d: node_memory_total_megabytes missing", i)
		}
	}
	if *statfs != 0 {
		t.Errorf("statfs called %d times without the rootfs scope", *statfs)
	}
	if got := c.Scopes(); !slices.Equal(got, []metrics.Scope{metrics.ScopeNode}) {
		t.Errorf("Scopes() = %v", got)
	}
}

// --scopes rootfs: statfs only; /proc is not read (its net/dev is garbage).
func TestScopesRootfsOnly(t *testing.T) {
	c, statfs := scopedFixture(t, ScopeRootfs)
	pts, err := collecttest.Collect(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if got := prefixes(pts); !slices.Equal(got, []string{"rootfs"}) {
		t.Errorf("series of %v, want rootfs only", got)
	}
	if *statfs != 1 {
		t.Errorf("statfs called %d times, want 1", *statfs)
	}
}

// No Scopes is all three, as before; the garbage net/dev is then read.
func TestScopesDefaultAll(t *testing.T) {
	c, statfs := scopedFixture(t)
	pts, err := collecttest.Collect(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "net/dev") {
		t.Errorf("error = %v, want one about net/dev (read with all scopes)", err)
	}
	if got := prefixes(pts); !slices.Equal(got, []string{"node", "rootfs"}) {
		t.Errorf("series of %v, want node and rootfs (netns failed)", got)
	}
	if *statfs != 1 {
		t.Errorf("statfs called %d times, want 1", *statfs)
	}
	if got := c.Scopes(); len(got) != 3 {
		t.Errorf("Scopes() = %v, want all three", got)
	}
}

func TestScopesUnknown(t *testing.T) {
	if _, err := New(Options{ProcRoot: t.TempDir(), Scopes: []metrics.Scope{metrics.ScopeGPU}}); err == nil {
		t.Error("New accepted the gpu scope")
	}
}
