// Package redact decides what bridge may show of the text it was given: the
// child's command line (the bridge.command and mlflow.source.name tags, the
// run name, the spool) and every URL it prints (tracker addresses, their
// errors). The rule, stated in docs/reliability.md, is an allowlist: show
// what is plainly safe, hide every other value.
//
//   - Shown: the program (argv[0]); option names (--lr, -m); the names of
//     NAME=VALUE arguments (Hydra overrides, env assignments); the paths of
//     files named by their extension (filePath: mytrain.py,
//     nanogpt/train.py); values that are plain (plainValue: numbers,
//     paths, lists and plain words such as bf16, true,
//     meta-llama/Llama-3-8B, localhost:29500), and, as an option's value,
//     compounds of two words (myproj).
//   - Every other value becomes Mask: text with spaces or quotes, JSON,
//     YAML, INI, random-looking tokens, user:password. A single-dash
//     option whose letters after the first are not plain (-pPASSWORD)
//     shows its first letter only.
//   - A value under a secret-looking name (secretName: --api-key2 VALUE,
//     --token=VALUE, db.password=VALUE) becomes Mask whatever it looks
//     like; after --token, the next argument is its value even when it
//     starts with a dash.
//   - Code given to an interpreter (python -c, bash -lc, perl -e, node -e)
//     is recorded as its length: "<code: 52 bytes>".
//   - A URL keeps its scheme, host and port and a plain path; its user
//     information becomes Mask (its user name stays when a password
//     follows it); each query or fragment parameter is shown as NAME=VALUE
//     is.
//   - An argument holding the value of a secret-looking environment
//     variable (4 bytes or more) becomes Mask.
package redact

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// Mask replaces a hidden value.
const Mask = "***"

// codeFormat records inline code by its length.
const codeFormat = "<code: %d bytes>"

// Hidden reports whether an argument Argv returned is hidden whole (Mask or
// inline code).
func Hidden(shown string) bool {
	return shown == Mask || strings.HasPrefix(shown, "<code: ") && strings.HasSuffix(shown, " bytes>")
}

// Redactor applies the rule; it also hides the values of the environment's
// secret-looking variables. The zero value knows no environment.
type Redactor struct {
	values []string // secret values from the environment
}

// New returns a Redactor that also hides the values of env's secret-looking
// variables of 4 bytes or more (env as os.Environ gives it).
func New(env []string) *Redactor {
	r := &Redactor{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && len(v) >= 4 && secretName(k) {
			r.values = append(r.values, v)
		}
	}
	return r
}

// known reports whether s holds a secret of the environment.
func (r *Redactor) known(s string) bool {
	for _, v := range r.values {
		if strings.Contains(s, v) {
			return true
		}
	}
	return false
}

// pending is what an argument makes of the next one.
type pending int

const (
	none   pending = iota
	secret         // --token VALUE
	code           // python -c CODE
	named          // --lr VALUE: an option's value, unless it is an option itself
)

// Argv returns argv as bridge may record it: one shown argument for each.
func (r *Redactor) Argv(argv []string) []string {
	out := make([]string, len(argv))
	next, interp := none, ""
	for i, a := range argv {
		switch {
		case next == code:
			out[i], next = fmt.Sprintf(codeFormat, len(a)), none
		case next == secret:
			out[i], next = Mask, none
		case i == 0:
			out[i], interp = a, interpreter(a) // the program
		case flag(a):
			out[i], next = r.option(a, interp)
		default:
			out[i], next = r.value(a, next == named), none
			interp = interpreter(a)
		}
		if r.known(out[i]) {
			out[i] = Mask
		}
	}
	return out
}

// flag reports whether a is an option (-x, --name, --name=value), not a
// negative number or a lone "-".
func flag(a string) bool { return len(a) > 1 && a[0] == '-' && !number(a) }

func isLetter(c byte) bool { return isLower(c) || isUpper(c) }

// option shows an option: its name, and its value after '=' by the rule. A
// single-dash option whose name is not a plain word may hold a glued value
// (-pPASSWORD): only its letter is shown.
func (r *Redactor) option(a, interp string) (string, pending) {
	name, val, hasVal := strings.Cut(a, "=")
	bare := strings.TrimLeft(name, "-")
	switch {
	case a == "--":
		return a, none // the end of options
	case bare == "" || len(bare) > 64 || !nameChars(bare):
		return Mask, none
	case name[1] != '-' && len(bare) > 1 && !plainValue(bare[1:]):
		return name[:2] + Mask, none
	case hasVal && secretName(name):
		return name + "=" + Mask, none
	case hasVal:
		return name + "=" + r.value(val, true), none
	case secretName(name):
		return a, secret
	case codeFlag(interp, a):
		return a, code
	}
	return a, named
}

