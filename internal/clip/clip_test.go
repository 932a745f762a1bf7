package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBytes(t *testing.T) {
	if got := Bytes("short", 10); got != "short" {
		t.Errorf("Bytes(short) = %q", got)
	}
	if got := Bytes(strings.Repeat("a", 20), 10); got != "aaaaaaa..." {
		t.Errorf("Bytes(ascii) = %q, want 7 bytes and ...", got)
	}
	// "é" is 2 bytes, "日" 3: no cut falls inside one, whatever the limit.
	for _, s := range []string{strings.Repeat("é", 50), strings.Repeat("日本", 30), "a" + strings.Repeat("日", 40)} {
		for n := 3; n < len(s); n++ {
			got := Bytes(s, n)
			if len(got) > n || !utf8.ValidString(got) || !strings.HasSuffix(got, "...") || !strings.HasPrefix(s, strings.TrimSuffix(got, "...")) {
				t.Fatalf("Bytes(%q, %d) = %q: over the limit, invalid UTF-8, or not a prefix", s, n, got)
			}
			if len(got) < n-3 {
				t.Fatalf("Bytes(%q, %d) = %q: cut more than a rune short", s, n, got)
			}
		}
	}
}
