package printable

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClip(t *testing.T) {
	if got := Clip("short", 10); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
	if got := Clip(strings.Repeat("a", 20), 10); got != "aaaaaaa..." {
		t.Errorf("Clip(ascii) = %q, want 7 bytes and ...", got)
	}
	// "é" is 2 bytes, "日" 3: no cut falls inside one, whatever the limit.
	for _, s := range []string{strings.Repeat("é", 50), strings.Repeat("日本", 30), "a" + strings.Repeat("日", 40)} {
		for n := 3; n < len(s); n++ {
			got := Clip(s, n)
			if len(got) > n || !utf8.ValidString(got) || !strings.HasSuffix(got, "...") || !strings.HasPrefix(s, strings.TrimSuffix(got, "...")) {
				t.Fatalf("Clip(%q, %d) = %q: over the limit, invalid UTF-8, or not a prefix", s, n, got)
			}
			if len(got) < n-3 {
				t.Fatalf("Clip(%q, %d) = %q: cut more than a rune short", s, n, got)
			}
		}
	}
}

func TestQuote(t *testing.T) {
	if got := Quote("a\"b\x1b"); got != `"a\"b\x1b"` {
		t.Errorf("Quote = %s, want Go's quoting", got)
	}
	long := strings.Repeat("x", 100)
	if got, want := Quote(long), `"`+long[:80]+`"... (100 bytes)`; got != want {
		t.Errorf("Quote(100 bytes) = %s, want %s", got, want)
	}
}
