package printable

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestLine(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain", "node-1: cgroup_oom_kill at 2026-12-06", "node-1: cgroup_oom_kill at 2026-12-06"},
		{"empty", "", ""},
		{"letters of every script", "日本 é ß Ω", "日本 é ß Ω"},
		{"a backslash stays", `C:\x1b is text`, `C:\x1b is text`},
		{"title and clear screen", "\x1b]0;pwned\x07\x1b[2J", `\x1b]0;pwned\x07\x1b[2J`},
		{"newline, CR, tab", "a\nb\rc\td", `a\nb\rc\td`},
		{"NUL and DEL", "a\x00b\x7f", `a\x00b\x7f`},
		{"C1 CSI", "a\u009b31mb", `a\u009b31mb`},
		{"bidi override and isolate", "abc\u202edcba\u2066x\u2069", `abc\u202edcba\u2066x\u2069`},
		{"zero width and line separator", "a\u200bb\u2028c", `a\u200bb\u2028c`},
		{"tag character past the BMP", "a\U000E0041b", `a\U000e0041b`},
		{"bytes that are not UTF-8", "a\xff\xfeb", `a\xff\xfeb`},
		{"a cut rune", "ab\xe6\x97", `ab\xe6\x97`},
		{"U+FFFD itself is text", "a\ufffdb", "a\ufffdb"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Line(tc.in); got != tc.want {
				t.Errorf("Line(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestMarkdown(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain", "node-1 KILLED", "node-1 KILLED"},
		{"a pipe", "a|b", `a\|b`},
		{"an escaped pipe stays escaped", `a\|b`, `a\\\|b`},
		{"newline", "row\n| forged | row |", `row\\n\| forged \| row \|`},
		{"HTML", "<!-- hides the rest", "&lt;!-- hides the rest"},
		{"an entity stays text", "&lt;b&gt;", "&amp;lt;b&amp;gt;"},
		{"control", "\x1b[2J", `\\x1b[2J`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Markdown(tc.in); got != tc.want {
				t.Errorf("Markdown(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// Whatever the text, Line's result has only graphic runes (so no control,
// no line break), and Markdown's no unescaped '|': every rune of the BMP,
// and a spread of those past it (every plane's first and last).
func TestEveryRune(t *testing.T) {
	var all strings.Builder
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if (r >= 0xd800 && r <= 0xdfff) || (r > 0xffff && r%97 != 0 && r&0xffff > 1 && r&0xffff < 0xfffe) {
			continue
		}
		all.WriteRune(r)
	}
	all.WriteString("\xff\xc0\x80")
	got := Line(all.String())
	for i, r := range got {
		if !unicode.IsGraphic(r) || (r == utf8.RuneError && !strings.HasPrefix(got[i:], "\ufffd")) {
			t.Fatalf("Line left %U at byte %d", r, i)
		}
	}
	md := Markdown(all.String())
	for i := 0; i < len(md); i++ {
		if md[i] != '|' {
			continue
		}
		slashes := 0
		for j := i - 1; j >= 0 && md[j] == '\\'; j-- {
			slashes++
		}
		if slashes%2 == 0 {
			t.Fatalf("Markdown left an unescaped | at byte %d: %q", i, md[max(i-8, 0):i+1])
		}
	}
}

func TestJSON(t *testing.T) {
	in := map[string]string{"v": "\x1b]0;t\x07 \u009b2J \u202e \x7f \U000E0041 ok é\n", "w": "plain"}
	raw, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got := JSON(raw)
	for i, r := range string(got) {
		if !unicode.IsGraphic(r) && r != '\n' {
			t.Fatalf("JSON left %U at byte %d:\n%s", r, i, got)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, got)
	}
	if back["v"] != in["v"] || back["w"] != in["w"] {
		t.Errorf("JSON changed the values: %q", back)
	}
	plain := []byte(`{"a": "b"}`)
	if g := JSON(plain); &g[0] != &plain[0] {
		t.Error("JSON copied a document that needs nothing")
	}
}