// value shows one value: NAME=VALUE by the rule for each side, a URL by
// URI's rule, a file's path (filePath), any other value when it is plain
// (an option's value, isNamed, also when it is a compound of two words);
// else Mask.
func (r *Redactor) value(v string, isNamed bool) string {
	if k, rest, ok := strings.Cut(v, "="); ok && plainName(k) {
		if secretName(k) {
			return k + "=" + Mask
		}
		return k + "=" + r.value(rest, true)
	}
	j := asValue
	if isNamed {
		j = asNamed
	}
	if strings.Contains(v, "://") {
		v = URI(v)
	} else if !plainAs(v, j) && !filePath(v) && !(strings.HasPrefix(v, "~") && plainName(v)) { // ~key deletes a Hydra key
		return Mask
	}
	if r.known(v) {
		return Mask
	}
	return v
}

// nameChars: the bytes of a flag's or an assignment's name.
func nameChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isLetter(c) && !isDigit(c) && !strings.ContainsRune("-_.@/", rune(c)) {
			return false
		}
	}
	return true
}

// plainName reports whether k names a NAME=VALUE argument: an environment
// variable, a Hydra key (+trainer.max_epochs, ~callbacks, hydra/launcher,
// db@backup) or a query parameter; its parts joined by '/' and '@' are
// plain words of a name.
func plainName(k string) bool {
	k = strings.TrimLeft(k, "+~")
	if k == "" || !isLetter(k[0]) {
		return false
	}
	for _, p := range strings.FieldsFunc(k, func(c rune) bool { return c == '/' || c == '@' }) {
		if _, ok := plainWord(p, asName); !ok {
			return false
		}
	}
	return true
}

// interpreters take code after these options; options of one letter may
// be grouped before -c (bash -lc, python -uc).
var interpreters = map[string][]string{
	"python": {"-c"}, "pypy": {"-c"},
	"sh": {"-c"}, "bash": {"-c"}, "zsh": {"-c"}, "dash": {"-c"}, "ksh": {"-c"}, "fish": {"-c", "--command"},
	"perl": {"-e", "-E"}, "ruby": {"-e"}, "node": {"-e", "--eval", "-p", "--print"},
	"julia": {"-e", "--eval"}, "Rscript": {"-e"}, "php": {"-r"},
}

// interpreter returns the interpreter a program path names ("python3.11"
// is "python"), or "".
func interpreter(prog string) string {
	base := strings.TrimRight(filepath.Base(prog), "0123456789.")
	if _, ok := interpreters[base]; ok {
		return base
	}
	return ""
}

// codeFlag reports whether option a of interpreter interp takes code.
func codeFlag(interp, a string) bool {
	for _, f := range interpreters[interp] {
		if a == f {
			return true
		}
	}
	grouped := interp != "" && interpreters[interp][0] == "-c"
	return grouped && a[1] != '-' && strings.HasSuffix(a, "c") && strings.Trim(a[1:], "abcdefghijklmnopqrstuvwxyzBEIOS") == ""
}

// secretWords are the words of a secret-looking name (split at '-', '_',
// '.', digits and camelCase humps); secretStems may also sit inside a word
// (--secretkey, --hftoken, AccountKey).
var secretWords = map[string]bool{
	"token": true, "key": true, "pass": true, "pwd": true, "pw": true, "creds": true, "cred": true,
	"auth": true, "authorization": true, "cookie": true, "cookies": true, "signature": true, "sig": true,
	"sas": true, "jwt": true, "private": true, "otp": true,
}

var secretStems = []string{"password", "passwd", "passcode", "passphrase", "secret", "credential",
	"apikey", "accesskey", "privatekey", "authtoken", "sessionid", "bearer"}

// secretName reports whether a flag, variable, parameter or key name says
// it holds a secret: one of its words is in secretWords, it holds one of
// secretStems, or it ends in "token" (--hftoken). --max-tokens, --tokenizer,
// --keys, --author, monkey are not secret-looking.
func secretName(name string) bool {
	joined := ""
	for _, run := range strings.FieldsFunc(name, func(c rune) bool { return c > 0x7f || !isLetter(byte(c)) }) {
		for _, w := range humps(run) {
			w = strings.ToLower(w)
			if secretWords[w] {
				return true
			}
			joined += w
		}
	}
	for _, s := range secretStems {
		if strings.Contains(joined, s) {
			return true
		}
	}
	return strings.HasSuffix(joined, "token")
}

