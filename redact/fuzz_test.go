package redact

import (
	"strings"
	"testing"
)

// FuzzArgv: whatever the secret, each documented form hides it, and Argv
// never panics or changes the number of arguments.
//
//	go test -run '^$' -fuzz FuzzArgv -fuzztime 15s ./redact
func FuzzArgv(f *testing.F) {
	f.Add("hunter22", "--password=%s")
	f.Add("sk-123", "--api-key\x00%s")
	f.Add("t0k3n", "https://u:%s@h/x")
	f.Add("abcd", "db.password=%s")
	f.Add("x y", "http://h/?token=%s")
	f.Fuzz(func(t *testing.T, secret, form string) {
		args := strings.Split(strings.ReplaceAll(form, "%s", secret), "\x00")
		out := New([]string{"MY_TOKEN=" + secret}).Argv(args)
		if len(out) != len(args) {
			t.Fatalf("Argv(%q) has %d arguments, want %d", args, len(out), len(args))
		}
		// The secret is also an environment secret: hidden everywhere,
		// unless too short to be one or made only of what the mask is.
		if len(secret) < 4 || strings.Trim(secret, "*") == "" {
			return
		}
		for _, a := range out {
			if strings.Contains(a, secret) {
				t.Fatalf("secret %q left in %q (from %q)", secret, out, args)
			}
		}
	})
}

// FuzzCarriers: a generated secret in every carrier format (the carriers
// table) is hidden by the rule alone, not because the environment knows it.
// Secrets are drawn from the bytes tokens, keys and signatures are made of.
//
//	go test -run '^$' -fuzz FuzzCarriers -fuzztime 10s ./redact
func FuzzCarriers(f *testing.F) {
	for i := range carriers {
		f.Add("hunter2-Secret", uint8(i))
		f.Add("AbC+/dEf==", uint8(i))
	}
	f.Fuzz(func(t *testing.T, raw string, idx uint8) {
		secret := strings.Map(func(r rune) rune {
			if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("+/=_.~-", r)) {
				return r
			}
			return -1
		}, raw)
		carrier := carriers[int(idx)%len(carriers)]
		// Too short to tell from the format's own text, or part of it.
		if len(secret) < 4 || leaked(fill(carrier, ""), secret) != "" {
			return
		}
		in := fill(carrier, secret)
		out := New(nil).Argv(in)
		if a := leaked(out, secret); a != "" {
			t.Fatalf("secret %q left in %q\n in: %q\nout: %q", secret, a, in, out)
		}
	})
}

// FuzzFreeCarriers: a generated secret of any printable characters, spaces
// and quotes included, in each carrier that can hold one (freeCarriers).
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
		if a := leaked(out, secret); a != "" {
			t.Fatalf("secret %q left in %q\n in: %q\nout: %q", secret, a, in, out)
		}
	})
}
