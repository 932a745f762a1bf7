// Package printable renders text bridge did not write (tag values, node
// ids, commands, a server's error body) so that it shows as text: in a
// terminal it cannot move the cursor, set the title, clear the screen or
// reorder what follows, and in a table it stays in its cell, on one line.
//
// The rule, one for every renderer: a rune that is not graphic (Go's
// unicode.IsGraphic: letters, marks, numbers, punctuation, symbols and
// spaces) is written as a Go escape: \n, \r and \t, \xNN for the other C0
// controls, DEL and a byte that is not UTF-8, \u00NN for the C1 controls,
// \uNNNN (\UNNNNNNNN past U+FFFF) for format characters (the bidi
// overrides and isolates, zero width ones), line and paragraph separators,
// private and unassigned code points. Everything else is kept as it is,
// backslashes included.
package printable

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Line is s on one line, each rune that is not graphic escaped.
func Line(s string) string {
	i := unsafeAt(s)
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if shown(r, n) {
			b.WriteString(s[i : i+n])
		} else {
			escape(&b, r, s[i])
		}
		i += n
	}
	return b.String()
}

// Markdown is s as the text of a Markdown table cell (GitHub's, MLflow's
// artifact view): Line, then a backslash and '|' escaped with a
// backslash, and '<' and '&' as HTML entities, so that nothing ends the
// cell or the row, and no HTML (a comment that hides the rest, a tag) is
// made of it.
func Markdown(s string) string {
	s = Line(s)
	if !strings.ContainsAny(s, `\|<&`) {
		return s
	}
	return mdReplacer.Replace(s)
}

var mdReplacer = strings.NewReplacer(`\`, `\\`, `|`, `\|`, `<`, `&lt;`, `&`, `&amp;`)

// JSON is a JSON document (encoding/json's, which escapes the C0 controls
// but writes the C1 controls, DEL and the bidi characters as they are)
// with every rune that is not graphic, outside the JSON's own whitespace,
// written as a \uNNNN escape: the same document, safe in a terminal.
func JSON(b []byte) []byte {
	i := 0
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		if !shown(r, n) && !jsonSpace(r) {
			break
		}
		i += n
	}
	if i == len(b) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	out = append(out, b[:i]...)
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case shown(r, n) || jsonSpace(r):
			out = append(out, b[i:i+n]...)
		case r == utf8.RuneError && n == 1:
			out = append(out, `\ufffd`...) // encoding/json writes none; kept valid JSON
		default:
			out = appendU(out, r)
		}
		i += n
	}
	return out
}

// jsonSpace is JSON's whitespace between tokens (inside a string
// encoding/json has escaped it already).
func jsonSpace(r rune) bool { return r == '\n' || r == '\t' || r == '\r' }

// unsafeAt is the index of the first rune of s that Line escapes, len(s)
// if none.
func unsafeAt(s string) int {
	for i := 0; i < len(s); {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if !shown(r, n) {
			return i
		}
		i += n
	}
	return len(s)
}

// shown reports whether rune r, n bytes long in its text, is written as it
// is.
func shown(r rune, n int) bool {
	if r == utf8.RuneError && n == 1 {
		return false // a byte that is not UTF-8
	}
	return unicode.IsGraphic(r)
}

// escape writes r as Go writes it in a quoted string; r is
// utf8.RuneError for a byte c that is not UTF-8.
func escape(b *strings.Builder, r rune, c byte) {
	switch {
	case r == '\n':
		b.WriteString(`\n`)
	case r == '\r':
		b.WriteString(`\r`)
	case r == '\t':
		b.WriteString(`\t`)
	case r == utf8.RuneError:
		b.WriteString(`\x` + hex(uint32(c), 2))
	case r < 0x80:
		b.WriteString(`\x` + hex(uint32(r), 2))
	case r <= 0xffff:
		b.WriteString(`\u` + hex(uint32(r), 4))
	default:
		b.WriteString(`\U` + hex(uint32(r), 8))
	}
}

// hex is v in lowercase hexadecimal, at least digits long.
func hex(v uint32, digits int) string {
	s := strconv.FormatUint(uint64(v), 16)
	return strings.Repeat("0", max(digits-len(s), 0)) + s
}

// appendU appends r as JSON's \uNNNN escape (a surrogate pair past the
// BMP).
func appendU(out []byte, r rune) []byte {
	if r > 0xffff {
		r -= 0x10000
		out = appendU(out, 0xd800+(r>>10))
		return appendU(out, 0xdc00+(r&0x3ff))
	}
	return append(out, `\u`+hex(uint32(r), 4)...)
}
