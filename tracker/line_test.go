package tracker

import (
	"maps"
	"strings"
	"testing"
	"unicode/utf8"
)

// A state line reads back as written: bare values where they can be,
// quoted where they hold a space, a quote, an '=', a backslash, a
// character that is not graphic, or nothing.
func TestLineRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		fields []Field
		line   string
	}{
		{[]Field{{"status", "RUNNING"}, {"attempt", "0"}}, `status=RUNNING attempt=0`},
		{[]Field{{"clock", "tsc, synchronized (max error 16 ms)"}}, `clock="tsc, synchronized (max error 16 ms)"`},
		{[]Field{{"why", `a "quoted" a=b \ back`}, {"x", ""}}, `why="a \"quoted\" a=b \\ back" x=""`},
		{[]Field{{"why", "line\nbreak\x1b[2J\u202e"}}, `why="line\nbreak\x1b[2J\u202e"`},
		{[]Field{{"bad", "\xff\xfe"}}, `bad="\xff\xfe"`},
	} {
		got := FormatLine(tc.fields)
		if got != tc.line {
			t.Errorf("FormatLine(%v) = %s, want %s", tc.fields, got, tc.line)
		}
		back := ParseLine(got)
		for _, f := range tc.fields {
			if back[f.Name] != f.Value {
				t.Errorf("ParseLine(%s)[%s] = %q, want %q", got, f.Name, back[f.Name], f.Value)
			}
		}
	}
}

// What is no field is skipped, up to the next space: a garbled line loses
// those words only; a name given twice keeps its first value.
func TestParseLineGarbled(t *testing.T) {
	for line, want := range map[string]map[string]string{
		``:                             {},
		`   `:                          {},
		`word a=1 =x b=2`:              {"a": "1", "b": "2"},
		`a="unterminated b=2`:          {"b": "2"},
		`a=1 a=2`:                      {"a": "1"},
		`a="x"y b=3`:                   {"a": "x", "b": "3"},
		`näme=1 b=2`:                   {"b": "2"},
		`a=="x" b=2`:                   {"a": `="x"`, "b": "2"},
		`status=FINISHED   exit=0    `: {"status": "FINISHED", "exit": "0"},
	} {
		if got := ParseLine(line); !maps.Equal(got, want) {
			t.Errorf("ParseLine(%q) = %v, want %v", line, got, want)
		}
	}
}

// Any values, written and read back, come back; a line is one line.
func FuzzLine(f *testing.F) {
	f.Add("RUNNING", "tsc, synchronized", "")
	f.Add("a\"b", "=", "\\")
	f.Add("\n", "\xff", " ")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		fs := []Field{{"a", a}, {"b", b}, {"c", c}}
		line := FormatLine(fs)
		if strings.ContainsAny(line, "\n\r") || !utf8.ValidString(line) {
			t.Fatalf("line %q is not one line of text", line)
		}
		back := ParseLine(line)
		for _, f := range fs {
			if back[f.Name] != f.Value {
				t.Fatalf("%q: %s = %q, want %q", line, f.Name, back[f.Name], f.Value)
			}
		}
	})
}

func TestStateTag(t *testing.T) {
	if got := StateTag("node-3", ""); got != "bridge.state.node-3" {
		t.Errorf("lead: %s", got)
	}
	if got := StateTag("node-3", "task-1"); got != "bridge.state.node-3/task-1" {
		t.Errorf("task: %s", got)
	}
}
