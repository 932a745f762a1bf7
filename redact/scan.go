package redact

import "strings"

// separators: a name starts at the beginning of the text or right after one
// of these (whitespace, JSON and YAML punctuation, query-string and
// connection-string separators, an assignment, a quote).
const separators = " \t\r\n{[(,;&?#=\"'"

// schemes are HTTP authentication schemes: a header value that is only a
// scheme ("Authorization: Bearer") leaves its credentials to the next
// argument.
var schemes = map[string]bool{
	"bearer": true, "basic": true, "token": true, "digest": true, "negotiate": true, "ntlm": true, "bot": true, "apikey": true,
}

// userFlags take USER:PASSWORD (curl -u, --user, --proxy-user, -U; wget
// --user): the text after the first ':' is the password.
var userFlags = map[string]bool{"-u": true, "-U": true, "--user": true, "--proxy-user": true}

// follow says what of the next argument is secret.
type follow int

const (
	followNone     follow = iota
	followWhole           // --token VALUE: all of it
	followPassword        // -u USER:PASSWORD: after the first ':'
)

// key is a name followed by what introduces its value.
type key struct {
	start    int    // first byte: the name, its quote or its dashes
	name     string // with any leading dashes
	quoted   bool   // "name" or 'name' (JSON, YAML)
	sep      byte   // '=', ':' or ' ' (a flag followed by its value)
	valStart int    // first byte after the separator
}

func isNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '-' || c == '.' || c == '+' || c == '~'
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// scan hides the values of secret-looking names in s (one argument, or any
// text) and the passwords of user flags, and reports what of the next
// argument is secret when s ends with such a name.
func scan(s string) (string, follow) {
	var b strings.Builder
	depth := 0         // open '{' and '[' outside values: YAML/JSON flow context
	written := 0       // s[:written] is in b
	next := followNone // what the last name leaves to the next argument
	hide := func(from, to int) {
		if to > from {
			b.WriteString(s[written:from])
			b.WriteString(Mask)
			written = to
		}
	}
	for i := 0; i < len(s); {
		if i == 0 || strings.IndexByte(separators, s[i-1]) >= 0 {
			k, ok := matchKey(s, i)
			switch {
			case ok && SecretName(k.name):
				from, to, nxt := value(s, k, depth)
				hide(from, to)
				next = followNone
				if nxt {
					next = followWhole
				}
				i = max(to, k.valStart)
				continue
			case ok && userFlags[k.name] && k.sep != ':':
				from, to, nxt := value(s, k, depth)
				if c := strings.IndexByte(s[from:to], ':'); c >= 0 {
					hide(from+c+1, to)
				}
				next = followNone
				if nxt {
					next = followPassword
				}
				i = max(to, k.valStart)
				continue
			}
		}
		switch s[i] {
		case '{', '[':
			depth++
		case '}', ']':
			depth = max(depth-1, 0)
		}
		i++
	}
	if written == 0 {
		return s, next
	}
	b.WriteString(s[written:])
	return b.String(), next
}

// matchKey reads a name at s[i:] and what follows it: '=' or ':', or, for
// a flag (-NAME or --NAME starting a word), whitespace or the end of s. A
// URL's scheme matches too ("token://x" hides "//x"): hiding a value that
// was a URL costs less than leaking one that looked like one.
func matchKey(s string, i int) (key, bool) {
	k := key{start: i}
	j := i
	var quote byte
	if s[j] == '"' || s[j] == '\'' {
		quote, k.quoted = s[j], true
		j++
	}
	ns := j
	for j < len(s) && isNameChar(s[j]) {
		j++
	}
	k.name = s[ns:j]
	if strings.Trim(k.name, "-+~") == "" {
		return k, false
	}
	if quote != 0 {
		if j >= len(s) || s[j] != quote {
			return k, false
		}
		j++
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
	}
	if j == len(s) || isSpace(s[j]) {
		flag := !k.quoted && k.name[0] == '-' && (i == 0 || isSpace(s[i-1]))
		k.sep, k.valStart = ' ', j
		return k, flag
	}
	if s[j] != '=' && s[j] != ':' {
		return k, false
	}
	k.sep, k.valStart = s[j], j+1
	return k, true
}

// value finds the value of k: the span [from, to) to hide, and whether the
// value is the next argument instead.
func value(s string, k key, depth int) (from, to int, next bool) {
	v := k.valStart
	skip := func(set string) {
		for v < len(s) && strings.IndexByte(set, s[v]) >= 0 {
			v++
		}
	}
	switch k.sep {
	case ' ':
		skip(" \t\r\n")
		if v == len(s) {
			return v, v, true // --token as the last word: the next argument
		}
	case ':':
		if k.quoted {
			skip(" \t\r\n")
		} else {
			skip(" \t")
		}
		if v == len(s) {
			return v, v, true // "Authorization:": the next argument
		}
		if s[v] == '\r' || s[v] == '\n' {
			return v, v, false // a YAML mapping follows: its own names are scanned
		}
	case '=':
		if k.start == 0 {
			return v, len(s), false // --NAME=VALUE, NAME=VALUE: the rest of the argument
		}
	}
	if v == len(s) {
		return v, v, false
	}
	switch c := s[v]; {
	case c == '"' || c == '\'':
		return v + 1, closeQuote(s, v), false
	case (c == '{' || c == '[') && k.sep != ' ':
		return v, closeBracket(s, v), false
	}
	end := v
	stop := func(set string) {
		for end < len(s) && strings.IndexByte(set, s[end]) < 0 {
			end++
		}
	}
	switch k.sep {
	case '=':
		stop(" \t\r\n;&,\"'}])#")
	case ' ':
		stop(" \t\r\n")
	default: // ':': a header or YAML value runs to the end of its line
		if depth > 0 {
			stop("\r\n,}]")
		} else {
			stop("\r\n")
		}
	}
	// A name that follows a quote (a header inside a `sh -c` string) has
	// its value end at that quote.
	if k.start > 0 && !k.quoted && (s[k.start-1] == '"' || s[k.start-1] == '\'') {
		if q := strings.IndexByte(s[v:end], s[k.start-1]); q >= 0 {
			end = v + q
		}
	}
	next = k.sep == ':' && end == len(s) && schemes[strings.ToLower(strings.TrimSpace(s[v:end]))]
	return v, end, next
}

// closeQuote returns the index of the quote closing the one at s[i] (a
// backslash escapes inside double quotes), or len(s).
func closeQuote(s string, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q == '"':
			j++
		case s[j] == q:
			return j
		}
	}
	return len(s)
}

// closeBracket returns the index just past the bracket closing the one at
// s[i], skipping quoted strings, or len(s).
func closeBracket(s string, i int) int {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return j + 1
			}
		case '"', '\'':
			j = closeQuote(s, j)
		}
	}
	return len(s)
}
