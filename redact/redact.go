// Package redact hides secrets wherever bridge records the child's command
// line (run tags, run name, the spool, logs). The rule, documented in
// docs/reliability.md:
//
//   - a secret-looking name is one whose last word (words split at '-', '_',
//     '.') is password, passwd, pass, pwd, passphrase, secret, token, key,
//     apikey, auth, credential(s), cookie or signature, or that ends in
//     password, secret, token or apikey (--hftoken, --apikey);
//   - --NAME=VALUE and NAME=VALUE with a secret-looking NAME: VALUE is replaced;
//   - --NAME VALUE (or -NAME VALUE) with a secret-looking NAME: the next
//     argument is replaced, whatever it looks like;
//   - single-letter flags (-p) are not treated as secret: their meaning
//     differs from tool to tool;
//   - a URL's password (user:pass@) and the values of its secret-looking
//     query parameters (?token=) are replaced;
//   - the value of every secret-looking environment variable (at least 4
//     characters long) is replaced wherever it appears.
//
// Replaced text becomes Mask.
package redact

import (
	"net/url"
	"sort"
	"strings"
)

// Mask replaces a secret.
const Mask = "***"

var lastWords = map[string]bool{
	"password": true, "passwd": true, "pass": true, "pwd": true, "passphrase": true,
	"secret": true, "token": true, "key": true, "apikey": true, "auth": true,
	"credential": true, "credentials": true, "cookie": true, "signature": true,
}

var suffixes = []string{"password", "secret", "token", "apikey"}

// SecretName reports whether a flag, variable or parameter name looks like
// it holds a secret.
func SecretName(name string) bool {
	n := strings.ToLower(strings.TrimLeft(name, "-"))
	if n == "" {
		return false
	}
	words := strings.FieldsFunc(n, func(r rune) bool { return r == '-' || r == '_' || r == '.' })
	if len(words) == 0 {
		return false
	}
	if lastWords[words[len(words)-1]] {
		return true
	}
	joined := strings.Join(words, "")
	for _, s := range suffixes {
		if strings.HasSuffix(joined, s) {
			return true
		}
	}
	return false
}

// Redactor replaces secrets; the zero value knows no environment secrets.
type Redactor struct {
	values []string // secret values from the environment, longest first
}

// New returns a Redactor that also hides the values of env's secret-looking
// variables (env as os.Environ gives it).
func New(env []string) *Redactor {
	r := &Redactor{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if ok && len(v) >= 4 && SecretName(k) {
			r.values = append(r.values, v)
		}
	}
	// Longest first, so that a secret containing another is hidden whole.
	sort.Slice(r.values, func(i, j int) bool { return len(r.values[i]) > len(r.values[j]) })
	return r
}

// Argv returns a copy of argv with secret values replaced.
func (r *Redactor) Argv(argv []string) []string {
	out := make([]string, len(argv))
	nextIsSecret := false
	for i, a := range argv {
		switch {
		case nextIsSecret:
			out[i] = Mask
			nextIsSecret = false
			continue
		case strings.HasPrefix(a, "-") && len(a) > 2:
			name, _, hasValue := strings.Cut(a, "=")
			if SecretName(name) {
				// The name itself may hold an environment secret too.
				if hasValue {
					out[i] = r.String(name) + "=" + Mask
				} else {
					out[i], nextIsSecret = r.String(a), true
				}
				continue
			}
		case !strings.HasPrefix(a, "-"):
			if name, _, ok := strings.Cut(a, "="); ok && SecretName(name) && !strings.ContainsAny(name, "/:") {
				out[i] = r.String(name) + "=" + Mask
				continue
			}
		}
		out[i] = r.String(a)
	}
	return out
}

// String hides URL credentials and known secret values in s.
func (r *Redactor) String(s string) string {
	// Until nothing is left: a secret that begins or ends with the mask's
	// own characters can reappear next to a mask. Each replacement shortens
	// s (secrets are longer than the mask), so this ends.
	for changed := r != nil; changed; {
		changed = false
		for _, v := range r.values {
			if strings.Contains(s, v) {
				s, changed = strings.ReplaceAll(s, v, Mask), true
			}
		}
	}
	if strings.Contains(s, "://") || strings.Contains(s, "?") {
		s = urls(s)
	}
	return s
}

// urls redacts every URL-looking field of s.
func urls(s string) string {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '"' || r == '\'' || r == ',' })
	for _, f := range fields {
		// A flag's value may carry a URL: --db=postgres://u:p@h.
		start := 0
		if i := strings.Index(f, "://"); i >= 0 {
			if j := strings.LastIndexAny(f[:i], "=:"); j >= 0 {
				start = j + 1
			}
		}
		if red := URI(f[start:]); red != f[start:] {
			s = strings.Replace(s, f[start:], red, 1)
		}
	}
	return s
}

// URI hides a URL's password and its secret-looking query values; anything
// that does not parse as a URL is returned as is.
func URI(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		// An unparsable URL may still carry user:pass@: cut it out.
		if i := strings.Index(s, "://"); i >= 0 {
			if j := strings.LastIndex(s, "@"); j > i {
				return s[:i+3] + Mask + s[j:]
			}
		}
		return s
	}
	changed := false
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Mask)
			changed = true
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if SecretName(k) {
				for i := range q[k] {
					q[k][i] = Mask
				}
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	if !changed {
		return s
	}
	// Encode escapes the mask; show it plainly.
	return strings.ReplaceAll(u.String(), url.QueryEscape(Mask), Mask)
}
