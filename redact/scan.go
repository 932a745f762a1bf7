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
	sep      byte   // '=', ':', ' ' (a flag and its value) or ',' (["--token", "S"])
	spaced   bool   // whitespace before '=' or ':' (TOML, INI: name = value)
	valStart int    // first byte after the separator
}

// envNames name an entry whose value is given by a sibling "value" key
// (Kubernetes and ECS env lists: - name: HF_TOKEN / value: S).
var envNames = map[string]bool{"name": true, "key": true, "variable": true}

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
	pending := false   // an entry named by a secret-looking name: its "value" is secret
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
			case ok && (SecretName(k.name) || pending && strings.EqualFold(k.name, "value") && k.sep != ' '):
				from, to, nxt := value(s, k, depth)
				pending = envNames[strings.ToLower(k.name)] && SecretName(strings.Trim(s[from:to], " \t\"'"))
				hide(from, to)
				next = followNone
				if nxt {
					next = followWhole
				}
				i = max(to, k.valStart)
				continue
			case ok && envNames[strings.ToLower(k.name)] && k.sep != ' ':
				from, to, _ := value(s, k, depth)
				pending = SecretName(strings.Trim(s[from:to], " \t\"'"))
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
		// A quoted flag in a list (a JSON argv, Python's repr of one) is
		// followed by its value: ["--api-key", "S"].
		if j < len(s) && s[j] == ',' && k.name[0] == '-' {
			k.sep, k.valStart = ',', j+1
			return k, true
		}
	} else {
		// TOML and INI: name = value.
		t := j
		for t < len(s) && (s[t] == ' ' || s[t] == '\t') {
			t++
		}
		if t > j && t < len(s) && (s[t] == '=' || s[t] == ':') {
			k.sep, k.spaced, k.valStart = s[t], true, t+1
			return k, true
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
	// A header, JSON, YAML, TOML or INI value.
	colon := k.sep == ':' || k.spaced
	switch {
	case k.sep == ' ':
		skip(" \t\r\n")
		// A YAML list of arguments: "- --api-key\n  - VALUE".
		if strings.ContainsAny(s[k.valStart:v], "\r\n") && strings.HasPrefix(s[v:], "- ") {
			v += 2
			skip(" \t")
		}
		if v == len(s) {
			return v, v, true // --token as the last word: the next argument
		}
	case k.sep == ',':
		skip(" \t\r\n")
	case colon:
		if k.quoted {
			skip(" \t\r\n")
		} else {
			skip(" \t")
		}
		if v == len(s) {
			return v, v, true // "Authorization:": the next argument
		}
		if s[v] == '\r' || s[v] == '\n' {
			if depth > 0 {
				return v, v, false
			}
			from, to := block(s, k.start, v) // YAML: the value on the lines below
			return from, to, false
		}
	case k.start == 0:
		return v, len(s), false // --NAME=VALUE, NAME=VALUE: the rest of the argument
	}
	if v == len(s) {
		return v, v, false
	}
	// What ends the value, by carrier.
	var ends string
	switch {
	case k.sep == ',':
		ends = "\r\n,}]"
	case k.sep == ' ':
		ends = " \t\r\n"
	case !colon:
		ends = " \t\r\n;&,\"'}])#"
	case depth > 0:
		ends = "\r\n,}]"
	default:
		ends = "\r\n"
	}
	end := v
	switch c := s[v]; {
	case c == '"' || c == '\'':
		// A quoted value, unless more of it follows the closing quote
		// (X-Api-Key: "a"b, a shell's "a"b).
		q := closeQuote(s, v)
		rest := ""
		if q < len(s) {
			rest = strings.TrimLeft(s[q+1:], " \t")
		}
		// On a header or YAML line a '#' may be part of the value
		// (X-Api-Key: "" #x): the rest of the line is hidden with it.
		comment := rest != "" && rest[0] == '#' && !(colon && depth == 0)
		if rest == "" || strings.IndexByte(ends, rest[0]) >= 0 || comment {
			return v + 1, q, false
		}
		end = q + 1
	case (c == '{' || c == '[') && k.sep != ' ':
		return v, closeBracket(s, v), false
	}
	stop := func(set string) {
		for end < len(s) && strings.IndexByte(set, s[end]) < 0 {
			end++
		}
	}
	switch {
	case k.sep == ',':
		stop(ends)
	case k.sep == ' ':
		stop(" \t\r\n")
		// --authorization Bearer TOKEN: the scheme and the word after it.
		if schemes[strings.ToLower(s[v:end])] {
			e := end
			for e < len(s) && (s[e] == ' ' || s[e] == '\t') {
				e++
			}
			if e == len(s) {
				next = true
			} else if !isSpace(s[e]) {
				end = e
				stop(" \t\r\n")
			}
		}
	case !colon, depth > 0:
		stop(ends)
	default: // a header or YAML value runs to the end of its line
		stop(ends)
		if blockScalar(s[v:end]) {
			_, to := block(s, k.start, end) // password: |
			return v, max(to, end), false
		}
	}
	// A name that follows a quote (a header inside a `sh -c` string) has
	// its value end at that quote.
	if k.start > 0 && !k.quoted && (s[k.start-1] == '"' || s[k.start-1] == '\'') {
		if q := strings.IndexByte(s[v:end], s[k.start-1]); q >= 0 {
			end = v + q
		}
	}
	next = next || colon && end == len(s) && schemes[strings.ToLower(strings.TrimSpace(s[v:end]))]
	return v, end, next
}

// blockScalar reports whether a YAML value is a block scalar's header
// (|, >, |-, >+2, with an optional comment): its text is on the lines below.
func blockScalar(v string) bool {
	v, _, _ = strings.Cut(v, " #")
	v = strings.TrimSpace(v)
	return v != "" && (v[0] == '|' || v[0] == '>') && strings.Trim(v[1:], "+-123456789") == ""
}

// block returns the span of the YAML block below a key: the lines after the
// line break at s[pos] that are indented more than the key at s[keyStart],
// from the first one's text to the last one's end ([pos, pos) if none).
func block(s string, keyStart, pos int) (from, to int) {
	col := keyStart - (strings.LastIndexByte(s[:keyStart], '\n') + 1)
	from, to = -1, pos
	for pos < len(s) {
		ls := pos + 1
		if s[pos] == '\r' && ls < len(s) && s[ls] == '\n' {
			ls++
		}
		le := len(s)
		if k := strings.IndexAny(s[ls:], "\r\n"); k >= 0 {
			le = ls + k
		}
		line := s[ls:le]
		pos = le
		if strings.TrimSpace(line) == "" {
			continue
		}
		ind := len(line) - len(strings.TrimLeft(line, " \t"))
		if ind <= col {
			break
		}
		if from < 0 {
			from = ls + ind
		}
		to = le
	}
	if from < 0 {
		return to, to
	}
	return from, to
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
