package redact

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// shownValue returns what an output argument shows as a value: all of it,
// or what follows a flag's or an assignment's name (names are shown), and
// whether it followed a name there.
func shownValue(o string) (v string, isNamed bool) {
	if flag(o) {
		name, v, ok := strings.Cut(o, "=")
		switch {
		case ok:
			o, isNamed = v, true
		case name[1] != '-':
			return name[2:], false // a single-dash option may hold a glued value
		default:
			return "", false
		}
	}
	for {
		k, v, ok := strings.Cut(o, "=")
		if !ok || !plainName(k) {
			return o, isNamed
		}
		o, isNamed = v, true
	}
}

// vetted reports whether an output argument shows only names and values
// the allowlist admits: Mask, inline code's length, a plain value (also a
// compound of two words where it is an option's value: after a name, or
// after an option, afterOption), a file's path, a Hydra deletion, or a URL
// whose pieces are each one of these or a host.
func vetted(o string, afterOption bool) bool {
	v, isNamed := shownValue(o)
	j := asValue
	if isNamed || afterOption && !flag(o) {
		j = asNamed
	}
	if Hidden(o) || v == "" || v == Mask || plainAs(v, j) || filePath(v) || strings.HasPrefix(v, "~") && plainName(v) {
		return true
	}
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok || !schemeName(scheme) {
		return false
	}
	for _, p := range strings.FieldsFunc(rest, func(r rune) bool { return strings.ContainsRune(":/?#&;=@", r) }) {
		if p != Mask && !plainValue(p) && !hostname(p) && !plainName(p) {
			return false
		}
	}
	return true
}

// FuzzArgv: for any command line, no value the allowlist does not admit
// survives (vetted), the value of a secret-looking environment variable
// never shows, and Argv never panics or changes the number of arguments.
//
//	go test -run '^$' -fuzz FuzzArgv -fuzztime 15s ./redact
func FuzzArgv(f *testing.F) {
	f.Add("hunter22", "--password=%s")
	f.Add("sk-123", "--api-key\x00%s")
	f.Add("t0k3n", "https://u:%s@h/x")
	f.Add("abcd", "db.password=%s")
	f.Add("x y", "http://h/?token=%s")
	f.Add("plainword", "train.py\x00--tag\x00%s\x00-c\x00%s")
	f.Fuzz(func(t *testing.T, secret, form string) {
		args := append([]string{"prog"}, strings.Split(strings.ReplaceAll(form, "%s", secret), "\x00")...)
		out := New([]string{"MY_TOKEN=" + secret}).Argv(args)
		if len(out) != len(args) {
			t.Fatalf("Argv(%q) has %d arguments, want %d", args, len(out), len(args))
		}
		for i, o := range out[1:] {
			prev := out[i]
			if !vetted(o, i > 0 && flag(prev) && !strings.Contains(prev, "=")) {
				t.Fatalf("Argv shows %q (from %q) in %q", o, args[i+1], out)
			}
			if len(secret) >= 4 && strings.Contains(o, secret) {
				t.Fatalf("the environment's secret %q is left in %q (from %q)", secret, out, args)
			}
		}
	})
}

// carriers put a secret (%s; %q escaped for a URL query, %u for a URL's
// user information, %j as a JSON string) where the rule hides it whatever
// it looks like: under a name that says secret, in a URL's user
// information, in inline code, in text.
var carriers = [][]string{
	{"--password=%s"}, {"--api-key", "%s"}, {"-api-key=%s"}, {"db.password=%s"}, {"+db.password=%s"},
	{"--secretkey=%s"}, {"--privatekey", "%s"}, {"--accesskey=%s"}, {"--api-key2=%s"}, {"--token_2", "%s"},
	{"--passcode", "%s"}, {"--cfg.secrets.0=%s"}, {"--hfToken", "%s"}, {"--client_secret=%s"}, {"--jwt", "%s"},
	{"AWS_SECRET_ACCESS_KEY=%s"}, {"--env=HF_TOKEN=%s"}, {"-e", "HF_TOKEN=%s"}, {"--authorization", "%s"},
	{"https://user:%u@host/path"}, {"https://%u@github.com/org/repo.git"}, {"--db=postgres://u:%u@h:5432/d"},
	{"http://h:5000/?token=%q&x=1"}, {"https://h/x?sv=2022-11-02&sig=%q"}, {"https://h/cb#access_token=%q&state=1"},
	{"python", "-c", "import os; os.environ['HF_TOKEN']='%s'"}, {"bash", "-lc", "export T=%s; python train.py"},
	{"printf", "[auth]\npassword=%s\n"}, {"env:\n- value: %s\n  name: HF_TOKEN\n"}, {`[{"value": "%s", "name": "T"}]`},
	{"-H", "Authorization: Bearer %s"}, {`{"api_key": "%s"}`}, {"token: %s"}, {"password = %s"},
}

