package jobrun

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/bridge-dev/bridge/internal/printable"
	"github.com/bridge-dev/bridge/report"
)

// The run's own note: a short Markdown summary of the job in the note a
// person reads on the run (MLflow's description on its Overview page, W&B's
// notes), in a section of its own. bridge writes an empty note, or its own
// section again; a note a person wrote keeps every character, and bridge's
// section is added after it once (then found again by its marks).
const (
	noteBegin = "<!-- bridge: begin. bridge rewrites what is between these two marks; the rest of the note is yours -->"
	noteEnd   = "<!-- bridge: end -->"
)

// NoteMax is the longest note bridge writes, in characters: MLflow's
// longest tag value (report.SummaryMax). A note a person wrote that leaves
// no room for bridge's section is left as it is.
const NoteMax = report.SummaryMax

// noteRows bounds the node rows of a job's note: the rest are counted, and
// `bridge report` shows them.
const noteRows = 16

// withSection is note with section as bridge's part of it, and whether it
// fits NoteMax: an empty note becomes the section; one that holds bridge's
// section (its begin mark, then its end mark or nothing more) gets it
// replaced there; any other gets it appended after a blank line.
func withSection(note, section string) (string, bool) {
	block := noteBegin + "\n" + section + "\n" + noteEnd
	var out string
	switch i := strings.Index(note, noteBegin); {
	case strings.TrimSpace(note) == "":
		out = block
	case i >= 0:
		rest := note[i+len(noteBegin):]
		tail := ""
		if j := strings.Index(rest, noteEnd); j >= 0 {
			tail = rest[j+len(noteEnd):]
		}
		out = note[:i] + block + tail
	default:
		out = strings.TrimRight(note, "\n") + "\n\n" + block
	}
	return out, utf8.RuneCountInString(out) <= NoteMax
}

// noteOf is bridge's section of the note for rep, the job's report as the
// tick read it: its status and why, each node's memory and CPU against its
// limits with what the next run should ask for, the bottleneck (each
// node's tag, with this node's shares), the nodes that differ, and the
// job's energy and cost. tags are the run's (with this node's live ones);
// node names this node ("" in a single run). It holds no time of its own:
// a tick that finds nothing new writes nothing.
func noteOf(rep *report.Report, tags map[string]string, node string, shares string) string {
	t := printable.MarkdownText
	var b strings.Builder
	b.WriteString("**bridge**, what this job used and what its next run should ask for:\n\n")
	single := len(rep.Nodes) == 1 && tags[report.TagJobKey] == ""
	if single {
		n := rep.Nodes[0]
		fmt.Fprintf(&b, "- **Status:** %s\n", statusText(n))
		if s := memoryText(n); s != "" {
			fmt.Fprintf(&b, "- **Memory:** %s\n", s)
		}
		if s := cpuText(n); s != "" {
			fmt.Fprintf(&b, "- **CPU:** %s\n", s)
		}
		if len(n.Unused) > 0 {
			fmt.Fprintf(&b, "- **Never used:** %s\n", strings.Join(quoted(n.Unused), "; "))
		}
		if s := bottleneckText(tags["bridge.bottleneck"], shares); s != "" {
			fmt.Fprintf(&b, "- **Bottleneck:** %s\n", s)
		}
	} else {
		fmt.Fprintf(&b, "- **Status:** %s; first failure: %s\n", t(orNone(rep.Status, "running")), t(firstFailure(rep)))
		b.WriteString("\n| node | status | memory | CPU | next run asks for | bottleneck |\n|---|---|---|---|---|---|\n")
		for i, n := range rep.Nodes {
			if i == noteRows {
				fmt.Fprintf(&b, "\n%d more nodes: `bridge report %s` shows them all.\n", len(rep.Nodes)-noteRows, t(rep.Run))
				break
			}
			sh := ""
			if n.Node == node {
				sh = shares
			}
			asks := quoted(n.Unused)
			if s := suggestion(n); s != "" {
				asks = append([]string{s}, asks...)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", t(n.Node), statusText(n), memoryText(n), cpuText(n),
				strings.Join(asks, "; "), bottleneckText(tags["bridge.node."+n.Node+".bottleneck"], sh))
		}
		b.WriteString("\n")
		var differ []string
		for _, n := range rep.Nodes {
			if len(n.Differs) > 0 {
				differ = append(differ, t(n.Node)+": "+t(strings.Join(n.Differs, "; ")))
			}
		}
		if len(differ) > 0 {
			fmt.Fprintf(&b, "- **Nodes that differ:** %s\n", strings.Join(differ, " · "))
		}
	}
	if s := rep.JobLine(); s != "" {
		fmt.Fprintf(&b, "- **Energy and cost:** %s\n", t(s))
	}
	return strings.TrimRight(b.String(), "\n")
}

