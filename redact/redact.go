// Package redact hides secrets wherever bridge records or prints text it was
// given: the child's command line (run tags, run name, the spool), and every
// URL it prints (tracker addresses, their errors). One rule, documented in
// docs/reliability.md:
//
//   - A secret-looking name is one whose last word is password, passwd,
//     pass, pwd, pw, passphrase, secret, token, key, apikey, auth,
//     authorization, credential(s), creds, cookie, signature, sig, sas, jwt,
//     bearer or sessionid, or one of their plurals (not keys or tokens
//     alone), or that ends in password(s), secret(s), token, apikey(s),
//     sessionid(s), secretkeys, privatekeys or accesskeys (--hftoken).
//     Words are split at '-', '_', '.' and at camelCase humps (apiKey,
//     AccountKey, X-Amz-Signature). --max-tokens, --tokenizer, --key-file,
//     --keys, monkey are not secret-looking.
//   - A secret-looking name followed by its value hides the value, in every
//     carrier people pass:
//     --NAME=VALUE, -NAME=VALUE and NAME=VALUE (Hydra overrides, env
//     assignments) as an argument: the rest of the argument;
//     --NAME VALUE: the next argument, whatever it looks like, or the next
//     word inside one argument (a `sh -c` command line);
//     NAME=VALUE inside an argument, after a separator (query strings
//     ?sig=, &X-Amz-Signature=, Azure connection strings ;AccountKey=,
//     cookies, --env=HF_TOKEN=...): up to the next separator;
//     NAME: VALUE, "NAME": VALUE, 'NAME': VALUE (HTTP headers such as
//     `Authorization: Bearer ...` and `X-Api-Key: ...`, JSON, YAML): a
//     quoted string, a whole {...} or [...], else the rest of the line (in
//     a {...} or [...], up to the next ',', '}' or ']'). An argument that
//     ends with the name (`Authorization:`) or with an auth scheme alone
//     (`Authorization: Bearer`) hides the next argument;
//     TOML and INI NAME = VALUE; a YAML value on the lines below its key,
//     block scalars (password: |) included;
//     argv lists as JSON, Python or YAML (["--api-key", "S"]);
//     env lists (Kubernetes, ECS): the sibling value of name: HF_TOKEN.
//   - Single-letter flags (-p) are not secret-looking: their meaning differs
//     from tool to tool.
//   - USER:PASSWORD after -u, -U, --user or --proxy-user (curl, wget),
//     as the next argument or word or after '=': the text after the first
//     ':' (docker's -u UID:GID loses its GID).
//   - A URL's user information: its password (user:***@host), or the whole
//     of it when the password is absent, empty or x-oauth-basic
//     (https://***@host: a token given as the user name). URI applies the rule to one URL; every URL bridge
//     prints goes through it.
//   - The value of every secret-looking environment variable (at least 4
//     characters long) is hidden wherever it appears.
//
// Hidden text becomes Mask.
package redact

import (
	"net/url"
	"sort"
	"strings"
)

// Mask replaces a secret.
const Mask = "***"

var lastWords = map[string]bool{
	"password": true, "passwd": true, "pass": true, "pwd": true, "pw": true, "passphrase": true,
	"secret": true, "token": true, "key": true, "apikey": true, "auth": true, "authorization": true,
	"credential": true, "credentials": true, "creds": true, "cookie": true, "signature": true,
	"sig": true, "sas": true, "jwt": true, "bearer": true, "sessionid": true,
	// Plurals, except keys and tokens alone (--keys a,b, --tokens 5).
	"passwords": true, "passwds": true, "passphrases": true, "secrets": true, "apikeys": true,
	"cookies": true, "signatures": true, "sessionids": true,
}

var suffixes = []string{"password", "secret", "token", "apikey", "sessionid",
	"passwords", "secrets", "apikeys", "sessionids", "secretkeys", "privatekeys", "accesskeys"}

