package printable

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Clip is s when it is at most n bytes long, else its longest prefix of
// whole runes that leaves room for "..." within n bytes, followed by
// "...". n is at least 3. A tracker rejects, or mangles, a value that is
// not valid UTF-8: a cut never falls inside a character.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// Quote is another tool's value (a variable's) for a message: quoted and
// escaped as Go quotes it, its first 80 bytes and its length when it is
// longer.
func Quote(s string) string {
	if len(s) > 80 {
		return strconv.Quote(s[:80]) + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}