// statusText is a node's status and why.
func statusText(n report.Node) string {
	t := printable.MarkdownText
	s := t(n.Status)
	if n.ExitCode != nil {
		s += fmt.Sprintf(", exit %d", *n.ExitCode)
	}
	if n.Reason != "" {
		s += ": " + t(n.Reason)
		if n.Detail != "" {
			s += " (" + t(n.Detail) + ")"
		}
	}
	return s
}

// memoryText is a node's peak working set against its limit, with the
// limit the next run should have.
func memoryText(n report.Node) string {
	if n.PeakWorkingSetMB == nil {
		return ""
	}
	s := fmt.Sprintf("peak working set %.0f MB", n.PeakWorkingSetMB.Float64())
	if n.MemoryLimitMB != nil {
		s += fmt.Sprintf(" of the %.0f MB limit (%.0f%%)", n.MemoryLimitMB.Float64(), 100*n.PeakWorkingSetMB.Float64()/max(n.MemoryLimitMB.Float64(), 1e-9))
	} else {
		s += ", no limit"
	}
	if v := n.SuggestedMemoryLimitMB; v != nil {
		s += fmt.Sprintf("; next run: a limit of %.0f MB", v.Float64())
	}
	return s
}

// cpuText is a node's CPU against its limit, with the request the next run
// should make.
func cpuText(n report.Node) string {
	if n.CPUPeakCores == nil {
		return ""
	}
	s := fmt.Sprintf("peak %.2f cores", n.CPUPeakCores.Float64())
	if n.CPUPercentileCores != nil {
		s += fmt.Sprintf(", 90th percentile %.2f", n.CPUPercentileCores.Float64())
	}
	if n.CPULimitCores != nil {
		s += fmt.Sprintf(", of a %.2f-core limit", n.CPULimitCores.Float64())
	}
	if v := n.SuggestedCPUCores; v != nil {
		s += fmt.Sprintf("; next run: a request of %.3g cores", v.Float64())
	}
	return s
}

// suggestion is a node's "next run asks for".
func suggestion(n report.Node) string {
	var parts []string
	if v := n.SuggestedMemoryLimitMB; v != nil {
		parts = append(parts, fmt.Sprintf("memory %.0f MB", v.Float64()))
	}
	if v := n.SuggestedCPUCores; v != nil {
		parts = append(parts, fmt.Sprintf("CPU %.3g cores", v.Float64()))
	}
	return strings.Join(parts, ", ")
}

// bottleneckText is the bottleneck's verdict (its tag: the cause word,
// then why) and the causes' shares of the run so far.
func bottleneckText(verdict, shares string) string {
	var parts []string
	if verdict != "" {
		parts = append(parts, printable.MarkdownText(verdict))
	}
	if shares != "" {
		parts = append(parts, "shares: "+printable.MarkdownText(shares))
	}
	return strings.Join(parts, "; ")
}

func quoted(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = printable.MarkdownText(s)
	}
	return out
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// firstFailure is the job's first failure in words.
func firstFailure(rep *report.Report) string {
	if rep.FirstFailure == nil {
		return "none"
	}
	return rep.FirstFailure.Tag()
}
