package redact

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// marked is a corpus line's «...» spans.
var marked = regexp.MustCompile(`«([^»]*)»`)

// corpus reads a testdata file: one JSON array of arguments a line. It
// returns each line's arguments with the marks removed, what each mark
// held, and the arguments with each mark replaced by Mask.
func corpus(t *testing.T, path string) (lines, marks, masked [][]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var argv []string
		if err := json.Unmarshal([]byte(line), &argv); err != nil {
			t.Fatalf("%s:%d: %v", path, n, err)
		}
		var m []string
		hidden := make([]string, len(argv))
		for i, a := range argv {
			for _, s := range marked.FindAllStringSubmatch(a, -1) {
				m = append(m, s[1])
			}
			argv[i], hidden[i] = marked.ReplaceAllString(a, "$1"), marked.ReplaceAllString(a, Mask)
		}
		lines, marks, masked = append(lines, argv), append(marks, m), append(masked, hidden)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines, marks, masked
}

// escapes are the forms a secret may take in an argument.
func escapes(s string) []string {
	j, _ := json.Marshal(s)
	return []string{s, url.QueryEscape(s), url.PathEscape(s), string(j[1 : len(j)-1])}
}

// leaked returns the output argument that holds secret in any form, or "".
func leaked(out []string, secret string) string {
	for _, a := range out {
		for _, form := range escapes(secret) {
			if strings.Contains(a, form) {
				return a
			}
		}
	}
	return ""
}

// Every secret of the corpus (issue 30's leaks, scanner patterns, plain
// words under names that say secret, random tokens) is absent from the
// output, by the rule alone: the environment knows none of them.
func TestSecretCorpus(t *testing.T) {
	lines, secrets, _ := corpus(t, "testdata/secrets.txt")
	for i, argv := range lines {
		out := New(nil).Argv(argv)
		if len(out) != len(argv) {
			t.Errorf("Argv(%q) has %d arguments", argv, len(out))
		}
		for _, s := range secrets[i] {
			if a := leaked(out, s); a != "" {
				t.Errorf("secret %q left in %q\n in: %q\nout: %q", s, a, argv, out)
			}
		}
	}
	if len(lines) < 60 {
		t.Fatalf("the corpus has %d lines: it was not read whole", len(lines))
	}
}

// Ordinary training command lines stay readable: every argument is kept as
// it is, but for the marked values, which are hidden.
func TestOrdinaryCorpus(t *testing.T) {
	lines, _, masked := corpus(t, "testdata/ordinary.txt")
	for i, argv := range lines {
		out, want := New(nil).Argv(argv), masked[i]
		if !reflect.DeepEqual(out, want) {
			for j := range want {
				if j < len(out) && out[j] != want[j] {
					t.Errorf("argument %d: got %q, want %q", j, out[j], want[j])
				}
			}
			t.Errorf("Argv(%q)\n got %q\nwant %q", argv, out, want)
		}
	}
	if len(lines) < 20 {
		t.Fatalf("the corpus has %d lines: it was not read whole", len(lines))
	}
}