// SecretName reports whether a flag, variable, parameter, header or key
// name looks like it holds a secret.
func SecretName(name string) bool {
	words := splitWords(strings.TrimLeft(name, "-+~"))
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

// splitWords splits a name at '-', '_', '.' and camelCase humps
// (apiKey -> api key, HFToken -> hf token), lowercased.
func splitWords(n string) []string {
	var words []string
	start := 0
	upper := func(i int) bool { return i < len(n) && n[i] >= 'A' && n[i] <= 'Z' }
	lower := func(i int) bool { return i < len(n) && n[i] >= 'a' && n[i] <= 'z' }
	digit := func(i int) bool { return i < len(n) && n[i] >= '0' && n[i] <= '9' }
	for i := 0; i <= len(n); i++ {
		switch {
		case i == len(n) || n[i] == '-' || n[i] == '_' || n[i] == '.':
			if i > start {
				words = append(words, strings.ToLower(n[start:i]))
			}
			start = i + 1
		// A hump: aB (apiKey), 1B (sha256Sig), or the last capital of
		// an acronym before a word (HFToken).
		case i > start && upper(i) && (lower(i-1) || digit(i-1) || upper(i-1) && lower(i+1)):
			words = append(words, strings.ToLower(n[start:i]))
			start = i
		}
	}
	return words
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
	next := followNone
	for i, a := range argv {
		switch next {
		case followWhole:
			// --authorization Bearer TOKEN: a scheme alone leaves the
			// credentials to the argument after it.
			out[i], next = Mask, followNone
			if schemes[strings.ToLower(strings.TrimSpace(a))] {
				next = followWhole
			}
			continue
		case followPassword:
			out[i], next = r.arg(a)
			if user, _, ok := strings.Cut(out[i], ":"); ok {
				out[i] = user + ":" + Mask
			}
			continue
		}
		out[i], next = r.arg(a)
	}
	return out
}

// String hides secrets in s (a run name, a message) by the same rule as in
// one argument.
func (r *Redactor) String(s string) string {
	out, _ := r.arg(s)
	return out
}

// Text hides secrets in s by the rule, without environment values: for
// messages of libraries (an HTTP client's log lines) that may carry URLs.
func Text(s string) string { return (&Redactor{}).String(s) }

// arg redacts one argument and reports what of the next one is secret.
func (r *Redactor) arg(s string) (string, follow) {
	// Until nothing is left: a secret that begins or ends with the mask's
	// own characters can reappear next to a mask. Each replacement shortens
	// s (secrets are longer than the mask), so this ends.
	for changed := true; changed; {
		changed = false
		for _, v := range r.values {
			if strings.Contains(s, v) {
				s, changed = strings.ReplaceAll(s, v, Mask), true
			}
		}
	}
	// URLs first, as URI does: a password is hidden by where it stands
	// even when its text reads like a name and its value ("u:=0Pw=@h").
	if strings.Contains(s, "://") {
		s = urls(s)
	}
	return scan(s)
}

// urls hides the user information of every URL in s.
func urls(s string) string {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '"' || r == '\'' || r == ',' })
	for _, f := range fields {
		i := strings.Index(f, "://")
		if i < 0 {
			continue
		}
		// A flag's value may carry a URL: --db=postgres://u:p@h.
		start := 0
		if j := strings.LastIndexAny(f[:i], "=:"); j >= 0 {
			start = j + 1
		}
		if red := userinfo(f[start:]); red != f[start:] {
			s = strings.Replace(s, f[start:], red, 1)
		}
	}
	return s
}

// URI hides the secrets of one URL: its user information and the values of
// its secret-looking query and fragment parameters (?token=, &sig=,
// X-Amz-Signature=, #access_token=). Every URL bridge prints goes through
// it.
func URI(s string) string {
	out, _ := scan(userinfo(s))
	return out
}

// placeholders are passwords that say the user name is the token
// (https://TOKEN:x-oauth-basic@github.com).
var placeholders = map[string]bool{"": true, "x-oauth-basic": true}

// userinfo hides a URL's password, or its whole user information when that
// has no password (https://TOKEN@host), an empty one (https://TOKEN:@host)
// or a placeholder (https://TOKEN:x-oauth-basic@host).
func userinfo(s string) string {
	i := strings.Index(s, "://")
	if i < 0 {
		return s
	}
	rest := s[i+3:]
	// As url.Parse: the authority ends at the first '/', '?' or '#', the
	// user information at its last '@'.
	auth := rest
	if k := strings.IndexAny(rest, "/?#"); k >= 0 {
		auth = rest[:k]
	}
	at := strings.LastIndex(auth, "@")
	if at < 0 {
		if _, err := url.Parse(s); err == nil {
			return s
		}
		// Unparsable, as with a password holding a '/': up to the last
		// '@' before the query.
		q := rest
		if k := strings.IndexAny(rest, "?#"); k >= 0 {
			q = rest[:k]
		}
		if at = strings.LastIndex(q, "@"); at < 0 {
			return s
		}
	}
	if user, pw, ok := strings.Cut(rest[:at], ":"); ok && !placeholders[strings.ToLower(pw)] {
		return s[:i+3] + user + ":" + Mask + rest[at:]
	}
	return s[:i+3] + Mask + rest[at:]
}

// URLError hides the secrets of the URL in every *url.Error in err's chain,
// in place, and returns err. The net/http client's errors carry the request
// URL, query included (it strips only a password), and bridge prints them.
// Call it on the client's error before wrapping it: fmt.Errorf keeps the
// text it was made with.
func URLError(err error) error {
	for e := range chain(err) {
		if ue, ok := e.(*url.Error); ok {
			ue.URL = URI(ue.URL)
		}
	}
	return err
}

// chain yields err and everything it wraps, as errors.Is walks it.
func chain(err error) func(func(error) bool) {
	return func(yield func(error) bool) {
		var walk func(error) bool
		walk = func(e error) bool {
			if e == nil {
				return true
			}
			if !yield(e) {
				return false
			}
			switch u := e.(type) {
			case interface{ Unwrap() error }:
				return walk(u.Unwrap())
			case interface{ Unwrap() []error }:
				for _, w := range u.Unwrap() {
					if !walk(w) {
						return false
					}
				}
			}
			return true
		}
		walk(err)
	}
}
