// Package clip shortens tag values to a length limit in bytes without
// cutting a character in two: a tracker rejects, or mangles, a value that
// is not valid UTF-8.
package clip

import "unicode/utf8"

// Bytes is s when it is at most n bytes long, else its longest prefix of
// whole runes that leaves room for "..." within n bytes, followed by
// "...". n is at least 3.
func Bytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
