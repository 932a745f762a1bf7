package report

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/forensics"
	"github.com/bridge-dev/bridge/summary"
)

// nodeRow builds a job's report from tags and returns node-1's row.
func nodeRow(t *testing.T, tags map[string]string) Node {
	t.Helper()
	rep, err := Build(context.Background(), Run{Status: "FAILED", Tags: tags}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range rep.Nodes {
		if n.Node == "node-1" {
			return n
		}
	}
	t.Fatalf("no node-1 in %+v", rep.Nodes)
	return Node{}
}

// A bridge that records the peak's source has decided it
// (summary.PeakWorkingSet): a sampled peak stays sampled at an OOM kill,
// whatever the peak usage says, and a peak usage that fell back to the
// samples is never taken for the kernel's mark.
func TestPeakSourceTagDecides(t *testing.T) {
	// An ancestor's limit killed: the cgroup's own mark is far below its
	// limit, so the bridge kept the sampled peak.
	tags := jobTags(oom("node-1", time.Second))
	s := "bridge.node.node-1."
	tags[s+"peak_working_set_megabytes"] = "20.0"
	tags[s+"peak_working_set_source"] = summary.SourceSampled
	tags[s+"peak_usage_megabytes"] = "300.0"
	tags[s+"peak_usage_source"] = summary.SourceKernelPeak + " memory.peak"
	if n := nodeRow(t, tags); n.PeakWorkingSetMB == nil || n.PeakWorkingSetMB.Float64() != 20 || n.PeakWorkingSetSource != summary.SourceSampled {
		t.Errorf("peak %v (%s), want the sampled 20", deref(n.PeakWorkingSetMB), n.PeakWorkingSetSource)
	}

	// A node OOM kill where the kernel keeps no mark: the peak usage is
	// the samples', whether or not the node recorded the peak's source.
	tags = jobTags(nodeEndSpec{"node-1", "FAILED", forensics.ReasonNodeOOMKill, "SIGKILL", 137, time.Second})
	tags[s+"peak_working_set_megabytes"] = "100.0"
	tags[s+"peak_usage_megabytes"] = "150.0"
	tags[s+"peak_usage_source"] = summary.SourceSampled
	tags[s+"peak_usage_share_of_limit_percentage"] = "75.0"
	tags[s+"memory_limit_megabytes"] = "200.0"
	for _, source := range []string{"", summary.SourceSampled} {
		if source != "" {
			tags[s+"peak_working_set_source"] = source
		}
		n := nodeRow(t, tags)
		if n.PeakWorkingSetMB == nil || n.PeakWorkingSetMB.Float64() != 100 || strings.HasPrefix(n.PeakWorkingSetSource, summary.SourceKernelPeak) {
			t.Errorf("source tag %q: peak %v (%s), want the sampled 100", source, deref(n.PeakWorkingSetMB), n.PeakWorkingSetSource)
		}
	}

	// A cgroup OOM kill where the kernel's mark predated the job (an
	// earlier job's, in a cgroup jobs share): the peak usage fell back to
	// the samples and says why; neither it, its share nor the evidence is
	// taken for the job's mark, even with no peak source tag to decide.
	tags = jobTags(oom("node-1", time.Second))
	tags[s+"peak_working_set_megabytes"] = "8.0"
	tags[s+"peak_usage_megabytes"] = "9.0"
	tags[s+"peak_usage_source"] = summary.SourceSampled + "; the kernel's high-water mark memory.peak, 718.0 MB, predates the job"
	tags[s+"peak_usage_share_of_limit_percentage"] = "0.9"
	tags[s+"memory_limit_megabytes"] = "1000.0"
	tags[s+"exit_evidence"] = "oom_kill=0 -> 1; rule=x"
	if n := nodeRow(t, tags); n.PeakWorkingSetMB == nil || n.PeakWorkingSetMB.Float64() != 8 || n.PeakWorkingSetSource != summary.SourceSampled {
		t.Errorf("a mark that predates the job: peak %v (%s), want the sampled 8", deref(n.PeakWorkingSetMB), n.PeakWorkingSetSource)
	}
}

// What forensics and summary write at a node's end is what the report
// reads: the reason, the peak and its source, the throttled share and the
// energy, through the writers' own tags (a single run's, under bridge.).
func TestReportReadsWhatTheBridgeWrites(t *testing.T) {
	v := forensics.Verdict{Reason: forensics.ReasonCgroupOOMKill, Summary: "killed",
		Evidence: map[string]string{"peak_usage_megabytes": "250.0"}}
	var e forensics.Evidence
	e.ExitCode = 137
	e.Memory.PeakWorkingSet = summary.Figure{Value: 250, Known: true, Expected: true,
		Source: summary.SourceKernelPeak + " memory.peak at the OOM kill", SharePercent: 100, ShareKnown: true}
	e.Memory.PeakUsage = summary.Figure{Value: 250, Known: true, Expected: true, Source: summary.SourceKernelPeak + " memory.peak"}
	e.ThrottledShare = forensics.Reading{Value: 12.5, Known: true, Expected: true}
	e.PeakProcessRSS = forensics.Reading{Value: 180.26, Known: true, Expected: true}
	e.Start, e.ExitTime = time.Date(2026, 12, 7, 17, 25, 25, 969e6, time.UTC), time.Date(2026, 12, 7, 17, 27, 27, 69e6, time.UTC)
	tags := v.Tags(e)
	tags[summary.TagEnergyGPUs], tags[summary.TagEnergyNodeCPU] = "1000.0", "500.0"
	tags["bridge.status"] = "FAILED"

	rep, err := Build(context.Background(), Run{ID: "r", Status: "FAILED", Tags: tags}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Nodes) != 1 {
		t.Fatalf("nodes %+v, want one", rep.Nodes)
	}
	n := rep.Nodes[0]
	if n.Reason != forensics.ReasonCgroupOOMKill || n.Detail != "killed" || n.ExitCode == nil || *n.ExitCode != 137 {
		t.Errorf("end %q %q %v, want the verdict's", n.Reason, n.Detail, n.ExitCode)
	}
	if n.PeakWorkingSetMB == nil || n.PeakWorkingSetMB.Float64() != 250 || n.PeakWorkingSetSource != e.Memory.PeakWorkingSet.Source {
		t.Errorf("peak %v (%s), want the bridge's 250 (%s)", deref(n.PeakWorkingSetMB), n.PeakWorkingSetSource, e.Memory.PeakWorkingSet.Source)
	}
	if n.Started != "2026-12-07T17:25:25.969Z" || deref(n.DurationSeconds) != 121.1 || deref(n.ProcessTreePeakRSSMB) != 180.3 {
		t.Errorf("started %q, ran %v s, process tree %v MB: want the bridge's start, 121.1 s, 180.3 MB",
			n.Started, deref(n.DurationSeconds), deref(n.ProcessTreePeakRSSMB))
	}
	if deref(n.ThrottledSharePercent) != 12.5 || deref(n.GPUEnergyJoules) != 1000.0 || deref(n.NodeCPUEnergyJoules) != 500.0 {
		t.Errorf("throttled %v, energy %v %v, want 12.5, 1000, 500",
			deref(n.ThrottledSharePercent), deref(n.GPUEnergyJoules), deref(n.NodeCPUEnergyJoules))
	}
}
