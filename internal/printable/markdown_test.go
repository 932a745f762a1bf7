package printable

import "testing"

// Text bridge did not write keeps its characters in a line of Markdown:
// none of them formats it, ends a table cell or makes HTML, and it stays
// on one line.
func TestMarkdownText(t *testing.T) {
	for in, want := range map[string]string{
		"node-1":                     "node-1",
		"gpu_compute: *idle* [x](y)": `gpu\_compute: \*idle\* \[x\](y)`,
		"a|b <!-- c --> & `d` ~e~ !": `a\|b &lt;\!-- c --> &amp; \` + "`d\\`" + ` \~e\~ \!`,
		"two\nlines\\":               `two\\nlines\\`,
	} {
		if got := MarkdownText(in); got != want {
			t.Errorf("MarkdownText(%q) = %q, want %q", in, got, want)
		}
	}
}
