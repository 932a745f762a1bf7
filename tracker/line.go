package tracker

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// A multi-node job's run holds one state line a bridge of the job
// (docs/multinode.md, "The job's run"): the tag TagStatePrefix+<node>
// (StateTag), whose value is fields name=value separated by one space.
// A value that is empty or holds a space, a quote, an '=' or a character
// that is not graphic is written as a Go string literal ("..."), so a
// line is one line of text whatever its values. The line is the node's
// whole record on the job's run: its status while it runs and its end
// (package report names its fields), so that the job's end, its first
// failure and its report come from one read of the job's run, whatever
// the number of nodes, never from other nodes' series.

// TagStatePrefix prefixes the tag of a node's state line.
const TagStatePrefix = "bridge.state."

// Fields of a state line that a tracker adapter writes itself (the rest
// are the report's, package report).
const (
	// LineWho comes first: MLflow's Tags panel cuts a long tag's name,
	// and a line whose value begins with its node reads on its own.
	LineWho     = "who"     // the bridge: <node>, or <node>.<task>
	LineStatus  = "status"  // RUNNING, or the bridge's end: FINISHED, FAILED, KILLED
	LineAttempt = "attempt" // the launcher's restart count
	LineStarted = "started" // when this attempt started, ms since 1970
	LineAt      = "at"      // when the line was written, ms since 1970
	LineRun     = "run"     // the node's own run, where its series are
)

// StateTag is the tag of the state line of a bridge of a multi-node job:
// bridge.state.<node>, or bridge.state.<node>/<task> for a further bridge
// of the node (a node id holds no '/').
func StateTag(node, task string) string {
	if task == "" {
		return TagStatePrefix + node
	}
	return TagStatePrefix + node + "/" + task
}

// Field is one name=value of a state line.
type Field struct{ Name, Value string }

// FormatLine writes fields as a state line, in their order. A name is
// taken as it is: callers use fixed names of letters, digits and '_'.
func FormatLine(fields []Field) string {
	var b strings.Builder
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f.Name)
		b.WriteByte('=')
		if bare(f.Value) {
			b.WriteString(f.Value)
		} else {
			b.WriteString(strconv.Quote(f.Value))
		}
	}
	return b.String()
}

// bare reports whether v can be written without quotes.
func bare(v string) bool {
	if v == "" || !utf8.ValidString(v) {
		return false
	}
	for _, r := range v {
		if r == ' ' || r == '"' || r == '=' || r == '\\' || !strconv.IsGraphic(r) {
			return false
		}
	}
	return true
}

// ParseLine reads a state line back, in one pass over it: the fields by
// name (a name given twice keeps its first value). What is not a field
// (a word without '=', a quote that does not end) is skipped up to the
// next space: a line another writer garbled loses those words only.
func ParseLine(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		if s[0] == ' ' {
			s = s[1:]
			continue
		}
		name, rest, ok := cutName(s)
		if !ok {
			s = skipWord(s)
			continue
		}
		var value string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				s = skipWord(rest)
				continue
			}
			value, _ = strconv.Unquote(q) // QuotedPrefix found a valid literal
			rest = rest[len(q):]
		} else {
			value, rest, _ = strings.Cut(rest, " ")
			rest = " " + rest
		}
		if _, seen := out[name]; !seen {
			out[name] = value
		}
		s = rest
	}
	return out
}

// cutName reads "name=" at the start of s: a name of letters, digits and
// '_'.
func cutName(s string) (name, rest string, ok bool) {
	i := 0
	for i < len(s) && (s[i] == '_' || s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z' || s[i] >= '0' && s[i] <= '9') {
		i++
	}
	if i == 0 || i >= len(s) || s[i] != '=' {
		return "", s, false
	}
	return s[:i], s[i+1:], true
}

// skipWord drops s up to its next space.
func skipWord(s string) string {
	if i := strings.IndexByte(s, ' '); i >= 0 {
		return s[i:]
	}
	return ""
}
