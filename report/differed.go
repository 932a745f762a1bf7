package report

import (
	"slices"
	"strings"
	"time"
)

// TagDiffered holds, on a job's run, when each node differed from the job
// while it ran ("node-17 from 12:03 to 12:41; node-3 from 12:10": a span
// without its end is open, the node differs still), oldest span first, in
// UTC to the minute. The job's live evaluation (package jobrun) keeps it
// from its previous value; the report shows it (Report.Differed).
const TagDiffered = "bridge.job.differed"

// DifferedMax bounds TagDiffered, in bytes (MLflow takes 8,000 characters a
// tag): the oldest spans are cut first.
const DifferedMax = 8000

// SpanLayout is a span's times: UTC, to the minute.
const SpanLayout = "15:04"

// Span is one time a node differed from the job: From and To in
// SpanLayout, To "" while it differs still.
type Span struct {
	Node string `json:"node"`
	From string `json:"from"`
	To   string `json:"to,omitempty"`
}

// ParseSpans reads TagDiffered's value; what does not read as a span (a
// cut, another writer's text) is skipped.
func ParseSpans(v string) []Span {
	var out []Span
	for _, part := range strings.Split(v, "; ") {
		node, times, ok := strings.Cut(strings.TrimSpace(part), " from ")
		if !ok || node == "" || strings.ContainsAny(node, " ;") {
			continue
		}
		from, to, _ := strings.Cut(times, " to ")
		if !spanTime(from) || to != "" && !spanTime(to) {
			continue
		}
		out = append(out, Span{Node: node, From: from, To: to})
	}
	return out
}

func spanTime(s string) bool {
	_, err := time.Parse(SpanLayout, s)
	return err == nil
}

// String is the span as TagDiffered writes it.
func (s Span) String() string {
	if s.To == "" {
		return s.Node + " from " + s.From
	}
	return s.Node + " from " + s.From + " to " + s.To
}

// FormatSpans is TagDiffered's value of spans, oldest first, within
// DifferedMax: the oldest closed spans cut first (an open one holds when
// its node began to differ, which a later evaluation would not know), then
// the oldest open ones.
func FormatSpans(spans []Span) string {
	spans = slices.Clone(spans)
	n := -len("; ")
	for _, s := range spans {
		n += len(s.String()) + len("; ")
	}
	for _, closed := range []bool{true, false} {
		for i := 0; i < len(spans) && n > DifferedMax; {
			if (spans[i].To != "") != closed {
				i++
				continue
			}
			n -= len(spans[i].String()) + len("; ")
			spans = slices.Delete(spans, i, i+1)
		}
	}
	parts := make([]string, len(spans))
	for i, s := range spans {
		parts[i] = s.String()
	}
	return strings.Join(parts, "; ")
}