// fill puts secret into a carrier, after a program.
func fill(carrier []string, secret string) []string {
	j, _ := json.Marshal(secret)
	r := strings.NewReplacer("%s", secret, "%q", url.QueryEscape(secret), "%u", url.PathEscape(secret), "%j", string(j))
	out := []string{"prog"}
	for _, a := range carrier {
		out = append(out, r.Replace(a))
	}
	return out
}

// leakedShown is leaked over the arguments that are not hidden whole (a
// code length holds no input text).
func leakedShown(out []string, secret string) string {
	var shown []string
	for _, o := range out {
		if !Hidden(o) {
			shown = append(shown, o)
		}
	}
	return leaked(shown, secret)
}

// FuzzCarriers: a generated secret in every carrier is hidden by the rule
// alone, even when it looks plain. Secrets are drawn from the bytes
// tokens, keys and passwords are made of.
//
//	go test -run '^$' -fuzz FuzzCarriers -fuzztime 10s ./redact
func FuzzCarriers(f *testing.F) {
	for i := range carriers {
		f.Add("hunter2-Secret", uint8(i))
		f.Add("AbC+/dEf==", uint8(i))
		f.Add("sunshine", uint8(i))
	}
	f.Fuzz(func(t *testing.T, raw string, idx uint8) {
		secret := strings.Map(func(r rune) rune {
			if r < 0x80 && (isLetter(byte(r)) || isDigit(byte(r)) || strings.ContainsRune("+/=_.~-", r)) {
				return r
			}
			return -1
		}, raw)
		carrier := carriers[int(idx)%len(carriers)]
		// Too short to tell from the carrier's own text, or part of it.
		if len(secret) < 4 || leaked(fill(carrier, ""), secret) != "" {
			return
		}
		in := fill(carrier, secret)
		out := New(nil).Argv(in)
		if a := leakedShown(out, secret); a != "" {
			t.Fatalf("secret %q left in %q\n in: %q\nout: %q", secret, a, in, out)
		}
	})
}

// freeCarriers take a secret of any printable bytes, spaces and quotes
// included.
var freeCarriers = [][]string{
	{"--password", "%s"}, {"--password=%s"}, {"--authorization", "Bearer %s"}, {"-H", "Authorization: Bearer %s"},
	{"X-Api-Key: %s"}, {`{"api_key": %j, "lr": 0.1}`}, {"password = %j"}, {"token: %j"}, {`["--api-key", %j]`},
	{"password: |\n  %s\n"}, {"https://user:%u@host/p"}, {"http://h/?token=%q&x=1"}, {"python", "-c", "%s"},
	{"sh", "-c", "curl -u admin:%s https://h/x"},
}

// FuzzFreeCarriers: a generated secret of any printable bytes in each of
// freeCarriers is hidden.
//
//	go test -run '^$' -fuzz FuzzFreeCarriers -fuzztime 10s ./redact
func FuzzFreeCarriers(f *testing.F) {
	for i := range freeCarriers {
		f.Add(`p a"s's #;&,}]`, uint8(i))
	}
	f.Fuzz(func(t *testing.T, raw string, idx uint8) {
		secret := strings.Map(func(r rune) rune {
			if r >= 0x20 && r < 0x7f {
				return r
			}
			return -1
		}, raw)
		carrier := freeCarriers[int(idx)%len(freeCarriers)]
		// Too short to tell apart, or text the carrier holds once hidden.
		if len(strings.TrimSpace(secret)) < 4 || leaked(fill(carrier, Mask), secret) != "" {
			return
		}
		in := fill(carrier, secret)
		out := New(nil).Argv(in)
		if a := leakedShown(out, secret); a != "" {
			t.Fatalf("secret %q left in %q\n in: %q\nout: %q", secret, a, in, out)
		}
	})
}
