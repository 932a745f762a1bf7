package cgroup

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/metrics"
)

// StartPeak reads the mark before the job and says why it did not reset
// it: v1 is never reset (a write resets it for every reader); a v2
// memory.peak that is not on cgroup2 (a fixture's) is never written; a
// root memory cgroup has no container's mark.
func TestStartPeak(t *testing.T) {
	f, _, ctr := k8sV2(t, nil, nil)
	c := f.collector()
	ps := c.StartPeak(context.Background())
	defer ps.Discard()
	if !ps.Known || ps.Bytes != 400*mib || ps.Reset || ps.File != "memory.peak" || !strings.Contains(ps.Why, "not on a cgroup2 filesystem") {
		t.Errorf("v2 fixture: %+v", ps)
	}
	if b, _ := os.ReadFile(filepath.Join(ctr, "memory.peak")); string(b) != v2Leaf()["memory.peak"] {
		t.Errorf("the fixture's memory.peak was written: %q", b)
	}

	v := newV1(t, ModeV1, nil, nil, nil)
	ps = v.f.collector().StartPeak(context.Background())
	if !ps.Known || ps.Bytes != 400*mib || ps.Reset || ps.File != "memory.max_usage_in_bytes" || !strings.Contains(ps.Why, "every reader") {
		t.Errorf("v1: %+v", ps)
	}

	r := newFixture(t, ModeV2, 8)
	r.procCgroup("0::/")
	r.mountV2("", "/")
	r.files(r.cg, v2Root(), nil)
	if ps := r.collector().StartPeak(context.Background()); ps.Known || ps.Reset {
		t.Errorf("root: %+v", ps)
	}
}

// After UsePeak with a reset descriptor, memory.peak is read through it,
// not by its path: the mark bridge's descriptor counts, from the job's
// start. Close closes it.
func TestUsePeakReadsThroughTheResetDescriptor(t *testing.T) {
	f, _, _ := k8sV2(t, nil, nil)
	c := f.collector()
	own := filepath.Join(t.TempDir(), "peak")
	if err := os.WriteFile(own, []byte("1048576\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := os.Open(own)
	if err != nil {
		t.Fatal(err)
	}
	c.UsePeak(metrics.PeakStart{Known: true, Reset: true, Held: &resetFile{osFile{fd}}})
	pts := collect(t, c)
	wantValue(t, pts, "container_memory_peak_megabytes", 1048576/1e6)
	wantValue(t, pts, "container_memory_usage_megabytes", 300*mib/1e6)
	c.Close()
	if _, err := fd.Stat(); err == nil {
		t.Error("Close left the reset descriptor open")
	}
}

// osFile reads a fixture's file as kfile.Handle reads the kernel's.
type osFile struct{ *os.File }

func (f osFile) Read(buf []byte) ([]byte, error) {
	buf = buf[:cap(buf)]
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return buf[:0], err
	}
	return buf[:n], nil
}