// placeholders are passwords that say the user name is the token
// (https://TOKEN:x-oauth-basic@github.com).
var placeholders = map[string]bool{"": true, "x-oauth-basic": true}

// URI shows one URL by the rule: its scheme, host name and port; its user
// information as Mask (user:***@ when a password follows a plain user
// name); its path when plain, else Mask; each query and fragment
// parameter as NAME=VALUE is shown. Text that is not a URL is shown when
// plain. Every URL bridge prints goes through it.
func URI(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || !schemeName(scheme) {
		if plainValue(s) {
			return s
		}
		return Mask
	}
	var b strings.Builder
	b.WriteString(scheme + "://")
	if at := userinfoEnd(s, rest); at >= 0 {
		user, pw, hasPw := strings.Cut(rest[:at], ":")
		if hasPw && !placeholders[strings.ToLower(pw)] && plainValue(user) {
			b.WriteString(user + ":")
		}
		b.WriteString(Mask + "@")
		rest = rest[at+1:]
	}
	hostPath, query := rest, ""
	if k := strings.IndexAny(rest, "?#"); k >= 0 {
		hostPath, query = rest[:k], rest[k:]
	}
	host, path, hasPath := strings.Cut(hostPath, "/")
	b.WriteString(shown(host, hostname(host)))
	if hasPath {
		b.WriteString("/" + shown(path, plainValue(path)))
	}
	for query != "" {
		// query: "?a=1&b=2#c=3": its separator, then up to the next one
		end := len(query)
		if k := strings.IndexAny(query[1:], "&;#"); k >= 0 {
			end = k + 1
		}
		b.WriteString(query[:1] + param(query[1:end]))
		query = query[end:]
	}
	return b.String()
}

// schemeName reports whether s is a URL scheme as people write them: a
// small letter, then small letters, digits, '+', '.' or '-', at most 32
// (s3, mongodb+srv, mlflow-artifacts).
func schemeName(s string) bool {
	return s != "" && len(s) <= 32 && isLower(s[0]) && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789+.-") == ""
}

// userinfoEnd returns the index in rest (a URL after "://") of the '@'
// ending its user information, or -1: the last '@' of the authority (up to
// the first '/', '?' or '#'), or, in a URL that does not parse (a password
// holding '/'), the last '@' before the query.
func userinfoEnd(s, rest string) int {
	auth := rest
	if k := strings.IndexAny(rest, "/?#"); k >= 0 {
		auth = rest[:k]
	}
	if at := strings.LastIndex(auth, "@"); at >= 0 {
		return at
	}
	if _, err := url.Parse(s); err == nil {
		return -1
	}
	if k := strings.IndexAny(rest, "?#"); k >= 0 {
		rest = rest[:k]
	}
	return strings.LastIndex(rest, "@")
}

// param shows one query or fragment parameter: NAME=VALUE by the rule, a
// bare NAME when plain.
func param(p string) string {
	k, v, ok := strings.Cut(p, "=")
	switch {
	case !ok:
		return shown(p, plainValue(p))
	case !plainName(k):
		return Mask
	case secretName(k):
		return k + "=" + Mask
	}
	return k + "=" + shown(v, plainValue(v))
}

func shown(s string, plain bool) string {
	if plain || s == "" {
		return s
	}
	return Mask
}

// hostname reports whether host is a host name, an IPv4 address or a
// bracketed IPv6 address, with an optional port (mlflow:5000, [::1]:5000).
func hostname(host string) bool {
	name, port := host, ""
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		name, port = host[:i], host[i+1:]
		if !digits(port) {
			return false
		}
	}
	if strings.HasPrefix(name, "[") && strings.HasSuffix(name, "]") {
		return len(name) > 2 && strings.Trim(name[1:len(name)-1], "0123456789abcdefABCDEF:.") == ""
	}
	return name != "" && strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") == ""
}

// Text hides the secrets of every URL in s by URI's rule: for messages of
// libraries (an HTTP client's log lines) that quote URLs.
func Text(s string) string {
	fields := strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(" \t\n\"'", r) })
	for _, f := range fields {
		if strings.Contains(f, "://") {
			s = strings.Replace(s, f, URI(f), 1)
		}
	}
	return s
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