func TestArgv(t *testing.T) {
	r := New([]string{"HF_TOKEN=envsecret-hf-1", "MLFLOW_TRACKING_PASSWORD=pw", "PATH=/usr/bin", "WANDB_API_KEY=plainword"})
	for _, tc := range []struct{ in, want []string }{
		{[]string{"python", "train.py", "--password=hunter2", "--epochs", "3"}, []string{"python", "train.py", "--password=***", "--epochs", "3"}},
		{[]string{"python", "--api-key", "sk-123", "--token", "tok", "--lr", "0.1"}, []string{"python", "--api-key", "***", "--token", "***", "--lr", "0.1"}},
		// The argument after a name that says secret is its value, whatever it looks like.
		{[]string{"x", "--use_auth_token", "--lr", "0.1"}, []string{"x", "--use_auth_token", "***", "0.1"}},
		// Values of the environment's secrets, wherever they are.
		{[]string{"x", "envsecret-hf-1", "--tag=plainword", "--envsecret-hf-1"}, []string{"x", "***", "--tag=***", "***"}},
		// Text: hidden whole.
		{[]string{"x", "--prompt", "The key to success", `{"lr": 0.1}`, "a b"}, []string{"x", "--prompt", "***", "***", "***"}},
		// URLs: scheme, host, port and a plain path kept.
		{[]string{"x", "--uri", "https://user:pw123@host/p?token=abc&x=1"}, []string{"x", "--uri", "https://user:***@host/p?token=***&x=1"}},
		{[]string{"x", "--db=postgres://u:pass99@h:5432/d"}, []string{"x", "--db=postgres://u:***@h:5432/d"}},
		// Inline code: its length.
		{[]string{"bash", "-lc", "echo hi"}, []string{"bash", "-lc", "<code: 7 bytes>"}},
		{[]string{"/usr/bin/python3.12", "-u", "-c", "print(1)", "a"}, []string{"/usr/bin/python3.12", "-u", "-c", "<code: 8 bytes>", "a"}},
		// -c of a script is its own option: a plain value stays.
		{[]string{"python", "train.py", "-c", "config.yaml"}, []string{"python", "train.py", "-c", "config.yaml"}},
		// A single-dash option may hold a glued value: only its letter is shown.
		{[]string{"mysql", "-u", "root", "-pXk9mQ2zL", "-lr", "0.1"}, []string{"mysql", "-u", "root", "-p***", "-lr", "0.1"}},
		// Numbers, negative ones included, are values, not flags.
		{[]string{"x", "--shift", "-0.5", "-1", "1e-4"}, []string{"x", "--shift", "-0.5", "-1", "1e-4"}},
		{[]string{"x", "--", "-", "--x=y"}, []string{"x", "--", "-", "--x=y"}},
	} {
		if got := r.Argv(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Argv(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestShortEnvValuesIgnored(t *testing.T) {
	// A 2-letter "secret" would hide every word holding it.
	if got := New([]string{"X_TOKEN=ab"}).Argv([]string{"x", "abc"}); got[1] != "abc" {
		t.Errorf("got %q", got)
	}
}

func TestURI(t *testing.T) {
	for in, want := range map[string]string{
		"http://u:p@h:5000":              "http://u:***@h:5000",
		"http://h:5000/?api_key=k&run=1": "http://h:5000/?api_key=***&run=1",
		"http://h:5000":                  "http://h:5000",
		"http://[::1]:5000/api":          "http://[::1]:5000/api",
		"sqlite:///mlflow.db":            "sqlite:///mlflow.db",
		"http://u:p%zz@h":                "http://u:***@h",
		// The user name alone may be a token (https://<token>@github.com).
		"https://ghp_abc@github.com/o/r.git":               "https://***@github.com/o/r.git",
		"https://ghp_abc:x-oauth-basic@github.com/o/r.git": "https://***@github.com/o/r.git",
		"https://ghp_abc:@h/x":                             "https://***@h/x",
		// A password holding '/' makes the URL unparsable: still hidden.
		"https://u:a/b@h/p": "https://u:***@h/p",
		// Query and fragment parameters: names kept when plain, values by the rule.
		"https://a.blob.core.windows.net/c/b?sv=2022-11-02&se=2030-01-01&sp=r&sig=AbC%2Bd%3D": "https://a.blob.core.windows.net/c/b?sv=2022-11-02&se=2030-01-01&sp=r&sig=***",
		"https://h/cb#access_token=xyz&state=1":                                               "https://h/cb#access_token=***&state=1",
		"https://h/x?X-Amz-Signature=f00&Expires=1":                                           "https://h/x?X-Amz-Signature=***&Expires=1",
		// A path that is not plain is hidden whole.
		"https://hooks.slack.com/services/T00/B00/q8ZkW3xLp0RmT7vNc2YbHs5D": "https://hooks.slack.com/***",
		// Not a URL: shown when plain.
		"databricks": "databricks",
		"a b":        Mask,
	} {
		if got := URI(in); got != want {
			t.Errorf("URI(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestText(t *testing.T) {
	got := Text(`ERROR RESTY Post "http://tok@h:5000/api?token=abc123&x=1": connection refused`)
	if want := `ERROR RESTY Post "http://***@h:5000/api?token=***&x=1": connection refused`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// The net/http client quotes the request URL in its errors, query token
// included: URLError hides it wherever the *url.Error sits in the chain.
func TestURLError(t *testing.T) {
	inner := &url.Error{Op: "Post", URL: "http://tok123@h:5000/api?token=abc123&x=1", Err: errors.New("connection refused")}
	err := errors.Join(errors.New("other"), inner)
	got := fmt.Errorf("posting: %w", URLError(err)).Error()
	if strings.Contains(got, "abc123") || strings.Contains(got, "tok123") || !strings.Contains(got, "token=***&x=1") {
		t.Fatalf("URLError left %q", got)
	}
	if !errors.Is(err, inner) {
		t.Fatal("the chain was changed")
	}
	if URLError(nil) != nil {
		t.Fatal("URLError(nil) is not nil")
	}
}

func TestSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"--password": true, "apiKey": true, "AccountKey": true, "HFToken": true, "X-Amz-Signature": true, "sig": true,
		"--session-id": true, "Proxy-Authorization": true, "+db.password": true, "privateKey": true,
		"--secretkey": true, "--privatekey": true, "--accesskey": true, "--api-key2": true, "--token_2": true,
		"--passcode": true, "--cfg.secrets.0": true, "--hftoken": true, "AWS_SECRET_ACCESS_KEY": true, "--use_auth_token": true,
		"--max-tokens": false, "maxNewTokens": false, "--tokenizer": false, "monkey": false, "--author": false,
		"--keys": false, "--passes": false, "secretary": true, "": false, "--": false,
	} {
		if got := secretName(name); got != want {
			t.Errorf("secretName(%q) = %v, want %v", name, got, want)
		}
	}
}

// A file named by its extension is shown whatever its words (a script's
// name is what a run is known by); a token is not a file's name.
func TestFilePath(t *testing.T) {
	for v, want := range map[string]bool{
		"mytrain.py": true, "nanogpt/train.py": true, "./scripts/run_sft.sh": true, "~/exp/ds_zero3.json": true,
		"/opt/code/trainGPT.py": true, "../cfg/myexp.yaml": true, "x.R": true, "ckpt/step-1000.safetensors": true,
		"train": false, "mytrain.": false, ".py": false, "a b.py": false, "a//b.py": false, "t.exe": false,
		"3f2a9c1e-7b4d-4e2a-9c1e-7b4d3f2a9c1e.json": false, "deadbeef1234/x.py": false, "admin:hunter2.py": false,
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.dozjgNryP4J3jVmNHl0w5N": false,
	} {
		if got := filePath(v); got != want {
			t.Errorf("filePath(%q) = %v, want %v", v, got, want)
		}
	}
}

// An option's value may be a compound of two words (a project's name); a
// value on its own may not, and random letters are neither.
func TestCompoundAsOptionValue(t *testing.T) {
	for v, want := range map[string][2]bool{ // alone, as an option's value
		"myproj": {false, true}, "mytrain": {false, true}, "myexp-2": {false, true}, "baseline": {true, true},
		"qwhzkrtm": {false, false}, "x7Kq9mZp": {false, false}, "9fj3k2lq": {false, false}, "HK29X8QZ": {false, false},
	} {
		if got := [2]bool{plainValue(v), plainAs(v, asNamed)}; got != want {
			t.Errorf("%q: plain alone %v, as an option's value %v; want %v", v, got[0], got[1], want)
		}
	}
}

func TestPlainValue(t *testing.T) {
	for v, want := range map[string]bool{
		// numbers, booleans, short identifiers, names, paths, lists, addresses
		"0.1": true, "-1": true, "3e-4": true, "true": true, "False": true, "bf16": true, "nccl": true, "adamw": true,
		"cuda": true, "adamw_torch_fused": true, "meta-llama/Llama-3-8B": true, "Llama-3.1-8B-Instruct": true,
		"mistralai/Mixtral-8x7B-Instruct-v0.1": true, "EleutherAI/pythia-160m": true, "HuggingFaceH4": true,
		"./lora-alpaca": true, "~/runs/logs": true, "/mnt/fsx/cache": true, "localhost:0,1,2": true, "cuda:0": true,
		"worker-0@worker-1:0,2": true, "[64,128,256]": true, "checkpoint-1000": true, "xLSTM": true, "c10d": true,
		"sunflower": true, "2024-01-01": true, "": true,
		// random tokens, key formats, user:password, text
		"x7Kq9mZp": false, "a8f3k2j1": false, "3kq9x7za": false, "qwhzkrtm": false, "Tr0ub4dor": false,
		"AKIAIOSFODNN7EXAMPLE": false, "deadbeef12": false, "3f2a9c1e-7b4d-4e2a-9c1e-7b4d3f2a9c1e": false,
		"ghp_1A2b3C4d5E6f7G8h9I0jKlMnOpQrStUvWxYz": false, "hf_AbCdEfGhIjKlMnOpQrStUvWxYz12345678": false,
		"admin:hunter2": false, "a b": false, "kqjx-zmwq": false, "1234567890123456789012345": false,
	} {
		if got := plainValue(v); got != want {
			t.Errorf("plainValue(%q) = %v, want %v", v, got, want)
		}
	}
}

// Random tokens are not plain words. The rates are measured on seeded
// draws (deterministic); a token that passes reads like a word or a
// number, and only a name that says secret (or the environment) hides it.
// As an option's value a compound of two words passes too (myproj), which
// lets more lowercase tokens through. docs/reliability.md quotes these
// bounds.
func TestRandomTokensRarelyPlain(t *testing.T) {
	const lower, digits, upper = "abcdefghijklmnopqrstuvwxyz", "0123456789", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	r := rand.New(rand.NewPCG(30, 11))
	for _, tc := range []struct {
		alphabet   string
		n          int
		max, named float64 // highest share that may pass alone, and as an option's value
	}{
		{lower, 8, 0.002, 0.008}, {lower + digits, 8, 0.006, 0.006}, {lower + upper + digits, 8, 0.002, 0.002},
		{upper + digits, 8, 0.006, 0.006}, {lower + upper + digits + "+/", 8, 0.012, 0.012}, {lower + upper + digits + "-_", 8, 0.025, 0.025},
		{lower + upper + digits + "-_+/", 12, 0.003, 0.003}, {lower + digits, 16, 0.0001, 0.0001}, {lower + upper + digits + "-_+/", 20, 0.0001, 0.0001},
	} {
		const draws = 20000
		passed, named := 0, 0
		b := make([]byte, tc.n)
		for range draws {
			letter := false
			for i := range b {
				b[i] = tc.alphabet[r.IntN(len(tc.alphabet))]
				letter = letter || isLetter(b[i])
			}
			if letter && plainValue(string(b)) { // digits alone are a number
				passed++
			}
			if letter && plainAs(string(b), asNamed) {
				named++
			}
		}
		share, namedShare := float64(passed)/draws, float64(named)/draws
		t.Logf("%2d bytes over %-66q %.3f%% pass, %.3f%% as an option's value", tc.n, tc.alphabet, 100*share, 100*namedShare)
		if share > tc.max {
			t.Errorf("%d-byte tokens over %q: %.3f%% pass, want at most %.3f%%", tc.n, tc.alphabet, 100*share, 100*tc.max)
		}
		if namedShare > tc.named {
			t.Errorf("%d-byte tokens over %q: %.3f%% pass as an option's value, want at most %.3f%%", tc.n, tc.alphabet, 100*namedShare, 100*tc.named)
		}
	}
}

func TestHidden(t *testing.T) {
	out := New(nil).Argv([]string{"sh", "-c", "x y", "--k", "a b", "ok"})
	for i, want := range []bool{false, false, true, false, true, false} {
		if Hidden(out[i]) != want {
			t.Errorf("Hidden(%q) = %v", out[i], !want)
		}
	}
}
