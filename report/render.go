package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/bridge-dev/bridge/internal/printable"
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
	{"started (UTC)", func(n *Node) string { return utc(n.Started) }},
	{"ended (UTC)", func(n *Node) string { return utc(n.Ended) }},
	{"ran", func(n *Node) string {
		if n.DurationSeconds == nil {
			return ""
		}
		return summary.Duration(time.Duration(n.DurationSeconds.Float64() * float64(time.Second)))
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
	{"process tree", func(n *Node) string {
		if n.ProcessTreePeakRSSMB == nil {
			return ""
		}
		return fmt.Sprintf("peak RSS %.1f MB", n.ProcessTreePeakRSSMB.Float64())
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
	{"bottleneck", (*Node).bottleneckCell},
	{"network", func(n *Node) string { return f(n.NetworkMBps, "%.2f MB/s") }},
	{"InfiniBand", func(n *Node) string { return f(n.InfinibandMBps, "%.1f MB/s") }},
	{"samples", func(n *Node) string {
		if n.Samples == 0 {
			return ""
		}
		return fmt.Sprint(n.Samples)
	}},
	{"differs from the job", func(n *Node) string { return strings.Join(n.Differs, "; ") }},
	{"next run asks for", suggested},
	{"never used", func(n *Node) string { return strings.Join(n.Unused, "; ") }},
	{"cost", func(n *Node) string { return f(n.Cost, "%.2f") }},
}

// utc is a time of the report (timeLayout) for a table cell.
func utc(t string) string { return strings.TrimSuffix(strings.Replace(t, "T", " ", 1), "Z") }

// bottleneckCell is the node's verdict in a cell: its cause and share
// ("input 72%"); the cause of the largest share where the node recorded
// no verdict (still running, or its bridge died).
func (n *Node) bottleneckCell() string {
	cause, _, _ := strings.Cut(n.Bottleneck, ":")
	if cause == "" {
		var top float64
		for c, v := range n.BottleneckShares {
			if v != nil && (v.Float64() > top || (v.Float64() == top && c < cause)) {
				cause, top = c, v.Float64()
			}
		}
	}
	if v := n.BottleneckShares[cause]; v != nil {
		return fmt.Sprintf("%s %.0f%%", cause, 100*v.Float64())
	}
	return cause
}

// bottlenecks are the nodes' verdicts in words, one line a node that
// recorded one: "node-1: input: the 6 data-loading workers ...".
func (r *Report) bottlenecks() []string {
	var out []string
	for _, n := range r.Nodes {
		if n.Bottleneck != "" {
			out = append(out, n.Node+": "+n.Bottleneck)
		}
	}
	return out
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

// headline is the status and the first failure in one sentence, then
// what the records leave open: expected nodes that recorded nothing, a
// first-failure tag that disagrees with the nodes.
func (r *Report) headline() string {
	var b strings.Builder
	if r.Status != "" {
		b.WriteString("Status " + r.Status + "; ")
	}
	switch ff := r.firstFailureText(); {
	case r.FirstFailure != nil:
		b.WriteString("first failure: " + ff + ".")
	case ff != "none":
		b.WriteString("first failure " + ff + ".")
	default:
		b.WriteString("no node failed.")
	}
	if s := r.runningText(); s != "" {
		b.WriteString(" " + s + ".")
	}
	if s := r.missingText(); s != "" {
		b.WriteString(" " + strings.ToUpper(s[:1]) + s[1:] + ".")
	}
	if r.FailureTagDisagrees != "" {
		b.WriteString(" The run's first failure tag disagrees with the nodes: " + r.FailureTagDisagrees + ".")
	}
	h := b.String()
	return strings.ToUpper(h[:1]) + h[1:]
}

// firstFailureText is the first failure, "none" when no node failed, or
// "not known: ..." when rows failed with no end time to order them by: a
// FAILED row never stands under "no node failed".
func (r *Report) firstFailureText() string {
	if r.FirstFailure != nil {
		return r.FirstFailure.Tag()
	}
	var untimed []string
	for _, n := range r.Nodes {
		if failedStatus(n.Status) {
			untimed = append(untimed, n.Node+" "+n.Status)
		}
	}
	if len(untimed) == 0 {
		return "none"
	}
	return "not known: " + strings.Join(untimed, ", ") + " with no end time recorded"
}

// runningText says, of a job still running, how many of its nodes have
// not ended; "" for a job that ended, or none running.
func (r *Report) runningText() string {
	if r.Status != statusRunning {
		return ""
	}
	n := 0
	for _, nd := range r.Nodes {
		if nd.Status == statusRunning {
			n++
		}
	}
	switch n {
	case 0:
		return ""
	case 1:
		return "1 node still running"
	}
	return fmt.Sprintf("%d nodes still running", n)
}

// missingText says how many of the nodes the job expected recorded
// nothing: of a job still running, that more nodes are expected; "" when
// none is missing.
func (r *Report) missingText() string {
	if r.MissingNodes == 0 {
		return ""
	}
	var ids []string
	for _, n := range r.Nodes {
		if n.Status == StatusMissing {
			ids = append(ids, n.Node)
		}
	}
	s := fmt.Sprintf("%d of the %d nodes the job expected (%s) recorded nothing", r.MissingNodes, r.ExpectedNodes, TagNodes)
	if r.Status == statusRunning {
		have := "have"
		if r.MissingNodes == 1 {
			have = "has"
		}
		s = fmt.Sprintf("more nodes are expected: %d of the %d (%s) %s recorded nothing yet", r.MissingNodes, r.ExpectedNodes, TagNodes, have)
	}
	if len(ids) > 0 {
		s += ": " + strings.Join(ids, ", ")
	}
	return s
}

// Markdown writes the report as the run's bridge-report.md. Every value
// read from the run is a cell's text (printable.Markdown).
func (r *Report) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# bridge report: run %s\n\n", printable.Markdown(r.Run))
	fmt.Fprintf(&b, "**Status:** %s  \n**First failure:** %s\n\n", printable.Markdown(r.Status), printable.Markdown(r.firstFailureText()))
	if s := r.missingText(); s != "" {
		b.WriteString("**Missing:** " + printable.Markdown(s) + "\n\n")
	}
	if r.FailureTagDisagrees != "" {
		b.WriteString("**The first failure tag disagrees with the nodes:** " + printable.Markdown(r.FailureTagDisagrees) + "\n\n")
	}
	if s := r.JobLine(); s != "" {
		b.WriteString("**Energy and cost:** " + s + "\n\n")
	}
	if s := r.differedText(); s != "" {
		b.WriteString("**Differed from the job** (UTC): " + printable.Markdown(s) + "\n\n")
	}
	heads, cells := r.table()
	b.WriteString("| " + strings.Join(heads, " | ") + " |\n|")
	for range heads {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, row := range cells {
		for i := range row {
			row[i] = printable.Markdown(row[i])
		}
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	if bs := r.bottlenecks(); len(bs) > 0 {
		b.WriteString("\n**Bottleneck** (docs/metrics.md, The bottleneck):\n\n")
		for _, l := range bs {
			b.WriteString("- " + printable.Markdown(l) + "\n")
		}
	}
	if f := r.footnote(); f != "" {
		b.WriteString("\n" + f + "\n")
	}
	for _, n := range r.Notes {
		b.WriteString("\n- " + printable.Markdown(n))
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// differedText is when each node differed from the job, "" for none.
func (r *Report) differedText() string {
	parts := make([]string, len(r.Differed))
	for i, s := range r.Differed {
		parts[i] = s.String()
	}
	return strings.Join(parts, "; ")
}

// footnote says how a job's nodes are read against each other; "" for a
// run of one node, which has none to compare.
func (r *Report) footnote() string {
	if !r.multi {
		return ""
	}
	return fmt.Sprintf("Each node's end time is its own clock's; the clocks are assumed NTP-close. A node stopped (SIGTERM, SIGKILL) within %.0f minutes after the first failure is its consequence. Differs from the job: %s.",
		ConsequenceWindow.Minutes(), DiffersRule)
}

// Text writes the report as `bridge report` prints it, for a terminal:
// every value read from the run on one line, its control characters
// escaped (printable.Line).
func (r *Report) Text(w io.Writer) error {
	fmt.Fprintf(w, "run %s\n%s\n", printable.Line(r.Run), printable.Line(r.headline()))
	if s := r.JobLine(); s != "" {
		fmt.Fprintf(w, "%s\n", s)
	}
	if s := r.differedText(); s != "" {
		fmt.Fprintf(w, "differed from the job (UTC): %s\n", printable.Line(s))
	}
	fmt.Fprintln(w)
	heads, cells := r.table()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(heads, "\t"))
	for _, row := range cells {
		for i := range row {
			row[i] = printable.Line(row[i])
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range r.bottlenecks() {
		fmt.Fprintf(w, "bottleneck %s\n", printable.Line(l))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", printable.Line(n))
	}
	if f := r.footnote(); f != "" {
		_, err := fmt.Fprintf(w, "\n%s\n", f)
		return err
	}
	return nil
}

// JSON is the report as `bridge report --json` prints it and the run's
// bridge-report.json holds.
// Its text is as read ("->", "<", "&" themselves: it is no HTML page).
func (r *Report) JSON() []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		// Cannot happen: every field is a string, an int, a finite
		// metrics.Float or a list of them. Said, never a panic.
		b.Reset()
		enc.SetIndent("", "")
		enc.Encode(map[string]string{"run": r.Run, "error": "the report could not be encoded: " + err.Error()})
	}
	return b.Bytes()
}

// SummaryMax is the longest Summary, in characters (code points): the
// longest tag value MLflow takes.
const SummaryMax = 8000

// Summary is the report in a tag's few lines (TagReportSummary), where the
// tracker takes no artifacts: the headline, then one line a node, each
// value on its line (printable.Line). Over SummaryMax it keeps the lines
// that fit, whole, and says how many it left out.
func (r *Report) Summary() string {
	lines := []string{printable.Line(r.headline())}
	if s := r.JobLine(); s != "" {
		lines = append(lines, s)
	}
	heads, cells := r.table()
	for _, row := range cells {
		var parts []string
		for i, c := range row {
			if i == 0 || c == "" {
				continue
			}
			parts = append(parts, heads[i]+" "+printable.Line(c))
		}
		lines = append(lines, printable.Line(row[0])+": "+strings.Join(parts, "; "))
	}
	return within(lines, SummaryMax, printable.Line(r.Run))
}

// within is lines, each ended by a newline, in at most max characters:
// the lines that fit, whole (a first line too long alone is cut), then
// "... N more lines" and where to read them.
func within(lines []string, max int, run string) string {
	total := 0
	for _, l := range lines {
		total += utf8.RuneCountInString(l) + 1
	}
	if total <= max {
		return strings.Join(lines, "\n") + "\n"
	}
	more := func(n int) string {
		return fmt.Sprintf("... %d more lines (bridge report %s shows them all)\n", n, run)
	}
	var b strings.Builder
	used := 0
	for i, l := range lines {
		room := max - used - len(more(len(lines)-i-1)) // bytes: at least its characters
		if n := utf8.RuneCountInString(l) + 1; n > room {
			if i > 0 || room < 4 {
				b.WriteString(more(len(lines) - i))
				break
			}
			l = printable.Clip(l, room-1) // as many bytes are at least as many characters
		}
		b.WriteString(l + "\n")
		used += utf8.RuneCountInString(l) + 1
	}
	return b.String()
}
