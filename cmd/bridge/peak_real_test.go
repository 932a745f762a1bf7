package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
)

// A real v1 memory cgroup that jobs share, whose high-water mark an earlier
// process left at about 200 MB (as a go build before a small job, issue
// 40). bridge runs a small job in it, against a real MLflow server: the
// peak usage it shows and tags is the job's sampled one, not the earlier
// mark, and the table and the source tag say that the mark predates the
// job; the OOM evidence carries no mark. A second job that raises the mark
// above the earlier one gets the kernel's mark, as before.
func TestPeakThatPredatesTheJobIsNotTheJobs(t *testing.T) {
	srv := mlflowtest.Shared(t)
	g := cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 1 << 30})
	python := mlflowtest.Python(t)
	markFile := filepath.Join(g.Memory, "memory.max_usage_in_bytes")
	alloc := func(mb int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", g.ShellEnter()+`exec "$0" -c "b = bytearray($1 * 1_000_000); b[::4096] = b'x' * len(b[::4096])"`, python, strconv.Itoa(mb))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("allocating %d MB in %s: %v\n%s", mb, g.Memory, err, out)
		}
	}
	readMark := func() float64 {
		t.Helper()
		b, err := os.ReadFile(markFile)
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		if err != nil {
			t.Fatal(err)
		}
		return v / 1e6
	}
	alloc(200)
	earlier := readMark()
	if earlier < 200 {
		t.Fatalf("precondition: the earlier process left a mark of %.1f MB, want 200 MB or more", earlier)
	}

	j := newJob(t, srv.URL, "--interval=250ms", "--trackers=mlflow", "--", "sh", "-c", "sleep 1").inCgroup(g)
	if code := j.run(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
	}
	if after := readMark(); after != earlier {
		t.Fatalf("precondition: the small job moved the mark from %.1f to %.1f MB", earlier, after)
	}
	tags := srv.GetRun(t, j.runID(t)).Tags
	peak, err := strconv.ParseFloat(tags["bridge.peak_usage_megabytes"], 64)
	if err != nil || peak >= earlier/2 {
		t.Errorf("bridge.peak_usage_megabytes = %q, want the small job's sampled peak, far below the earlier mark %.1f MB", tags["bridge.peak_usage_megabytes"], earlier)
	}
	wantWhy := fmt.Sprintf("the kernel's high-water mark memory.max_usage_in_bytes, %.1f MB, predates the job", earlier)
	if src := tags["bridge.peak_usage_source"]; src != "sampled; "+wantWhy {
		t.Errorf("bridge.peak_usage_source = %q, want %q", src, "sampled; "+wantWhy)
	}
	if ev := tags["bridge.exit_evidence"]; strings.Contains(ev, "peak_usage_megabytes") {
		t.Errorf("the exit evidence cites a mark that predates the job: %q", ev)
	}
	row := tableRow(j.err.String(), "peak usage")
	if !strings.HasPrefix(row, tags["bridge.peak_usage_megabytes"]+" MB") || !strings.Contains(row, wantWhy) {
		t.Errorf("the table's peak usage row = %q, want %s MB and %q:\n%s", row, tags["bridge.peak_usage_megabytes"], wantWhy, &j.err)
	}

	// A job that raises the mark: the kernel's mark is the job's.
	j = newJob(t, srv.URL, "--interval=250ms", "--trackers=mlflow", "--", python, "-c",
		"b = bytearray(300_000_000); b[::4096] = b'x' * len(b[::4096])").inCgroup(g)
	if code := j.run(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &j.err)
	}
	mark := readMark()
	tags = srv.GetRun(t, j.runID(t)).Tags
	if tags["bridge.peak_usage_source"] != "kernel high-water mark memory.max_usage_in_bytes" || tags["bridge.peak_usage_megabytes"] != fmt.Sprintf("%.1f", mark) {
		t.Errorf("a job that raised the mark to %.1f MB: bridge.peak_usage_megabytes %q from %q, want the kernel's mark",
			mark, tags["bridge.peak_usage_megabytes"], tags["bridge.peak_usage_source"])
	}
}
