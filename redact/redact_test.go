package redact

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

func TestArgv(t *testing.T) {
	r := New([]string{"HF_TOKEN=hf_envsecret", "MLFLOW_TRACKING_PASSWORD=pw", "PATH=/usr/bin", "WANDB_API_KEY=wandbkey123"})
	cases := []struct{ in, want []string }{
		{[]string{"python", "train.py", "--password=hunter2", "--epochs", "3"},
			[]string{"python", "train.py", "--password=***", "--epochs", "3"}},
		{[]string{"python", "--api-key", "sk-123", "--token", "tok", "--lr", "0.1"},
			[]string{"python", "--api-key", "***", "--token", "***", "--lr", "0.1"}},
		{[]string{"x", "--db-pass", "-starts-with-dash"}, []string{"x", "--db-pass", "***"}},
		{[]string{"x", "--hftoken=abc", "--apikey", "k", "--client_secret=s"}, []string{"x", "--hftoken=***", "--apikey", "***", "--client_secret=***"}},
		{[]string{"x", "db.password=s3cret", "lr=0.1", "AWS_SECRET_ACCESS_KEY=zz"}, []string{"x", "db.password=***", "lr=0.1", "AWS_SECRET_ACCESS_KEY=***"}},
		{[]string{"x", "--uri", "https://user:pw123@host/p?token=abc&x=1"}, []string{"x", "--uri", "https://user:***@host/p?token=***&x=1"}},
		{[]string{"x", "--db=postgres://u:pass99@h:5432/d"}, []string{"x", "--db=postgres://u:***@h:5432/d"}},
		{[]string{"x", "hf_envsecret", "--tag=wandbkey123x"}, []string{"x", "***", "--tag=***x"}},
		// A value that starts like a URL is still a value (found by FuzzCarriers).
		{[]string{"x", "X-Api-Key://00", "token://s3cr"}, []string{"x", "X-Api-Key:***", "token:***"}},
		// A password after a user flag, and only it.
		{[]string{"curl", "-u", "admin:pw1234", "-U", "bob", "--user=a:b:c", "-u", "x:"}, []string{"curl", "-u", "admin:***", "-U", "bob", "--user=a:***", "-u", "x:***"}},
		{[]string{"python", "-u", "train.py", "--lr", "0.1"}, []string{"python", "-u", "train.py", "--lr", "0.1"}},
		// Not secret: single letters, look-alikes.
		{[]string{"x", "-p", "8080", "--max-tokens", "5", "--tokenizer", "gpt2", "--key-file", "k.pem", "--monkey", "1"},
			[]string{"x", "-p", "8080", "--max-tokens", "5", "--tokenizer", "gpt2", "--key-file", "k.pem", "--monkey", "1"}},
	}
	for _, tc := range cases {
		if got := r.Argv(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Argv(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestURI(t *testing.T) {
	for in, want := range map[string]string{
		"http://u:p@h:5000":                 "http://u:***@h:5000",
		"http://h:5000/?api_key=k&run=1":    "http://h:5000/?api_key=***&run=1",
		"http://h:5000":                     "http://h:5000",
		"sqlite:///mlflow.db":               "sqlite:///mlflow.db",
		"http://u:p%zz@h":                   "http://u:***@h",
		"https://h/x?Signature=abc&Expires": "https://h/x?Signature=***&Expires",
		// The user name alone may be a token (https://<token>@github.com).
		"https://ghp_abc@github.com/o/r.git":               "https://***@github.com/o/r.git",
		"https://ghp_abc:x-oauth-basic@github.com/o/r.git": "https://***@github.com/o/r.git",
		"https://ghp_abc:@h/x":                             "https://***@h/x",
		// A password holding '/' makes the URL unparsable: still hidden.
		"https://u:a/b@h/p": "https://u:***@h/p",
		// Cloud SAS and presigned URLs; the order and form of the rest kept.
		"https://a.blob.core.windows.net/c/b?sv=2022-11-02&se=2030-01-01&sp=r&sig=AbC%2Bd%3D":                                "https://a.blob.core.windows.net/c/b?sv=2022-11-02&se=2030-01-01&sp=r&sig=***",
		"https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA%2F20240101%2Fs3&X-Amz-Date=20240101T000000Z&X-Amz-Signature=f00": "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Date=20240101T000000Z&X-Amz-Signature=***",
		"https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature=0a1b":                         "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature=***",
		"https://h/cb#access_token=xyz&state=1":                                                                              "https://h/cb#access_token=***&state=1",
	} {
		if got := URI(in); got != want {
			t.Errorf("URI(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestShortEnvValuesIgnored(t *testing.T) {
	// A 2-letter "secret" would mask every occurrence of common text.
	if got := New([]string{"X_TOKEN=ab"}).String("abc"); got != "abc" {
		t.Errorf("got %q", got)
	}
	if got := New([]string{"X_TOKEN=abcd"}).String("1abcd2"); strings.Contains(got, "abcd") {
		t.Errorf("got %q", got)
	}
}

// carriers are the formats people pass secrets in, one argv each: %s is the
// secret, %q the secret escaped for a URL query, %u for a URL's user
// information. Each must hide it without knowing it from the environment.
var carriers = [][]string{
	// Flags and assignments.
	{"--password=%s"}, {"--api-key", "%s"}, {"-api-key=%s"}, {"db.password=%s"}, {"+db.password=%s"},
	{"--authorization", "%s"}, {"--creds=%s"}, {"--pw", "%s"}, {"--sessionid=%s"}, {"--session-id", "%s"},
	{"--client_secret=%s"}, {"--hftoken", "%s"}, {"AWS_SECRET_ACCESS_KEY=%s"}, {"--env=HF_TOKEN=%s"},
	{"-e", "HF_TOKEN=%s"}, {"--jwt", "%s"},
	// A user and password (curl, wget).
	{"curl", "-u", "admin:%s", "https://h/x"}, {"--user=admin:%s"}, {"--proxy-user", "p:%s"},
	{"sh", "-c", "curl -u admin:%s https://h/x"},
	// URLs: credentials, query and fragment tokens, cloud SAS and presigned URLs.
	{"https://user:%u@host/path"}, {"https://%u@github.com/org/repo.git"}, {"--db=postgres://u:%u@h:5432/d"},
	{"http://h:5000/?token=%q&x=1"},
	{"https://acct.blob.core.windows.net/c/b?sv=2022-11-02&se=2030-01-01&sr=b&sp=r&sig=%q"},
	{"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=%q&X-Amz-Signature=%q&X-Amz-Security-Token=%q"},
	{"https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=%q&X-Goog-Signature=%q"},
	{"https://h/cb#access_token=%q&state=1"},
	{"s3.amazonaws.com/b/k?Signature=%q&Expires=1"},
	// Azure connection strings.
	{"DefaultEndpointsProtocol=https;AccountName=a;AccountKey=%s;EndpointSuffix=core.windows.net"},
	{"--connection-string", "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=%s"},
	// HTTP header arguments, whole or split (curl -H, httpie).
	{"-H", "Authorization: Bearer %s"}, {"--header=Authorization: Bearer %s"}, {"--header", "Authorization:", "Bearer %s"},
	{"-H", "Authorization: Bearer", "%s"}, {"-H", "X-Api-Key: %s"}, {"X-Api-Key:%s"}, {"Proxy-Authorization: Basic %s"},
	{"-H", "Cookie: theme=dark; session=%s"}, {"-H", "X-Auth-Token: %s"},
	// JSON and YAML fragments.
	{`{"api_key": "%s"}`}, {`{"apiKey":"%s","user":"u"}`}, {`{"auth": {"token": "%s"}}`}, {`{"credentials": ["%s"]}`},
	{`--config-json={"wandb": {"api_key": "%s"}, "lr": 0.1}`}, {"token: %s"}, {"db:\n  password: %s\n  user: u\n"},
	{"{token: %s, user: u}"}, {"secretKey: '%s'"}, {`{"privateKey":"%s"}`},
	// A command line inside one argument (sh -c).
	{"sh", "-c", "python train.py --wandb-api-key %s --lr 0.1"},
	{"bash", "-c", `curl -H "Authorization: Bearer %s" https://h/x`},
	{"sh", "-c", "export HF_TOKEN=%s; python train.py"},
	// TOML and INI; YAML values below their key; plural names.
	{"password = \"%s\""}, {"[db]\npassword = %s\nuser = u\n"}, {"{user = \"u\", token = \"%s\"}"},
	{"password: |\n  %s\n"}, {"db:\n  password: >-\n    %s\n    %s\n  user: u\n"}, {"db:\n  password:\n    %s\n"},
	{"api_keys: %s"}, {"--api-keys", "%s"}, {"--secrets=%s"},
	// Argument lists as JSON, Python's repr and YAML.
	{`["python", "train.py", "--api-key", "%s"]`}, {`['--hf-token', '%s']`}, {"args:\n  - --api-key\n  - %s\n"},
	// Environment lists (Kubernetes, ECS).
	{"env:\n- name: HF_TOKEN\n  value: %s\n"}, {`[{"name": "WANDB_API_KEY", "value": "%s"}]`},
	// An auth scheme and its credentials as separate words.
	{"--authorization", "Bearer", "%s"}, {"sh", "-c", "client --authorization Bearer %s --v"},
	// A token as a URL's user name, with an empty or placeholder password.
	{"https://%u:x-oauth-basic@github.com/o/r.git"}, {"https://%u:@h/x"},
}

// freeCarriers take a secret of any printable characters (spaces and quotes
// included): its whole argument, a quoted string escaped as JSON (%j), the
// rest of a header line or a YAML block.
var freeCarriers = [][]string{
	{"--password", "%s"}, {"--password=%s"}, {"--authorization", "Bearer %s"}, {"-H", "Authorization: Bearer %s"},
	{"X-Api-Key: %s"}, {`{"api_key": %j, "lr": 0.1}`}, {"password = %j"}, {"token: %j"}, {`["--api-key", %j]`},
	{"password: |\n  %s\n"}, {"db:\n  password:\n    %s\nuser: u"}, {"https://user:%u@host/p"}, {"http://h/?token=%q&x=1"},
}

// fill puts secret into a carrier.
func fill(carrier []string, secret string) []string {
	out := make([]string, len(carrier))
	j, _ := json.Marshal(secret)
	r := strings.NewReplacer("%s", secret, "%q", url.QueryEscape(secret), "%u", url.PathEscape(secret), "%j", string(j))
	for i, a := range carrier {
		out[i] = r.Replace(a)
	}
	return out
}

// leaked reports where secret (or its URL-escaped forms) is left in out.
func leaked(out []string, secret string) string {
	for _, a := range out {
		j, _ := json.Marshal(secret)
		for _, form := range []string{secret, url.QueryEscape(secret), url.PathEscape(secret), string(j[1 : len(j)-1])} {
			if strings.Contains(a, form) {
				return a
			}
		}
	}
	return ""
}

func TestEveryCarrierHidesTheSecret(t *testing.T) {
	check := func(c []string, secret string) {
		in := fill(c, secret)
		out := New(nil).Argv(in)
		if a := leaked(out, secret); a != "" {
			t.Errorf("Argv(%q): the secret is left in %q", in, a)
		}
		if len(out) != len(in) {
			t.Errorf("Argv(%q) has %d arguments", in, len(out))
		}
	}
	for _, c := range carriers {
		check(c, "Zq7-s3cr3t_V4lue+/=")
	}
	for _, c := range freeCarriers {
		check(c, `Zq7 "s3cr3t" 'V4l:ue' #x;y&z,1}]`)
	}
}

// Ordinary arguments pass unchanged: the rule must not cost the record of
// what ran.
func TestOrdinaryArgumentsKept(t *testing.T) {
	for _, args := range [][]string{
		{"python", "train.py", "--lr", "0.1", "--epochs=3", "-p", "8080", "--max-tokens", "5", "--tokenizer", "gpt2"},
		{"x", "--key-file", "k.pem", "--monkey", "1", "--tokens=5", "--keys", "a,b", "--passes", "2", "--author", "me"},
		{"x", "--output-dir", "s3://bucket/path/to", "--model", "org/model:v1", "--uri", "http://host:5000/api?run=1&x=2"},
		{"x", "--prompt", "The key to success: hard work", "--note", "token budget: 100", "trainer.max_epochs=3", "PATH=/usr/bin"},
		{"x", `{"lr": 0.1, "key_file": "k.pem", "token_budget": 100, "tokens": 5}`, "schedule:\n  warmup: 100\n  decay: cosine\n"},
		{"x", "--auth-type=oauth", "--signature-version", "v4", "--session", "main", "--sig-figs", "3", "time=12:30:00"},
		{"torchrun", "--nproc-per-node=8", "--rdzv-endpoint=host:29400", "train.py", "--config", "cfg/base.yaml"},
		{"sh", "-c", "python train.py --lr 0.1 && echo done; ls -la /data"},
		{"x", "[train]\nlr = 0.1\nepochs = 3\n", `["python", "train.py", "--lr", "0.1"]`, "args:\n  - --lr\n  - 0.1\n"},
		{"x", "env:\n- name: EPOCHS\n  value: 3\n", `{"name": "lr", "value": 0.1}`, "notes: |\n  a run\n", "--authorization-mode", "rbac"},
	} {
		if got := New(nil).Argv(args); !reflect.DeepEqual(got, args) {
			t.Errorf("Argv changed ordinary arguments:\n got %q\nwant %q", got, args)
		}
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
		"--session-id": true, "sessionId": true, "Proxy-Authorization": true, "+db.password": true, "privateKey": true,
		"--max-tokens": false, "maxTokens": false, "--tokenizer": false, "keyFile": false, "monkey": false, "--author": false,
		"--sig-figs": false, "secretName": false, "--passes": false, "": false, "--": false,
		"api_keys": true, "--api-keys": true, "passwords": true, "AWS_SECRET_KEYS": true, "--keys": false, "--tokens": false, "maxNewTokens": false,
	} {
		if got := SecretName(name); got != want {
			t.Errorf("SecretName(%q) = %v, want %v", name, got, want)
		}
	}
}
