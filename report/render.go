package report

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/summary"
)

// column is one column of the table: its header and each row's cell.
type column struct {
	head string
	cell func(*Node) string
}

var columns = []column{
	{"node", func(n *Node) string { return n.Node }},
	{"status", func(n *Node) string { return n.Status }},
	{"exit", func(n *Node) string {
		if n.ExitCode == nil {
			return ""
		}
		return fmt.Sprint(*n.ExitCode)
	}},
	{"reason", func(n *Node) string { return n.Reason }},
	{"consequence", func(n *Node) string { return n.Consequence }},
	{"ended (UTC)", func(n *Node) string {
		return strings.TrimSuffix(strings.Replace(n.Ended, "T", " ", 1), "Z")
	}},
	{"clock", func(n *Node) string { return n.EndedClock }},
	{"working set", func(n *Node) string {
		s := of(n.PeakWorkingSetMB, n.MemoryLimitMB, "%.1f", "MB")
		if s == "" {
			return ""
		}
		if strings.HasPrefix(n.PeakWorkingSetSource, summary.SourceKernelPeak) {
			return "peak " + s + " (the kernel's)"
		}
		return "peak " + s
	}},
	{"CPU", func(n *Node) string {
		if n.CPUMeanCores == nil {
			return ""
		}
		return fmt.Sprintf("mean %.2f, peak %s", n.CPUMeanCores.Float64(), of(n.CPUPeakCores, n.CPULimitCores, "%.2f", "cores"))
	}},
	{"throttled", func(n *Node) string { return f(n.ThrottledSharePercent, "%.1f%%") }},
	{"GPU util", func(n *Node) string { return f(n.GPUUtilizationPercent, "%.0f%%") }},
	{"SM active", func(n *Node) string {
		if n.GPUSMActiveRatio == nil {
			return ""
		}
		return fmt.Sprintf("%.0f%%", 100*n.GPUSMActiveRatio.Float64())
	}},
	{"energy", func(n *Node) string {
		var parts []string
		if v := n.GPUEnergyJoules; v != nil {
			parts = append(parts, "GPUs "+joules(v.Float64()))
		}
		if v := n.NodeCPUEnergyJoules; v != nil {
			parts = append(parts, "CPUs "+joules(v.Float64()))
		}
		return strings.Join(parts, ", ")
	}},
	{"network", func(n *Node) string { return f(n.NetworkMBps, "%.2f MB/s") }},
	{"InfiniBand", func(n *Node) string { return f(n.InfinibandMBps, "%.1f MB/s") }},
	{"samples", func(n *Node) string {
		if n.Samples == 0 {
			return ""
		}
		return fmt.Sprint(n.Samples)
	}},
	{"differs from the job", func(n *Node) string { return strings.Join(n.Differs, "; ") }},
}

func f(v *metrics.Float, format string) string {
	if v == nil {
		return ""
	}
	return fmt.Sprintf(format, v.Float64())
}

// of is "v of limit unit", or "v unit" without a limit.
func of(v, limit *metrics.Float, format, unit string) string {
	if v == nil {
		return ""
	}
	s := fmt.Sprintf(format, v.Float64())
	if limit != nil {
		return s + " of " + fmt.Sprintf(format, limit.Float64()) + " " + unit
	}
	return s + " " + unit
}

func joules(j float64) string {
	switch {
	case j >= 1e6:
		return fmt.Sprintf("%.2f MJ", j/1e6)
	case j >= 1e3:
		return fmt.Sprintf("%.1f kJ", j/1e3)
	}
	return fmt.Sprintf("%.0f J", j)
}

// table is the report's columns that have a value in some row, and the
// cells.
func (r *Report) table() (heads []string, cells [][]string) {
	var used []column
	for _, c := range columns {
		for i := range r.Nodes {
			if c.cell(&r.Nodes[i]) != "" {
				used = append(used, c)
				break
			}
		}
	}
	for _, c := range used {
		heads = append(heads, c.head)
	}
	for i := range r.Nodes {
		row := make([]string, len(used))
		for j, c := range used {
			row[j] = c.cell(&r.Nodes[i])
		}
		cells = append(cells, row)
	}
	return heads, cells
}

// headline is the status and the first failure, in one sentence.
func (r *Report) headline() string {
	ff := "no node failed"
	if r.FirstFailure != nil {
		ff = "first failure: " + r.FirstFailure.Tag()
	}
	if r.Status == "" {
		return strings.ToUpper(ff[:1]) + ff[1:] + "."
	}
	return "Status " + r.Status + "; " + ff + "."
}

// Markdown writes the report as the run's bridge-report.md.
func (r *Report) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# bridge report: run %s\n\n", r.Run)
	fmt.Fprintf(&b, "**Status:** %s  \n**First failure:** ", r.Status)
	if r.FirstFailure != nil {
		b.WriteString(mdEscape(r.FirstFailure.Tag()) + "\n\n")
	} else {
		b.WriteString("none\n\n")
	}
	heads, cells := r.table()
	b.WriteString("| " + strings.Join(heads, " | ") + " |\n|")
	for range heads {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, row := range cells {
		for i := range row {
			row[i] = mdEscape(row[i])
		}
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	b.WriteString("\n" + r.footnote() + "\n")
	for _, n := range r.Notes {
		b.WriteString("\n- " + mdEscape(n))
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) footnote() string {
	return fmt.Sprintf("Each node's end time is its own clock's; the clocks are assumed NTP-close. A node stopped (SIGTERM, SIGKILL) within %.0f minutes after the first failure is its consequence. Differs from the job: %s.",
		ConsequenceWindow.Minutes(), DiffersRule)
}

// mdEscape keeps a cell's text from breaking the table.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// Text writes the report as `bridge report` prints it.
func (r *Report) Text(w io.Writer) error {
	fmt.Fprintf(w, "run %s\n%s\n\n", r.Run, r.headline())
	heads, cells := r.table()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(heads, "\t"))
	for _, row := range cells {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	_, err := fmt.Fprintf(w, "\n%s\n", r.footnote())
	return err
}

// JSON is the report as `bridge report --json` prints it and the run's
// bridge-report.json holds.
func (r *Report) JSON() []byte {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		// Cannot happen: every field is a string, an int, a finite
		// metrics.Float or a list of them. Said, never a panic.
		b, _ = json.Marshal(map[string]string{"run": r.Run, "error": "the report could not be encoded: " + err.Error()})
	}
	return append(b, '\n')
}

// Summary is the report in a tag's few lines (TagReportSummary), where the
// tracker takes no artifacts: the headline, then one line a node.
func (r *Report) Summary() string {
	var b strings.Builder
	b.WriteString(r.headline() + "\n")
	heads, cells := r.table()
	for _, row := range cells {
		var parts []string
		for i, c := range row {
			if i == 0 || c == "" {
				continue
			}
			parts = append(parts, heads[i]+" "+c)
		}
		fmt.Fprintf(&b, "%s: %s\n", row[0], strings.Join(parts, "; "))
	}
	return b.String()
}
